package gateway

import (
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/mockllm"
)

// The pass-through benchmarks run the same request against the mock
// directly and through the gateway, in one run, so the difference is what
// the gateway adds (both sides include the mock's own work and the client's).

func benchHarness(b *testing.B) (*harness, string) {
	h := newHarness(b, baseConfig+"\n[middleware]\nrequest=[\"policy\"]\n", mockllm.Options{MaxRecorded: -1,
		Respond: mockllm.Sequence(mockllm.Turn{Text: strings.Repeat("token ", 40)})})
	return h, h.mockURL
}

func runPost(b *testing.B, url string, body []byte, stream bool) {
	client := &fasthttp.Client{MaxConnsPerHost: 64}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			req.SetRequestURI(url + "/chat/completions")
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.SetBodyRaw(body)
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("%v %d %s", err, resp.StatusCode(), resp.Body())
				return
			}
			if stream && !bytes.HasSuffix(resp.Body(), []byte("data: [DONE]\n\n")) {
				b.Errorf("stream did not end with [DONE]")
				return
			}
		}
	})
}

var (
	benchBody       = []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hello there"}]}`)
	benchStreamBody = []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)
	benchDirect     = []byte(`{"model":"up-model","messages":[{"role":"user","content":"hello there"}]}`)
	benchDirectSt   = []byte(`{"model":"up-model","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)
)

func BenchmarkPassthrough(b *testing.B) {
	h, mock := benchHarness(b)
	b.Run("nonstream/direct", func(b *testing.B) { runPost(b, mock, benchDirect, false) })
	b.Run("nonstream/gateway", func(b *testing.B) { runPost(b, h.base, benchBody, false) })
	b.Run("stream/direct", func(b *testing.B) { runPost(b, mock, benchDirectSt, true) })
	b.Run("stream/gateway", func(b *testing.B) { runPost(b, h.base, benchStreamBody, true) })
}
