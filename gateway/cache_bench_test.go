package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/mockllm"
)

// BenchmarkCacheLatency measures, in one run, the latency of one
// non-stream request (sequential, one at a time):
//
//   - direct: straight to the mock;
//   - gateway-miss: through the gateway with the cache on and a new message
//     every time (lookup, upstream call, store);
//   - gateway-hit: through the gateway, the same request every time.
//
// "delay" sub-benchmarks give the mock a first-byte delay, as a real model
// has, so the hit's saving is visible; "nodelay" shows the gateway's own cost.
func BenchmarkCacheLatency(b *testing.B) {
	for _, delay := range []time.Duration{0, 2 * time.Millisecond} {
		name := "nodelay"
		if delay > 0 {
			name = "delay" + delay.String()
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b, cacheConfig, mockllm.Options{MaxRecorded: -1, FirstByteDelay: delay,
				Respond: mockllm.Sequence(mockllm.Turn{Text: strings.Repeat("token ", 40)})})
			b.Run("direct", func(b *testing.B) {
				runCacheBench(b, h.mockURL, func(int) string { return benchCacheBody("up-model", "hello there") }, "")
			})
			b.Run("gateway-miss", func(b *testing.B) {
				runCacheBench(b, h.base, func(i int) string {
					return benchCacheBody("gpt-x", "hello "+strconv.Itoa(i)+" "+strconv.FormatInt(time.Now().UnixNano(), 36))
				}, "miss")
			})
			b.Run("gateway-hit", func(b *testing.B) {
				runCacheBench(b, h.base, func(int) string { return benchCacheBody("gpt-x", "hello there") }, "hit")
			})
		})
	}
}

func benchCacheBody(model, msg string) string {
	return `{"model":"` + model + `","temperature":0,"messages":[{"role":"user","content":"` + msg + `"}]}`
}

// runCacheBench posts body(i) sequentially and checks the x-gateway-cache
// header (want "" = not checked). For the hit case the entry is filled
// before the timer starts.
func runCacheBench(b *testing.B, url string, body func(int) string, want string) {
	client := &fasthttp.Client{}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	do := func(i int, want string) {
		req.SetRequestURI(url + "/chat/completions")
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBodyString(body(i))
		if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
		}
		if got := string(resp.Header.Peek("x-gateway-cache")); want != "" && got != want {
			b.Fatalf("x-gateway-cache %q, want %q", got, want)
		}
	}
	if want == "hit" {
		do(-1, "") // fill
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		do(i, want)
	}
}
