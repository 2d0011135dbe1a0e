package proxy

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
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

func (s *Server) handleModels(ctx *fasthttp.RequestCtx, rt *Runtime, id, path string) {
	start := time.Now()
	if rt.Auth != nil {
		if _, err := rt.Auth(bearer(&ctx.Request.Header)); err != nil {
			s.writeError(ctx, rt, id, "", err, start)
			return
		}
	}
	ctx.SetContentType("application/json")
	if path == "/v1/models" {
		ctx.SetBody(rt.modelsJSON)
		return
	}
	name := strings.TrimPrefix(path, "/v1/models/")
	b, ok := rt.modelJSON[name]
	if !ok {
		s.writeError(ctx, rt, id, "", modelNotFound(name), start)
		return
	}
	ctx.SetBody(b)
}

func modelNotFound(name string) error {
	e := pipeline.Errorf(404, "invalid_request_error", "model_not_found",
		"The model '%s' does not exist or you do not have access to it.", truncate(name, 200))
	e.Param = "model"
	return e
}

func (s *Server) handleReady(ctx *fasthttp.RequestCtx, rt *Runtime) {
	ok, details := true, map[string]string{}
	if rt.Ready != nil {
		ok, details = rt.Ready()
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
