package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// noIDCalls is an upstream that calls a client tool without an id (Ollama,
// some Gemini bridges) and says "stop", streamed or not.
func noIDCalls(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !gjson.GetBytes(body, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":null,`+
			`"tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range []string{
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":null}]}`,
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	} {
		fmt.Fprint(w, "data: "+c+"\n\n")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// A request offering only client tools gets the same calls whether it
// streams or not: an id made for a call the upstream sent without one, and
// finish_reason "tool_calls". The stream went through the tool loop's
// normalisation and the JSON answer did not: the JSON call had an empty id
// (no tool message can answer it) and ended "stop".
func TestClientToolCallsSameBothWays(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(noIDCalls))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	for form, c := range weatherBothWays(t, h) {
		calls := c.Message.ToolCalls
		if c.FinishReason != "tool_calls" || len(calls) != 1 || calls[0].ID == "" || calls[0].Function.Name != "get_weather" ||
			calls[0].Function.Arguments != `{"city":"Oslo"}` {
			t.Errorf("%s: finish %q calls %+v", form, c.FinishReason, calls)
		}
	}
}

// A call of the client's own tool under a slip of its name (another case)
// is the client's, under the name its code dispatches on, JSON and stream
// alike: it was taken for an unknown server tool, and the model was told
// its real tool did not exist (an MCP probe).
func TestClientToolNameSlipIsTheClients(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "Get_Weather", Arguments: `{"city":"Oslo"}`}}}
	}})
	for form, c := range weatherBothWays(t, h) {
		if len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" || c.FinishReason != "tool_calls" {
			t.Fatalf("%s: %+v finish %q", form, c.Message.ToolCalls, c.FinishReason)
		}
	}
	if n := len(h.mock.Requests()); n != 2 {
		t.Fatalf("%d upstream calls, want one each way", n)
	}
}

// A tool_choice naming a function that is neither the client's nor a
// server tool offered to the request is the gateway's 400 on tool_choice:
// relayed, the provider refused it for a request whose tools the loop had
// rewritten (a tenant probe: a server tool the tenant may not use).
func TestToolChoiceNamingNoToolRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{Text: "ok"})})
	for _, body := range []string{
		`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"function","function":{"name":"current_time"}}}`,
		`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"tool_choice":{"type":"function","function":{"name":"nosuch"}}}`,
	} {
		status, _, b := h.post("/chat/completions", body, nil)
		if status != 400 || gjson.GetBytes(b, "error.param").Str != "tool_choice" {
			t.Fatalf("%s: %d %s", body, status, b)
		}
	}
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
	ok := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`
	if status, _, b := h.post("/chat/completions", ok, nil); status != 200 {
		t.Fatalf("naming the client's tool: %d %s", status, b)
	}
}

// A tool_choice naming a tool of an MCP server that is down is not blamed on
// the client: a down server only hides its tools, and such a request goes on
// as before (a review of the refusal above).
func TestToolChoiceNamingADownServersToolNotRefused(t *testing.T) {
	t.Parallel()
	cfg := baseConfig + calculatorTool + `
[[mcp_servers]]
name = "gone"
url = "http://127.0.0.1:1/mcp"
prefix = "gone_"
`
	h := newHarness(t, cfg, mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn { return mockllm.Turn{Text: "ok"} }})
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"function","function":{"name":"gone_lookup"}}}`
	if status, _, b := h.post("/chat/completions", body, nil); status == 400 && gjson.GetBytes(b, "error.param").Str == "tool_choice" {
		t.Fatalf("a down server's tool refused as unknown: %d %s", status, b)
	}
	// A name no server could have (no configured prefix) is still refused.
	body = `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"function","function":{"name":"no_such_tool"}}}`
	if status, _, b := h.post("/chat/completions", body, nil); status != 400 || gjson.GetBytes(b, "error.param").Str != "tool_choice" {
		t.Fatalf("a name no server could have: %d %s", status, b)
	}
}

// weatherBothWays asks h about the weather with the client's get_weather
// tool, JSON and streamed, and returns each answer's choice by form.
func weatherBothWays(t *testing.T, h *harness) map[string]openai.ChatCompletionChoice {
	t.Helper()
	p := userMsg("weather in Oslo?")
	p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather"})}
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	acc, _, err := h.streamChat(p, wiretest.Options{}, wiretest.LoadSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]openai.ChatCompletionChoice{"JSON": resp.Choices[0], "stream": acc.Choices[0]}
}
