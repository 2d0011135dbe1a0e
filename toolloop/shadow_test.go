package toolloop

import (
	"context"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// A client tool named after a server tool that is not offered to the
// request (another model's, or outside the tenant's policy) is the
// client's own: the request is not refused, the upstream gets the client's
// definition, and a call of that name goes back to the client, the server
// tool never running.
func TestClientToolShadowsUnofferedServerTool(t *testing.T) {
	t.Parallel()
	shipped, err := config.Load("../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	const clientDef = `{"type":"function","function":{"name":%q,"description":"the client's own","parameters":{"type":"object"}}}`
	cases := []struct {
		name, tool, model string
		tools             []config.Tool
		tenant            *pipeline.Tenant
	}{
		// config.toml scopes write_todos to the model demo; deepagents
		// define a write_todos of their own.
		{name: "shipped config, other model", tool: "write_todos", model: "demo-text", tools: shipped.Tools},
		{name: "tenant policy", tool: "current_time", model: "gpt-x", tools: []config.Tool{calcTool, timeTool},
			tenant: &pipeline.Tenant{Name: "t", Policy: toolPolicy(func(name string) bool { return name == "calculator" })}},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: " json", true: " stream"}[stream], func(t *testing.T) {
				t.Parallel()
				l := newLoop(t, tc.tools, nil)
				args := `{"todos":[]}`
				m := &fakeModel{turns: []turnFn{always(
					[]string{
						chunk("up", `{"role":"assistant","content":null}`, ""),
						chunk("up", callWhole(0, "c1", tc.tool, args), ""),
						chunk("up", `{}`, "tool_calls"),
						usageChunk("up", 1, 1, 0),
					},
					completion("up", "", `[{"id":"c1","type":"function","function":{"name":`+q(tc.tool)+`,"arguments":`+q(args)+`}}]`, "tool_calls", 1, 1))}}
				body := `{"model":` + q(tc.model) + `,"messages":[{"role":"user","content":"plan"}],"tools":[` + strings.Replace(clientDef, "%q", q(tc.tool), 1) + `]`
				if stream {
					body += `,"stream":true`
				}
				req := request(m, stream, body+`}`)
				req.Model, req.Tenant = tc.model, tc.tenant
				resp, err := l.Chat(context.Background(), req)
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				var name, finish string
				if stream {
					sum := checkStream(t, sse(t, resp.Stream), false)
					if len(sum.ToolCalls) != 1 {
						t.Fatalf("tool calls %+v", sum.ToolCalls)
					}
					name, finish = sum.ToolCalls[0].Name, sum.FinishReason
				} else {
					name = gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.0.function.name").String()
					finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").String()
				}
				if name != tc.tool || finish != "tool_calls" || m.calls() != 1 {
					t.Fatalf("call %q finish %q after %d upstream calls: the client's call must come back to it", name, finish, m.calls())
				}
				defs := gjson.GetBytes(m.body(0), `tools.#(function.name==`+tc.tool+`)#.function.description`).Array()
				if len(defs) != 1 || defs[0].Str != "the client's own" {
					t.Fatalf("upstream got the definitions %v of %s", defs, tc.tool)
				}
			})
		}
	}
}

// A server tool that is offered still reserves its name.
func TestClientToolNameClashOffered(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{calcTool, timeTool}, nil)
	m := &fakeModel{turns: []turnFn{always(nil, "{}")}}
	req := request(m, false, userBody+`,"tools":[{"type":"function","function":{"name":"current_time"}}]}`)
	req.Tenant = &pipeline.Tenant{Name: "t", Policy: toolPolicy(func(name string) bool { return name == "current_time" })}
	_, err := l.Chat(context.Background(), req)
	pe, ok := err.(*pipeline.Error)
	if !ok || pe.Status != 400 || pe.Param != "tools" || !strings.Contains(pe.Message, "reserved") || m.calls() != 0 {
		t.Fatalf("err %v", err)
	}
}
