package gateway

import (
	"bytes"
	"compress/gzip"
	"net"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/mockllm"
)

// An upstream's JSON answer whose choice has no finish_reason, or a null
// one, reaches the client with "stop", as the same answer streamed ends
// and as the schema requires of an answer.
func TestAnswerWithoutFinishReason(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		finish := ""
		if strings.Contains(string(ctx.PostBody()), "null please") {
			finish = `, "finish_reason": null`
		}
		ctx.SetBodyString(`{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null` + finish + `}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Shutdown() })
	h := newHarness(t, strings.Replace(baseConfig, `base_url = "{{MOCK}}"`, `base_url = "http://`+ln.Addr().String()+`/v1"`, 1), mockllm.Options{})
	for _, text := range []string{"missing please", "null please"} {
		code, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"`+text+`"}]}`, nil)
		if code != 200 || gjson.GetBytes(b, "choices.0.finish_reason").Str != "stop" {
			t.Fatalf("%s: %d %s", text, code, b)
		}
	}
}

// A compressed chat body is refused as the pass-through refuses one, 415
// unsupported_media_type, not as JSON it cannot parse (the gateway decodes
// no request body).
func TestCompressedChatBodyIs415(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write([]byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`))
	_ = zw.Close()
	code, _, b := h.post("/chat/completions", zb.String(), map[string]string{"Content-Encoding": "gzip"})
	if code != 415 || gjson.GetBytes(b, "error.code").Str != "unsupported_media_type" {
		t.Fatalf("%d %s", code, b)
	}
	if n := h.mock.TotalCalls(); n != 0 {
		t.Fatalf("the upstream got %d calls", n)
	}
}
