package proxy

// The operator routes: /healthz, /readyz and /metrics (on the main
// listener and on server.metrics_listen) and the usage API, each guarded
// by the admin credential where it must be.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

// ServeAdmin serves the operator routes (/metrics, /readyz with details,
// /healthz) on ln, without keys: server.metrics_listen is meant for an
// address only operators reach. It returns when ln is closed or the server
// shuts down.
func (s *Server) ServeAdmin(ln net.Listener) error {
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			x := s.begin(ctx, s.rt.Load())
			err := unsupportedVersion(ctx)
			var path string
			if err == nil {
				path, err = canonicalPath(string(ctx.Request.URI().PathOriginal()))
			}
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
	return srv.Serve(&retryListener{Listener: ln, log: &s.log})
}

// handleOps serves the operator routes (/healthz, /readyz, /metrics) and
// reports whether path was one of them. On the main listener (main) they
// are guarded: /metrics needs the admin key once the gateway has keys or an
// admin key (or is refused there when metrics_listen serves it), and
// /readyz shows its details only to an admin; its status stays public for
// load balancers. The separate metrics listener is trusted as a whole.
func (s *Server) handleOps(ctx *fasthttp.RequestCtx, x *exchange, path string, main bool) bool {
	rt := x.rt
	if path != "/healthz" && path != "/readyz" && path != "/metrics" {
		return false
	}
	if path == "/metrics" {
		var err error
		if main {
			err = rt.admin(ctx) // before the method: a 404 where metrics_listen serves them
		}
		if err != nil {
			s.writeError(ctx, x, err)
			return true
		}
		if !ctx.IsGet() && !ctx.IsHead() {
			// Health checks answer any method (HAProxy's httpchk sends
			// OPTIONS by default); the metrics are read with GET.
			s.methodNotAllowed(ctx, x, "GET, HEAD")
			return true
		}
	}
	switch path {
	case "/healthz":
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"status":"ok"}`)
	case "/readyz":
		s.handleReady(ctx, rt, !main || rt.admin(ctx) == nil)
	default:
		serveMetrics(ctx)
	}
	return true
}

// admin checks the admin credential for an operator route on the main
// listener: nil when allowed.
func (rt *Runtime) admin(ctx *fasthttp.RequestCtx) error {
	cfg := rt.Config.Server
	if cfg.MetricsListen != "" {
		return pipeline.NotFound(pipeline.CodeUnknownURL, "Metrics are served on the metrics listener.")
	}
	if cfg.AdminKey == "" {
		if rt.Policy == nil || rt.Policy.Open() {
			return nil // an open gateway keeps its operator routes open
		}
		return pipeline.Forbidden(pipeline.CodeAdminRequired,
			"This gateway has keys: set server.admin_key or server.metrics_listen to read operator routes.")
	}
	if !rt.adminKeyOK(ctx) {
		return pipeline.Unauthorized(nil, "This route needs the gateway's admin key.")
	}
	return nil
}

// adminKeyOK reports whether the request carries server.admin_key (set).
func (rt *Runtime) adminKeyOK(ctx *fasthttp.RequestCtx) bool {
	k := rt.Config.Server.AdminKey
	if k == "" {
		return false
	}
	got := sha256.Sum256([]byte(bearer(&ctx.Request.Header)))
	want := sha256.Sum256([]byte(k))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func (s *Server) handleReady(ctx *fasthttp.RequestCtx, rt *Runtime, showDetails bool) {
	ok, details := true, map[string]string{}
	if rt.Ready != nil {
		ok, details = rt.Ready()
	}
	if s.draining.Load() {
		ok = false
		if details == nil {
			details = map[string]string{}
		}
		details["gateway"] = "shutting down"
	}
	if !showDetails {
		details = nil
	}
	body, _ := json.Marshal(struct {
		Ready   bool              `json:"ready"`
		Details map[string]string `json:"details,omitempty"`
	}{ok, details})
	ctx.SetContentType("application/json")
	if !ok {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
	ctx.SetBody(body)
}

var metricsHandler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(observe.Registry, promhttp.HandlerOpts{}))

func serveMetrics(ctx *fasthttp.RequestCtx) { metricsHandler(ctx) }

// handleUsage is GET /v1/gateway/usage?tenant=&from=&to=&group_by=: tokens,
// requests and cost, for keys with role = "admin" (or the server's admin
// key; anyone on a gateway without keys or admin key). from and to are
// dates (2006-01-02, UTC); the default is the last 30 days.
func (s *Server) handleUsage(ctx *fasthttp.RequestCtx, x *exchange) {
	rt := x.rt
	if !ctx.IsGet() {
		s.methodNotAllowed(ctx, x, fasthttp.MethodGet)
		return
	}
	if err := s.usageAllowed(ctx, x); err != nil {
		s.writeError(ctx, x, err)
		return
	}
	if rt.Usage == nil {
		s.writeError(ctx, x, unknownURL(usageRoute))
		return
	}
	args := ctx.QueryArgs()
	to := x.start.UTC()
	from := time.Time{} // default: the 30 days up to to, to included
	fromSet := false    // a from given (0001-01-01 too) is judged as given
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &from}, {"to", &to}} {
		if v := args.Peek(p.name); len(v) > 0 {
			t, err := time.Parse("2006-01-02", string(v))
			if err != nil {
				s.writeError(ctx, x, pipeline.BadRequest(p.name, "%s must be a date like 2026-01-31", p.name))
				return
			}
			*p.t = t
			fromSet = fromSet || p.name == "from"
		}
	}
	if !fromSet {
		from = to.AddDate(0, 0, -29)
	}
	body, err := rt.Usage(context.Background(), string(args.Peek("tenant")), from, to, string(args.Peek("group_by")))
	if err != nil {
		s.writeError(ctx, x, err)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// usageAllowed admits keys with role = "admin", the server's admin key,
// or, on a gateway with neither keys nor an admin key, anyone.
// A missing or unknown key is a 401, as on every other route; a tenant's
// key without the role is a 403. The access line names the tenant of a
// key it read, admitted or not.
func (s *Server) usageAllowed(ctx *fasthttp.RequestCtx, x *exchange) error {
	rt := x.rt
	var authErr error
	if rt.Policy != nil {
		t, err := rt.authenticate(ctx)
		if err == nil && t != nil {
			x.tenant = tenantName(t)
			if t.Admin {
				return nil
			}
		}
		authErr = err
	}
	if rt.Config.Server.AdminKey != "" {
		if rt.adminKeyOK(ctx) {
			return nil
		}
		if authErr != nil {
			return authErr
		}
		return pipeline.Forbidden(pipeline.CodeAdminRequired, "The usage API needs a key with role = \"admin\" or the admin key.")
	}
	if rt.Policy == nil || rt.Policy.Open() {
		return nil
	}
	if authErr != nil {
		return authErr
	}
	return pipeline.Forbidden(pipeline.CodeAdminRequired, "The usage API needs a key with role = \"admin\".")
}
