package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// shapedAnswer answers every chat call with a message whose content or
// tool_calls has the type the request's last user text names.
func shapedAnswer(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	member := `"content":{"a":1}`
	if strings.Contains(gjson.GetBytes(body, "messages.0.content").Str, "calls") {
		member = `"content":"hi","tool_calls":"x"`
	}
	if !gjson.GetBytes(body, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant",`+member+`},"finish_reason":"stop"}]}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant",`+member+`},"finish_reason":null}]}`+"\n\n")
	fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
}

// Where the tool loop runs, an answer whose content is not text (an
// object) or whose tool_calls is not a list is upstream_malformed, JSON and
// stream alike: the JSON answer was relayed as it was, with a "stop" that
// contradicted its tool_calls, and the stream dropped the content or the
// calls and ended as a clean answer.
func TestLoopRefusesBadlyShapedAnswers(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(shapedAnswer))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.NewReplacer("{{MOCK}}", up.URL+"/v1", "{{HTTP}}", "http://127.0.0.1:1/").Replace(toolConfig), mockllm.Options{})
	for _, text := range []string{"content", "calls"} {
		for _, stream := range []bool{false, true} {
			status, _, body := h.post("/chat/completions", fmt.Sprintf(`{"model":"gpt-x","stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, text), nil)
			if stream {
				// The loop's stream has begun (its role chunk): it ends with
				// the error event, never [DONE].
				if status != 200 || !strings.Contains(string(body), "event: error") || !strings.Contains(string(body), `"upstream_malformed"`) ||
					strings.Contains(string(body), "[DONE]") {
					t.Errorf("%s, stream: %d %s, want an upstream_malformed error event", text, status, body)
				}
				continue
			}
			if status != http.StatusBadGateway || gjson.GetBytes(body, "error.code").Str != "upstream_malformed" {
				t.Errorf("%s: %d %s, want 502 upstream_malformed", text, status, body)
			}
		}
	}
}
