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

// A stream request answered 200 with a body that is no stream, though its
// content type says so, fails as its JSON form does: an error object is
// the error it says, an HTML page is malformed. Both were reported as a
// cut ("upstream closed the connection"), the upstream's message lost.
func TestStreamThatIsNoStream(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if strings.Contains(string(body), "page") {
			fmt.Fprint(w, "<html><body>502 Bad Gateway (nginx)</body></html>")
			return
		}
		fmt.Fprint(w, `{"error":{"message":"model overloaded","type":"server_error","code":"overloaded"}}`)
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	for text, want := range map[string][2]string{"error": {"overloaded", "model overloaded"}, "page": {"upstream_malformed", ""}} {
		status, _, body := h.post("/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"`+text+`"}]}`, nil)
		if status != http.StatusBadGateway || gjson.GetBytes(body, "error.code").Str != want[0] ||
			(want[1] != "" && gjson.GetBytes(body, "error.message").Str != want[1]) {
			t.Errorf("%s: %d %s, want 502 %s", text, status, body, want)
		}
	}
}
