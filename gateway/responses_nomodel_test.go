package gateway

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// A Responses API create or input-token count that names no model is a
// 400 naming model, as OpenAI answers it, and reaches no upstream: passed
// through, it went to the default provider as it was (the shipped demo
// provider echoed it back; an input_tokens count was told its key may not
// use the route). A stored prompt, which carries its own model at OpenAI,
// still goes through.
func TestResponsesWithoutModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+openPassthrough, mockllm.Options{})
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
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
	status, _, b := send(t, http.MethodPost, h.base+"/responses", "", `{"prompt":{"id":"pmpt_1"},"input":"hi"}`)
	if status != http.StatusOK || gjson.GetBytes(b, "path").Str != "/v1/responses" || len(h.mock.Requests()) != 1 {
		t.Fatalf("a stored prompt without a model: %d %s", status, b)
	}
}
