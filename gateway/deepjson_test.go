package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// crashDepth is a nesting that, checked by a recursive validator, needs
// more than Go's 1 GB stack: the process dies of a stack overflow, which no
// recover catches. 8 MiB fits the default max_body_bytes.
const crashDepth = 8<<20 - 512

// deepJSON is value with a member "x" nested depth arrays deep.
func deepJSON(head string, depth int) string {
	return head + `"x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}"
}

// One request nested millions of levels deep gets a 400 in the OpenAI
// envelope on every route that reads a body, and the gateway goes on
// serving. Before the nesting was bounded, the first such request ended
// the process (this test binary with it).
func TestDeeplyNestedBodyIsRefused(t *testing.T) {
	t.Parallel()
	schema := wiretest.LoadSchema(t)
	h := newHarness(t, baseConfig+openPassthrough, mockllm.Options{})
	for _, path := range []string{"/chat/completions", "/responses", "/embeddings"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			body := deepJSON(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"input":"hi",`, crashDepth/2)
			status, _, resp := h.post(path, body, nil)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", status, resp)
			}
			if err := schema.ErrorBody(resp); err != nil {
				t.Fatalf("%v: %.300s", err, resp)
			}
		})
	}
	status, _, resp := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil)
	if status != http.StatusOK {
		t.Fatalf("after the deep bodies: status %d: %.300s", status, resp)
	}
}

// An upstream whose answer, or one stream event, nests millions of levels
// deep is a malformed upstream answer (502, or the stream's error event),
// not the end of the gateway.
func TestDeeplyNestedUpstreamAnswerIsRefused(t *testing.T) {
	t.Parallel()
	const head = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "chat/completions") && gjsonStream(r) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\n\n", `{"id":"c","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}]}`)
			fmt.Fprintf(w, "data: %s\n\n", deepJSON(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[],`, 4<<20))
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, deepJSON(head, crashDepth))
	}))
	t.Cleanup(up.Close)
	cfg := strings.ReplaceAll(baseConfig+openPassthrough, "{{MOCK}}", up.URL+"/v1")
	h := newHarness(t, cfg, mockllm.Options{})

	status, _, resp := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil)
	if status != http.StatusBadGateway || gjson.GetBytes(resp, "error.message").Str == "" {
		t.Fatalf("JSON: status %d, want 502 with an error: %.300s", status, resp)
	}
	status, _, resp = h.post("/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if status != http.StatusOK || !strings.Contains(string(resp), `"error"`) || strings.Contains(string(resp), "[[[[") {
		t.Fatalf("stream: status %d, want the stream to end with an error event and no nested bytes: %.300s", status, resp)
	}
	// A pass-through answer is relayed as it is (its usage is read by a
	// scanner that keeps no stack per level): the gateway lives on.
	if status, _, resp = h.post("/embeddings", `{"model":"gpt-x","input":"hi"}`, nil); status != http.StatusOK {
		t.Fatalf("pass-through: status %d: %.300s", status, resp)
	}
	if status, _, resp = h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil); status != http.StatusBadGateway {
		t.Fatalf("after: status %d: %.300s", status, resp)
	}
}

// gjsonStream reports whether r asks for a stream.
func gjsonStream(r *http.Request) bool {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return gjson.Get(b.String(), "stream").Bool()
}
