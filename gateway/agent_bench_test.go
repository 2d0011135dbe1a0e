package gateway

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// agentBase offers gpt-x one server tool, so every request runs the tool
// loop, whose answer (instantAnswer) calls none.
const agentBase = `
[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
[[models]]
name = "gpt-x"
provider = "up"
context_window = 128000
[[keys]]
tenant = "team"
key = "sk-team"
[[tools]]
name = "calculator"
kind = "builtin"
`

// agentMiddleware configures every agent middleware so that none of them
// acts on the benchmark's request: the tool needs approval but is not
// called, tool selection starts above the request's tool count,
// summarisation waits for a context far larger than the prompt, and the
// tool and model call limits are not reached.
const agentMiddleware = `
approval = "always"
max_calls = 5
[tool_loop]
max_tool_calls = 20
max_model_calls = 10
[middleware.tool_select]
model = "gpt-x"
max_tools = 10
[middleware.context_edit]
last_resort = "summarize"
summary_model = "gpt-x"
`

// BenchmarkAgentMiddleware measures what the agent middleware (human
// approval, LLM tool selection, summarisation, tool and model call limits)
// add to a tool-loop request when configured but not triggered: "agent"
// reports added-ns/op against "none", measured in the same run.
func BenchmarkAgentMiddleware(b *testing.B) {
	var none float64
	var noneAllocs float64
	for _, c := range []struct{ name, toml string }{{"none", agentBase}, {"agent", agentBase + agentMiddleware}} {
		b.Run(c.name, func(b *testing.B) {
			cfg, err := config.Parse([]byte(c.toml))
			if err != nil {
				b.Fatal(err)
			}
			offered := false
			upstream := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				offered = bytes.Contains(r.Body, []byte(`"calculator"`))
				return &pipeline.Response{Body: instantAnswer}, nil
			})
			rt, err := build(cfg, zerolog.New(io.Discard), seams{upstream: upstream})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(rt.Close)
			route := rt.Routes["gpt-x"]
			send := func() {
				req := &pipeline.Request{ID: "r", Body: chainBody, Model: "gpt-x", Route: route, Credential: "sk-team", Meta: &pipeline.Meta{}}
				resp, err := rt.Chat.Chat(context.Background(), req)
				if err != nil || len(resp.Body) == 0 {
					b.Fatal(err)
				}
			}
			send()
			if !offered {
				b.Fatal("the request did not run the tool loop: no server tool offered upstream")
			}
			b.ReportAllocs()
			allocs := testing.AllocsPerRun(100, send)
			for b.Loop() {
				send()
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if c.name == "none" {
				none, noneAllocs = ns, allocs
				return
			}
			b.ReportMetric(ns-none, "added-ns/op")
			b.ReportMetric(allocs-noneAllocs, "added-allocs/op")
		})
	}
}
