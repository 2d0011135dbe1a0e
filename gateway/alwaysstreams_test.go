package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// alwaysStreams answers every request with an event stream, whether it
// asked for one or not (a server that only streams): text, or a client
// tool call when the last message says "call", or an error event when it
// says "fail".
func alwaysStreams(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	body := make([]byte, r.ContentLength)
	_, _ = r.Body.Read(body)
	head := `"id":"up-1","object":"chat.completion.chunk","created":7,"model":"up-model","system_fingerprint":"fp_1"`
	var chunks []string
	switch {
	case strings.Contains(string(body), "fail"):
		fmt.Fprint(w, "event: error\ndata: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n")
		return
	case strings.Contains(string(body), "call"):
		chunks = []string{
			`"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`,
		}
	default:
		chunks = []string{
			`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":"stop"}]`,
			`"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}`,
		}
	}
	for _, c := range chunks {
		fmt.Fprintf(w, "data: {%s,%s}\n\n", head, c)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// A JSON request whose upstream answers with an event stream gets the
// answer the stream holds, as the stream's client would accumulate it: it
// was a 502 upstream_malformed (a streaming probe), where the opposite case
// (JSON for a stream request) was already restreamed.
func TestJSONRequestAnsweredWithAStream(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(alwaysStreams))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	ctx := context.Background()
	resp, err := h.client.Chat.Completions.New(ctx, userMsg("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Choices; len(c) != 1 || c[0].Message.Content != "Hello there" || c[0].FinishReason != "stop" || resp.Usage.TotalTokens != 7 ||
		resp.Model != "gpt-x" || resp.ID != "up-1" || resp.Object != "chat.completion" || gjson.Get(resp.RawJSON(), "system_fingerprint").Str != "fp_1" {
		t.Fatalf("answer %s", resp.RawJSON())
	}
	p := userMsg("call the tool")
	p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather"})}
	resp, err = h.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Choices; len(c) != 1 || c[0].FinishReason != "tool_calls" || len(c[0].Message.ToolCalls) != 1 ||
		c[0].Message.ToolCalls[0].ID != "call_1" || c[0].Message.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` {
		t.Fatalf("tool call answer %s", resp.RawJSON())
	}
	status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fail"}]}`, nil)
	if status < 500 || !strings.Contains(string(body), "overloaded") {
		t.Fatalf("error event: %d %s", status, body)
	}
}
