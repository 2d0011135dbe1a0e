package proxy

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
)

// BenchmarkUpstreamStreamBurst reads streamed calls whose 22 events (as
// bench's burst scenario: role, content deltas, finish, usage) arrive in
// one burst, through the upstream client to [DONE]: the stream reader's
// work per event (framing, checks, the model name, read deadlines). The
// upstream runs in the same process, so its cost is in the figure too.
func BenchmarkUpstreamStreamBurst(b *testing.B) {
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up","system_fingerprint":"fp_1",`
	var body strings.Builder
	body.WriteString("data: " + head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	for range 19 {
		body.WriteString("data: " + head + `"choices":[{"index":0,"delta":{"content":"abcd"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	}
	body.WriteString("data: " + head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n")
	body.WriteString("data: " + head + `"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":19,"total_tokens":29}}` + "\n\n")
	body.WriteString("data: [DONE]\n\n")
	raw := body.String()
	base := serveUpstream(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(raw)
	})
	_, u := testUpstream(b, base, `stream_idle_timeout = "30s"`)
	req := &pipeline.Request{Body: []byte(`{"model":"m","stream":true,"messages":[]}`), Model: "m", Stream: true,
		Target: &pipeline.Target{Provider: "p", Upstream: "up"}}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := u.Chat(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			if _, err = resp.Stream.Next(); err != nil {
				break
			}
			n++
		}
		resp.Stream.Close()
		if err != io.EOF || n != 22 {
			b.Fatalf("%d chunks, %v", n, err)
		}
	}
}
