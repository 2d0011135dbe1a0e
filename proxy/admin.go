package proxy

import (
	"net"

	"github.com/valyala/fasthttp"
)

// ServeAdmin serves the operator routes (/metrics, /readyz with details,
// /healthz) on ln, without keys: server.metrics_listen is meant for an
// address only operators reach. It returns when ln is closed or the server
// shuts down.
func (s *Server) ServeAdmin(ln net.Listener) error {
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			x := s.begin(ctx, s.rt.Load())
			path, err := canonicalPath(string(ctx.Request.URI().PathOriginal()))
			if err == nil && !s.handleOps(ctx, x, path, false) {
				err = unknownURL(path)
			}
			if err != nil {
				s.writeError(ctx, x, err)
			}
			s.end(ctx, x)
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
