package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// A client tool named after a server tool the request is not offered (the
// tool is scoped to another model, or the tenant's policy leaves it out) is
// the client's own: not refused as "reserved", sent upstream as the
// client's definition, and the model's call of it comes back to the
// client, the server tool never running. An offered one still reserves its
// name.
func TestClientToolNamedAfterUnofferedServerTool(t *testing.T) {
	t.Parallel()
	respond := mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "write_todos", Arguments: `{"todos":[]}`}}}
	}}
	open := newHarness(t, strings.Replace(todosConfig, "{{SYSTEM}}", "", 1), respond)
	team := newHarness(t, strings.Replace(todosConfig, "{{SYSTEM}}", "", 1)+`
[[keys]]
tenant = "team"
key = "sk-client"
[[policies]]
tenant = "team"
tools = ["calculator"]
`, respond)
	auth := map[string]string{"Authorization": "Bearer sk-client"}
	const tools = `,"tools":[{"type":"function","function":{"name":"write_todos","description":"the client's own","parameters":{"type":"object"}}}]`
	for _, tc := range []struct {
		name  string
		h     *harness
		model string
	}{
		{"a model the tool is not scoped to", open, "plain"},
		{"a tenant whose policy leaves the tool out", team, "gpt-x"},
	} {
		for _, stream := range []bool{false, true} {
			body := `{"model":"` + tc.model + `","messages":[{"role":"user","content":"plan it"}]` + tools
			if stream {
				body += `,"stream":true`
			}
			status, _, out := tc.h.post("/chat/completions", body+`}`, auth)
			if status != http.StatusOK {
				t.Fatalf("%s, stream %v: status %d: %s", tc.name, stream, status, out)
			}
			s := string(out)
			if stream {
				s = strings.TrimPrefix(lastFinishLine(s), "data: ")
			}
			if !strings.Contains(string(out), `"name":"write_todos"`) || gjson.Get(s, "choices.0.finish_reason").Str != "tool_calls" {
				t.Fatalf("%s, stream %v: the client's call did not come back: %s", tc.name, stream, out)
			}
		}
		reqs := tc.h.mock.Requests()
		last := reqs[len(reqs)-1].Body
		if defs := gjson.GetBytes(last, `tools.#(function.name=="write_todos")#.function.description`).Array(); len(defs) != 1 || defs[0].Str != "the client's own" {
			t.Fatalf("%s: the upstream got write_todos as %v", tc.name, defs)
		}
		if len(gjson.GetBytes(last, `messages.#(role=="tool")#`).Array()) != 0 {
			t.Fatalf("%s: the server tool ran: %s", tc.name, last)
		}
	}
	// Offered (gpt-x, no policy): the name is the server tool's.
	status, _, out := open.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"plan it"}]`+tools+`}`, nil)
	if status != http.StatusBadRequest || !strings.Contains(string(out), "reserved by a server-side tool") {
		t.Fatalf("offered: status %d: %s", status, out)
	}
}

// lastFinishLine returns the stream's data line that carries a
// finish_reason.
func lastFinishLine(body string) string {
	last := ""
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "data: ") && gjson.Get(l[len("data: "):], "choices.0.finish_reason").Str != "" {
			last = l
		}
	}
	return last
}

// An upstream answer the tool loop cannot follow (its one choice at index
// 1, for a request of one choice) is 502 upstream_malformed as JSON and an upstream_malformed error
// event on a stream, never an empty 200 "stop".
func TestToolLoopStrayChoiceIsMalformed(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gjsonStream(r) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, d := range []string{`{"role":"assistant","content":""}`, `{"content":"hello"}`} {
				fmt.Fprintf(w, "data: %s\n\n", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":1,"delta":`+d+`,"finish_reason":null}]}`)
			}
			fmt.Fprintf(w, "data: %s\n\n", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}`)
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":1,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	// The calculator puts the JSON request on the loop too (a stream that
	// offers client tools takes it anyway).
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1")+`
[[tools]]
name = "calculator"
kind = "builtin"
`, mockllm.Options{})
	const body = `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"mine","parameters":{"type":"object"}}}]`
	status, _, out := h.post("/chat/completions", body+`}`, nil)
	if status != http.StatusBadGateway || gjson.GetBytes(out, "error.code").Str != "upstream_malformed" {
		t.Fatalf("JSON: status %d: %s", status, out)
	}
	status, _, out = h.post("/chat/completions", body+`,"stream":true}`, nil)
	s := string(out)
	if status == http.StatusOK {
		if !strings.Contains(s, "event: error") || strings.Contains(s, "hello") || strings.Contains(s, `"finish_reason":"stop"`) {
			t.Fatalf("stream: %s", s)
		}
		out = []byte(strings.TrimPrefix(lastDataLine(s), "data: "))
	}
	if gjson.GetBytes(out, "error.code").Str != "upstream_malformed" {
		t.Fatalf("stream: status %d: %s", status, s)
	}
}
