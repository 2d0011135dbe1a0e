package proxy

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// ServeAdmin serves the operator routes (/metrics, /readyz with details,
// /healthz) on ln, without keys: server.metrics_listen is meant for an
// address only operators reach. It returns when ln is closed or the server
// shuts down.
func (s *Server) ServeAdmin(ln net.Listener) error {
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			rt := s.rt.Load()
			id := s.requestID(ctx)
			ctx.Response.Header.Set("X-Request-Id", id)
			path, err := canonicalPath(string(ctx.Request.URI().PathOriginal()))
			if err == nil && !s.handleOps(ctx, rt, id, path, false) {
				err = unknownURL(path)
			}
			if err != nil {
				s.writeError(ctx, rt, id, "", err, time.Now())
			}
		},
		Name:                  "llmgw-admin",
		ReadTimeout:           s.srv.ReadTimeout,
		IdleTimeout:           s.srv.IdleTimeout,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		Logger:                s.srv.Logger,
	}
	s.adminMu.Lock()
	s.admin = append(s.admin, srv)
	s.adminMu.Unlock()
	return srv.Serve(ln)
}
