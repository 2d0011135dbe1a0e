package proxy

import (
	"net"
	"runtime/metrics"
	"testing"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
)

// benchGateway serves the chat route on loopback TCP (the client watcher
// needs a socket) with the upstream client as the whole pipeline, in front
// of a fasthttp upstream that answers every call with a small completion.
// It returns a client for the gateway.
func benchGateway(b *testing.B) *fasthttp.HostClient {
	b.Helper()
	answer := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	base := serveUpstream(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(answer)
	})
	cfg, u := testUpstream(b, base, "")
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	rt := &Runtime{Config: cfg, Routes: routes, Chat: u, Upstream: u}
	srv := NewServer(rt, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown(b.Context()) })
	return &fasthttp.HostClient{Addr: ln.Addr().String()}
}

// BenchmarkNonStreamChat is one non-streamed chat request through the
// gateway's edge and upstream client, with the client connection watched so
// that a client that leaves cancels the upstream call. goroutines/op are
// the goroutines the process started per request: the client, the servers
// and the watcher included.
func BenchmarkNonStreamChat(b *testing.B) {
	c := benchGateway(b)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://gw/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
	if err := c.Do(req, resp); err != nil { // connections and watcher up
		b.Fatal(err)
	}
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(created)
	before := created[0].Value.Uint64()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Do(req, resp); err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode() != 200 {
			b.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
		}
	}
	b.StopTimer()
	metrics.Read(created)
	b.ReportMetric(float64(created[0].Value.Uint64()-before)/float64(b.N), "goroutines/op")
}

// BenchmarkPeerWatch is the watcher's cost per request: registering a
// client connection and deregistering it.
func BenchmarkPeerWatch(b *testing.B) {
	_, conn := tcpPair(b)
	var w peerWatcher
	defer w.close()
	gone := func() {}
	b.ReportAllocs()
	for b.Loop() {
		w.unwatch(w.watch(conn, gone))
	}
}
