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

// An upstream error message that names the provider's address (its base
// URL, its host) reaches the client with the address masked, on chat and
// on pass-through: the client learns what went wrong, not where the
// gateway's upstreams are. The rest of the message stays.
func TestUpstreamErrorMasksProviderAddress(t *testing.T) {
	t.Parallel()
	var base string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		host := strings.TrimPrefix(base, "http://")
		fmt.Fprintf(w, `{"error":{"message":"bad input: proxy could not reach %s/v1/chat/completions (host %s)","type":"invalid_request_error","code":"bad"}}`, base, host)
	}))
	t.Cleanup(up.Close)
	base = up.URL
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1")+openPassthrough, mockllm.Options{})
	host := strings.TrimPrefix(up.URL, "http://")
	for _, c := range [][2]string{
		{"/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"x"}]}`},
		{"/embeddings", `{"model":"gpt-x","input":"x"}`},
	} {
		status, _, body := h.post(c[0], c[1], nil)
		msg := gjson.GetBytes(body, "error.message").Str
		if status != 400 || strings.Contains(string(body), host) || !strings.HasPrefix(msg, "bad input: proxy could not reach") {
			t.Errorf("%s: %d %s", c[0], status, body)
		}
	}
}
