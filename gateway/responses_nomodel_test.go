package gateway

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// demoDefaultConfig: the default provider is a demo model (kind mock), as
// in the shipped config without an OpenAI key.
const demoDefaultConfig = `
[server]
log_level = "warn"
[[providers]]
name = "demo"
kind = "mock"
[[models]]
name = "demo"
provider = "demo"
`

// A Responses API input-token count that names no model is a 400 naming
// model (it was refused as a path the caller may not use), and so is a
// create where the default provider is a demo model (which echoed the
// request back, its headers included). A create naming a stored prompt,
// which carries its own model at OpenAI, still goes through; so does any
// create where the default provider is an upstream, which may serve one
// model and answer with it.
func TestResponsesWithoutModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, demoDefaultConfig+openPassthrough, mockllm.Options{})
	for _, path := range []string{"/responses", "/responses/input_tokens"} {
		for _, body := range []string{`{"input":"hi"}`, `{"model":null,"input":"hi"}`, `{"input":"hi","prompt":null}`} {
			status, hdr, b := send(t, http.MethodPost, h.base+path, "", body)
			e := gjson.GetBytes(b, "error")
			if status != http.StatusBadRequest || e.Get("param").Str != "model" || e.Get("type").Str != "invalid_request_error" || hdr.Get("X-Request-Id") == "" {
				t.Errorf("POST %s %s: %d %s", path, body, status, b)
			}
		}
		for _, body := range []string{`[]`, `null`, `"hi"`} {
			if status, _, b := send(t, http.MethodPost, h.base+path, "", body); status != http.StatusBadRequest || !gjson.GetBytes(b, "error.message").Exists() {
				t.Errorf("POST %s %s: %d %s", path, body, status, b)
			}
		}
	}
	if status, _, b := send(t, http.MethodPost, h.base+"/responses", "", `{"prompt":{"id":"pmpt_1"},"input":"hi"}`); status != http.StatusOK || gjson.GetBytes(b, "path").Str != "/v1/responses" {
		t.Fatalf("a stored prompt without a model: %d %s", status, b)
	}

	// An upstream as the default provider: a create goes to it, a count
	// (which the gateway makes with the model's tokenizer) is still a 400,
	// on the default pass-through allow-list too.
	up := newHarness(t, baseConfig, mockllm.Options{})
	if status, _, b := send(t, http.MethodPost, up.base+"/responses", "", `{"input":"hi"}`); status != http.StatusOK || gjson.GetBytes(b, "path").Str != "/v1/responses" || len(up.mock.Requests()) != 1 {
		t.Fatalf("no model, an upstream as the default provider: %d %s", status, b)
	}
	for _, body := range []string{`{"input":"hi"}`, `{"input":"hi","prompt":{"id":"pmpt_1"}}`} {
		if status, _, b := send(t, http.MethodPost, up.base+"/responses/input_tokens", "", body); status != http.StatusBadRequest || gjson.GetBytes(b, "error.param").Str != "model" {
			t.Errorf("a count without a model, an upstream as the default provider: %s: %d %s", body, status, b)
		}
	}
}
