package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/gateway/mockllm"
)

// A client that did not ask for usage: the meter asks the upstream for it
// and takes the usage-only chunk out, even when that usage's counts are no
// counts (it is not kept: the call is estimated). Such a chunk went out as
// an empty {"choices":[]} chunk.
func TestStrippedBadUsageChunkStaysOut(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[],"usage":{"prompt_tokens":1.5,"completion_tokens":3,"total_tokens":4}}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(limitsConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	status, _, s := send(t, "POST", h.base+"/chat/completions", "sk-team", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || strings.Contains(string(s), `"choices":[]`) || !strings.HasSuffix(string(s), "data: [DONE]\n\n") {
		t.Errorf("%d %s", status, s)
	}
}
