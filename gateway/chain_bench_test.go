package gateway

import (
	"context"
	"io"
	"testing"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/policies"
	"github.com/llmgw/gateway/toolloop"
)

// chainConfig configures every middleware, none of which triggers for the
// benchmark's request: a valid key and allowed model (policy), caching on but
// the request has no temperature (bypass), context editing far below its
// trigger, prompt_cache none with nothing to strip, fallback that succeeds at
// once, and a server tool for another model only (the loop's fast path).
const chainConfig = `
[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
[[models]]
name = "gpt-x"
provider = "up"
context_window = 128000
fallbacks = ["gpt-y"]
[[models]]
name = "gpt-y"
provider = "up"
context_window = 128000
[[tools]]
name = "calculator"
kind = "builtin"
models = ["gpt-y"]
[[keys]]
tenant = "team"
key = "sk-team"
[[policies]]
tenant = "team"
models = ["gpt-*"]
max_tokens = 4096
[middleware.cache]
enabled = true
`

var chainBody = []byte(`{"model":"gpt-x","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is the capital of Norway?"}],"max_tokens":64}`)

var instantAnswer = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Oslo.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22}}`)

// BenchmarkFullChain compares the bare upstream handler with the full
// request and model-call chains composed in Build's order, around an
// upstream that answers at once, so the difference is the middleware's own
// cost on a request none of them acts on.
func BenchmarkFullChain(b *testing.B) {
	cfg, err := config.Parse([]byte(chainConfig))
	if err != nil {
		b.Fatal(err)
	}
	log := zerolog.New(io.Discard)
	upstream := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: instantAnswer}, nil
	})
	routes := map[string]*pipeline.Route{}
	for _, m := range cfg.Models {
		routes[m.Name] = &pipeline.Route{Name: m.Name, ContextWindow: m.ContextWindow, Encoding: m.Encoding, Fallbacks: m.Fallbacks,
			Deployments: []pipeline.Target{{Provider: "up", Upstream: m.Upstream, Weight: 1, Model: m.Name}}}
	}
	lookup := func(n string) *pipeline.Route { return routes[n] }
	fb := fallback.New(fallback.Options{Providers: cfg.Providers, Models: cfg.Models, Fallback: cfg.Middleware.Fallback, Logger: log}, lookup)
	ce := contextedit.New(contextedit.Options{Config: cfg.Middleware.ContextEdit, Logger: log})
	pc := caching.NewPromptCache(caching.PromptOptions{Providers: caching.PromptProviders(cfg.Providers), Logger: log})
	for _, r := range routes {
		r.ModelLayer = pipeline.Chain(upstream, fb, ce, pc)
	}
	engine, err := policies.New(cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	loop, err := toolloop.New(toolloop.Options{Tools: cfg.Tools, Loop: cfg.ToolLoop, Lookup: lookup, NewEditLog: contextedit.NewEditLog, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	cacheCfg := cfg.Middleware.Cache
	cacheCfg.Enabled = true
	cache := caching.NewResponseCache(caching.Options{Config: cacheCfg, Store: caching.NewMemoryStore(1 << 20), Logger: log})
	full := pipeline.Chain(loop, engine.Middleware(), cache)

	run := func(b *testing.B, h pipeline.Handler) {
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			req := &pipeline.Request{ID: "r", Body: chainBody, Model: "gpt-x", Route: routes["gpt-x"], Credential: "sk-team", Meta: &pipeline.Meta{}}
			resp, err := h.Chat(ctx, req)
			if err != nil || len(resp.Body) == 0 {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, upstream) })
	b.Run("full", func(b *testing.B) { run(b, full) })
}
