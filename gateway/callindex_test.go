package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// Pitfall, from the upstream side: some OpenAI-compatible servers (Ollama,
// SGLang, some Gemini bridges) stream every parallel tool call at index 0,
// each with its own id, or send no index at all. Relayed as they came,
// openai-go's accumulator would merge the calls into one, with the first name
// and the argument objects run together. The stream the client gets numbers
// them apart (the tool loop's accumulator re-encodes every client call).
func TestUpstreamCallIndexesRepaired(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return "data: " + head + delta + `,"finish_reason":` + f + "}]}\n\n"
	}
	for _, tc := range []struct{ name, body string }{
		{"all at index 0", ev(`{"role":"assistant","content":null}`, "") +
			ev(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"lookup_city","arguments":"{\"city\":"}}]}`, "") +
			ev(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}`, "") +
			ev(`{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"local_time","arguments":"{\"tz\":"}}]}`, "") +
			ev(`{"tool_calls":[{"index":0,"function":{"arguments":"\"CET\"}"}}]}`, "") +
			ev(`{}`, "tool_calls") + "data: [DONE]\n\n"},
		{"no index", ev(`{"role":"assistant","content":null}`, "") +
			ev(`{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"lookup_city","arguments":"{\"city\":\"Oslo\"}"}}]}`, "") +
			ev(`{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"local_time","arguments":"{\"tz\":"}}]}`, "") +
			ev(`{"tool_calls":[{"function":{"arguments":"\"CET\"}"}}]}`, "") +
			ev(`{}`, "tool_calls") + "data: [DONE]\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(up.Close)
			h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
			acc, err := sdkStream(h, toolParams())
			if err != nil {
				t.Fatal(err)
			}
			calls := acc.Choices[0].Message.ToolCalls
			if len(calls) != 2 || calls[0].ID != "call_a" || calls[0].Function.Name != "lookup_city" || calls[0].Function.Arguments != `{"city":"Oslo"}` ||
				calls[1].ID != "call_b" || calls[1].Function.Name != "local_time" || calls[1].Function.Arguments != `{"tz":"CET"}` {
				t.Fatalf("openai-go accumulated %+v", calls)
			}
			raw, _ := h.lastRaw()
			if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
		})
	}
}
