package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// An Anthropic-kind upstream that answers a stream request with a JSON
// body (a proxy in front of Anthropic that does not stream, or that puts
// an error in a 200) is read as the same body asked for as JSON: an error
// object is the error it says, with the same status and code streamed or
// not (a streamed request got a 502 with no code, a JSON one a 503
// overloaded), and a message is the stream of it.
func TestAnthropicJSONToAStreamRequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(b), "overload") {
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus","content":[{"type":"text","text":"Hi from JSON"}],`+
			`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":3}}`)
	}))
	t.Cleanup(srv.Close)
	cfg := strings.Replace(anthropicConfig, "{{MOCK}}", srv.URL, 1)
	cfg = strings.Replace(cfg, "retries = 2", "retries = 0", 1)
	h := newHarness(t, cfg, mockllm.Options{})
	var statuses, codes []string
	for _, stream := range []string{"false", "true"} {
		status, _, body := h.post("/chat/completions", `{"model":"claude-big","stream":`+stream+`,"messages":[{"role":"user","content":"overload"}]}`, nil)
		statuses = append(statuses, http.StatusText(status))
		codes = append(codes, gjson.GetBytes(body, "error.code").String())
	}
	if statuses[0] != statuses[1] || codes[0] != codes[1] || codes[0] != "overloaded" {
		t.Fatalf("JSON and stream requests: statuses %q, codes %q", statuses, codes)
	}
	acc, sum, err := h.streamChat(claudeMsg("claude-big", "hello"), wiretest.Options{}, wiretest.LoadSchema(t))
	if err != nil || acc.Choices[0].Message.Content != "Hi from JSON" || acc.Choices[0].FinishReason != "stop" {
		t.Fatalf("stream of a JSON message: %v %+v %+v", err, acc.Choices, sum)
	}
}
