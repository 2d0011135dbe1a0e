package proxy

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// modelsCreated is the fixed "created" of configured models: they have no
// upstream creation date, and a stable value keeps responses cacheable.
const modelsCreated = 1767225600

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// Policy is what the routes outside the chat pipeline need of the tenant
// policies; the chat pipeline applies the same rules as request middleware,
// so a body is judged the same on every route. Implementations are safe for
// concurrent use.
type Policy interface {
	// Open reports whether the gateway runs without keys.
	Open() bool
	// Authenticate maps a credential to its tenant, or returns a 401 error.
	Authenticate(credential string) (*pipeline.Tenant, error)
	// Admit applies t's body size, model allow-list and token caps to r
	// (r.Endpoint names the route); it may replace r.Body.
	Admit(t *pipeline.Tenant, r *pipeline.Request) error
	// AllowsPath reports whether t may use a pass-through path.
	AllowsPath(t *pipeline.Tenant, path string) bool
	// ModelEndpoint reports whether a path's body names the model it calls:
	// such a body must be JSON or a form, so that the model is judged.
	ModelEndpoint(path string) bool
	// AllowsModel reports whether t may use a configured model.
	AllowsModel(t *pipeline.Tenant, model string) bool
	// RestrictsModels reports whether t may use only some models.
	RestrictsModels(t *pipeline.Tenant) bool
	// Guard applies t's request-stage guardrails to the texts of r, a JSON
	// body that passed Admit and goes to a model outside the chat pipeline;
	// it may replace r.Body.
	Guard(t *pipeline.Tenant, r *pipeline.Request) error
	// Redact applies t's request-stage redactions to r, a Responses
	// request the pipeline serves (and judges again once translated), so
	// that what is stored of it holds no redacted text; it may replace
	// r.Body.
	Redact(t *pipeline.Tenant, r *pipeline.Request) error
	// BodyLimit returns t's body limit in bytes; 0 = the server's.
	BodyLimit(t *pipeline.Tenant) int
	// Limit applies the tenant's rate limits and budgets to r, which
	// passed Admit (r.ID names it), as the chat pipeline's limits layer
	// applies them to a chat request: a request, its estimated input
	// tokens and a slot in flight, or a 429. The Call it returns holds
	// the slot until it ends (exchange.call: finish ends it).
	Limit(r *pipeline.Request) (Call, error)
}

// Call is a pass-through request that Policy.Limit admitted. Safe for
// concurrent use.
type Call interface {
	// Charge records the call once its upstream answered (a model call's
	// 2xx), charging u: the usage its answer reported, or the gateway's
	// estimate of it. estimateInput replaces u's prompt tokens with an
	// estimate of the request body's, as the chat meter does for a call
	// that reports no usage.
	Charge(u wire.ChatUsage, estimateInput bool)
	// End frees what the request holds (its slot in flight) once its
	// answer has ended, whatever the end. Only the first End counts.
	End()
}

// authenticate resolves the caller's tenant; nil with a nil error when the
// runtime applies no policy.
func (rt *Runtime) authenticate(ctx *fasthttp.RequestCtx) (*pipeline.Tenant, error) {
	if rt.Policy == nil {
		return nil, nil
	}
	return rt.Policy.Authenticate(bearer(&ctx.Request.Header))
}

// tenant is authenticate for a handler: on failure it writes the error and
// reports false, and the handler returns.
func (s *Server) tenant(ctx *fasthttp.RequestCtx, x *exchange) (*pipeline.Tenant, bool) {
	t, err := x.rt.authenticate(ctx)
	if err != nil {
		s.writeError(ctx, x, err)
		return nil, false
	}
	x.tenant = tenantName(t) // every line of an authenticated request names its tenant
	return t, true
}

// buildModels renders /v1/models and each /v1/models/{id} once per config.
func buildModels(cfg *config.Config) ([]byte, map[string][]byte) {
	list := struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{Object: "list", Data: []modelObject{}}
	one := make(map[string][]byte, len(cfg.Models))
	for _, m := range cfg.Models {
		o := modelObject{ID: m.Name, Object: "model", Created: modelsCreated, OwnedBy: m.OwnedBy}
		list.Data = append(list.Data, o)
		one[m.Name], _ = json.Marshal(o)
	}
	sort.Slice(list.Data, func(i, j int) bool { return list.Data[i].ID < list.Data[j].ID })
	all, _ := json.Marshal(list)
	return all, one
}

// handleModels lists the models the caller's tenant may use, and answers
// 404 for one it may not, exactly as for a model that does not exist.
func (s *Server) handleModels(ctx *fasthttp.RequestCtx, x *exchange, path string) {
	rt := x.rt
	t, ok := s.tenant(ctx, x)
	if !ok {
		return
	}
	restricted := rt.Policy != nil && rt.Policy.RestrictsModels(t)
	ctx.SetContentType("application/json")
	if path == modelsRoute {
		if !restricted {
			ctx.SetBody(rt.modelsJSON)
			return
		}
		ctx.SetBody(filterModels(rt.modelsJSON, func(name string) bool { return rt.Policy.AllowsModel(t, name) }))
		return
	}
	name := strings.TrimPrefix(path, modelsRoute+"/")
	if len(name) > maxModelField {
		// As on every route that names a model.
		s.writeError(ctx, x, pipeline.BadRequest("model", "model must be at most %d bytes", maxModelField))
		return
	}
	b, ok := rt.modelJSON[name]
	if ok && restricted && !rt.Policy.AllowsModel(t, name) {
		ok = false
	}
	if !ok {
		s.writeError(ctx, x, modelNotFound(name))
		return
	}
	ctx.SetBody(b)
}

func modelNotFound(name string) error { return pipeline.ModelNotFound(name) }

// filterModels returns the list body all with only the models keep accepts.
func filterModels(all []byte, keep func(string) bool) []byte {
	var list struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}
	_ = json.Unmarshal(all, &list) // our own rendering
	kept := list.Data[:0]
	for _, m := range list.Data {
		if keep(m.ID) {
			kept = append(kept, m)
		}
	}
	list.Data = kept
	b, _ := json.Marshal(list)
	return b
}
