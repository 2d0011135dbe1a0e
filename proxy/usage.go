package proxy

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
)

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
	if err := s.usageAllowed(ctx, rt); err != nil {
		s.writeError(ctx, x, err)
		return
	}
	if rt.Usage == nil {
		s.writeError(ctx, x, unknownURL(usageRoute))
		return
	}
	args := ctx.QueryArgs()
	to := x.start.UTC()
	from := to.AddDate(0, 0, -30)
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
		}
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
func (s *Server) usageAllowed(ctx *fasthttp.RequestCtx, rt *Runtime) error {
	if rt.Policy != nil {
		if t, err := rt.authenticate(ctx); err == nil && t != nil && t.Admin {
			return nil
		}
	}
	if rt.Config.Server.AdminKey != "" {
		if rt.adminKeyOK(ctx) {
			return nil
		}
		return pipeline.Forbidden(pipeline.CodeAdminRequired, "The usage API needs a key with role = \"admin\" or the admin key.")
	}
	if rt.Policy == nil || rt.Policy.Open() {
		return nil
	}
	return pipeline.Forbidden(pipeline.CodeAdminRequired, "The usage API needs a key with role = \"admin\".")
}
