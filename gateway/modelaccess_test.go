package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/mockllm"
)

// A key asking for a model its policy does not allow gets the answer a
// model the gateway does not have gets, on every route that names a model:
// a different status, code or message would tell it which models other keys
// may use. Nothing goes upstream.
func TestModelOfAnotherTenantLooksUnknown(t *testing.T) {
	h := newHarness(t, baseConfig+`
[[models]]
name = "gpt-secret"
provider = "up"
upstream = "up-secret"
[[keys]]
tenant = "a"
key = "sk-a"
[[keys]]
tenant = "b"
key = "sk-b"
[[policies]]
tenant = "a"
models = ["gpt-x"]
max_body_bytes = 2000
passthrough = ["/v1/embeddings", "/v1/responses"]
[[policies]]
tenant = "b"
models = ["gpt-secret"]
passthrough = ["/v1/embeddings", "/v1/responses"]
`, mockllm.Options{})
	key := map[string]string{"Authorization": "Bearer sk-a"}
	ask := func(method, path, body string) (int, string) {
		t.Helper()
		if method == http.MethodGet {
			req, _ := http.NewRequest(method, h.base+path, nil)
			req.Header.Set("Authorization", key["Authorization"])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		status, _, b := h.post(path, body, key)
		return status, string(b)
	}
	big := strings.Repeat("x", 3000)
	for _, c := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"chat", http.MethodPost, "/chat/completions", `{"model":"MODEL","messages":[{"role":"user","content":"hi"}]}`, 404},
		{"chat stream", http.MethodPost, "/chat/completions", `{"model":"MODEL","stream":true,"messages":[{"role":"user","content":"hi"}]}`, 404},
		{"responses", http.MethodPost, "/responses", `{"model":"MODEL","input":"hi"}`, 404},
		{"embeddings", http.MethodPost, "/embeddings", `{"model":"MODEL","input":"hi"}`, 404},
		// Over the key's body limit: chat judges the model first (a model
		// the gateway does not have is judged before the key's policy);
		// a pass-through body is refused as it is read, whatever it names.
		{"chat over the key's body limit", http.MethodPost, "/chat/completions", `{"model":"MODEL","messages":[{"role":"user","content":"` + big + `"}]}`, 404},
		{"embeddings over the key's body limit", http.MethodPost, "/embeddings", `{"model":"MODEL","input":"` + big + `"}`, 413},
		{"model object", http.MethodGet, "/models/MODEL", "", 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := h.mock.TotalCalls()
			other, otherBody := ask(c.method, strings.ReplaceAll(c.path, "MODEL", "gpt-secret"), strings.ReplaceAll(c.body, "MODEL", "gpt-secret"))
			none, noneBody := ask(c.method, strings.ReplaceAll(c.path, "MODEL", "gpt-nonex"), strings.ReplaceAll(c.body, "MODEL", "gpt-nonex"))
			if other != c.status || none != c.status {
				t.Fatalf("another tenant's model %d %s, no such model %d %s", other, otherBody, none, noneBody)
			}
			if strings.ReplaceAll(otherBody, "gpt-secret", "gpt-nonex") != noneBody {
				t.Fatalf("the two answers differ:\n%s\n%s", otherBody, noneBody)
			}
			if c.status == http.StatusNotFound && (!strings.Contains(noneBody, `"code":"model_not_found"`) || !strings.Contains(noneBody, `"param":"model"`)) {
				t.Fatalf("answer %s", noneBody)
			}
			if n := h.mock.TotalCalls() - calls; n != 0 {
				t.Fatalf("%d upstream calls", n)
			}
		})
	}
	// The key's own model still passes, and the other key's model is its.
	if status, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, key); status != http.StatusOK {
		t.Fatalf("own model: %d %s", status, b)
	}
	if status, _, b := h.post("/chat/completions", `{"model":"gpt-secret","messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"Authorization": "Bearer sk-b"}); status != http.StatusOK {
		t.Fatalf("other tenant's own model: %d %s", status, b)
	}
}
