package gateway

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/observe"
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
	cpu := processCPU()
	defer func() { b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			setChatPost(req, url, body)
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

// setChatPost makes req a POST of body to url's chat completions.
func setChatPost(req *fasthttp.Request, url string, body []byte) {
	req.SetRequestURI(url + "/chat/completions")
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
}

var (
	benchBody        = []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hello there"}]}`)
	benchStreamBody  = []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)
	benchDirect      = []byte(`{"model":"up-model","messages":[{"role":"user","content":"hello there"}]}`)
	benchDirectSt    = []byte(`{"model":"up-model","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)
	benchBurstBody   = []byte(`{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`)
	benchDirectBurst = []byte(`{"model":"up-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`)
)

func BenchmarkPassthrough(b *testing.B) {
	h, mock := benchHarness(b)
	b.Run("nonstream/direct", func(b *testing.B) { runPost(b, mock, benchDirect, false) })
	b.Run("nonstream/gateway", func(b *testing.B) { runPost(b, h.base, benchBody, false) })
	b.Run("stream/direct", func(b *testing.B) { runPost(b, mock, benchDirectSt, true) })
	b.Run("stream/gateway", func(b *testing.B) { runPost(b, h.base, benchStreamBody, true) })
}

// shippedConfig is the bench's pass-through gateway: the shipped request
// and model middleware (defaults), the response cache in memory, server
// tools for other models only, and the access log at info.
const shippedConfig = `
[server]
log_level = "info"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
api_key = "sk-upstream-secret"
[[models]]
name = "gpt-x"
provider = "up"
upstream = "up-model"
context_window = 128000
[[tools]]
name = "calculator"
kind = "builtin"
models = ["tools-*"]
[middleware.cache]
enabled = true
store = "memory"
`

// BenchmarkShipped is one non-streamed request at a time through the
// shipped middleware with the access log written as in production (JSON
// through the redacting queue, to a file), beside the same request sent to
// the mock directly. cpu-ns/op is the process's CPU per request (client,
// mock, gateway, garbage collector): the difference between the two is what
// the gateway costs. The stream pair does the same for a streamed answer
// (the mock writes each event on its own, so each is relayed on its own),
// and the burst pair for the bench's burst answer (22 events in one write).
func BenchmarkShipped(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "access.log"))
	if err != nil {
		b.Fatal(err)
	}
	log, flush := observe.NewLogger("info", "json", f)
	b.Cleanup(func() { flush(); _ = f.Close() })
	h := &harness{t: b, logger: &log}
	h.mock = mockllm.New(mockllm.Options{MaxRecorded: -1, Respond: mockllm.Sequence(mockllm.Turn{Text: strings.Repeat("token ", 40)})})
	if h.mockURL, err = h.mock.ListenLoopback(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.mock.Close() })
	cfg, err := config.Parse([]byte(strings.ReplaceAll(shippedConfig, "{{MOCK}}", h.mockURL)))
	if err != nil {
		b.Fatal(err)
	}
	h.srv = h.start(cfg)
	run := func(b *testing.B, url string, body []byte) {
		c := &fasthttp.Client{}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url + "/chat/completions")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
			}
		}
		b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	b.Run("direct", func(b *testing.B) { run(b, h.mockURL, benchDirect) })
	b.Run("gateway", func(b *testing.B) { run(b, h.base, benchBody) })
	b.Run("stream/direct", func(b *testing.B) { run(b, h.mockURL, benchDirectSt) })
	b.Run("stream/gateway", func(b *testing.B) { run(b, h.base, benchStreamBody) })
	// The bench's burst answer: role, 19 deltas of 4 runes, finish, usage,
	// all in one write.
	h.mock.SetRespond(func(*mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Text: strings.Repeat("abcd", 19), Chunking: &mockllm.Chunking{TextRunes: 4, Burst: true}}
	})
	b.Run("burst/direct", func(b *testing.B) { run(b, h.mockURL, benchDirectBurst) })
	b.Run("burst/gateway", func(b *testing.B) { run(b, h.base, benchBurstBody) })
}
