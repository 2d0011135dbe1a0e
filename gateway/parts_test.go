package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// Mistral's reasoning models send content as a list of parts, thinking and
// text, streamed and not. The client got the list's JSON as its text from
// the relay, and nothing of it when the tool loop re-encoded the stream.
// Both forms now carry the text as content and the thinking as
// reasoning_content, with and without tools.
func TestContentPartsFromUpstream(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	stream := "data: " + head + `{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"hmm"}]}]},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{"content": [{"type":"text","text":"Hel"}]},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{"content":"lo"},"finish_reason":null}]}` + "\n\n" +
		"data: " + head + `{},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"
	answer := `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":` +
		`[{"type":"thinking","thinking":[{"type":"text","text":"hmm"}]},{"type":"text","text":"Hello"}]},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	h := fixedUpstreamHarness(t, stream, answer)
	for _, tools := range []bool{false, true} {
		p := userMsg("hi")
		if tools {
			p.Tools = toolParams().Tools
		}
		acc, err := sdkStream(h, p)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := h.lastRaw()
		if acc.Choices[0].Message.Content != "Hello" || !strings.Contains(string(raw), `"reasoning_content":"hmm"`) {
			t.Fatalf("tools %v: streamed content %q\n%s", tools, acc.Choices[0].Message.Content, raw)
		}
		if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil {
			t.Fatalf("tools %v: %v\n%s", tools, err, raw)
		}
		resp, err := h.client.Chat.Completions.New(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content != "Hello" || gjson.Get(resp.Choices[0].Message.RawJSON(), "reasoning_content").Str != "hmm" {
			t.Fatalf("tools %v: JSON message %s", tools, resp.Choices[0].Message.RawJSON())
		}
	}
}

// fixedUpstreamHarness is a gateway on baseConfig whose upstream answers
// every streamed request with the event stream stream and every other with
// the JSON answer, as they are: an upstream's quirks the mock would not
// write.
func fixedUpstreamHarness(t *testing.T, stream, answer string) *harness {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if gjson.GetBytes(b, "stream").Bool() {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(up.Close)
	return newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
}
