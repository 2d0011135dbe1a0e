package gateway

import (
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// A pass-through JSON body that is not UTF-8 is refused as the chat and
// Responses routes refuse one: it reached the provider (an ingress probe,
// on /v1/completions and /v1/embeddings).
func TestPassthroughBodyNotUTF8Refused(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := harnessOn(t, baseConfig+openPassthrough, &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		calls.Add(1)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"object":"list","data":[],"usage":{"prompt_tokens":1,"total_tokens":1}}`)
	}})
	for _, path := range []string{"/embeddings", "/completions"} {
		status, _, body := h.post(path, "{\"model\":\"gpt-x\",\"input\":\"a\xff\xfeb\",\"prompt\":\"x\"}", nil)
		if status != 400 || gjson.GetBytes(body, "error.type").Str != "invalid_request_error" {
			t.Fatalf("%s: %d %s", path, status, body)
		}
	}
	if status, _, body := h.post("/embeddings", `{"model":"gpt-x","input":"héllo"}`, nil); status != 200 {
		t.Fatalf("a UTF-8 body: %d %s", status, body)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d upstream calls, want only the UTF-8 body's", n)
	}
}
