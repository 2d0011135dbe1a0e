package gateway

import (
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// floorProxy starts the least a fasthttp reverse proxy does in front of
// upstream (host:port): each request forwarded unchanged over a pooled
// HostClient, its answer written back. It returns its base URL.
func floorProxy(b *testing.B, upstream string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hc := &fasthttp.HostClient{Addr: upstream, MaxConns: 1024}
	srv := &fasthttp.Server{NoDefaultContentType: true, NoDefaultDate: true, Handler: func(ctx *fasthttp.RequestCtx) {
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1"
}

// BenchmarkPassthroughFloor runs the pass-through request through the
// floor proxy and through the gateway, in one run: the ratio of their
// cpu-ns/op less direct's is the gateway's CPU per request against a bare
// proxy's, in process (the bench's passthrough scenario measures the same
// across processes).
func BenchmarkPassthroughFloor(b *testing.B) {
	h, mock := benchHarness(b)
	floor := floorProxy(b, strings.TrimSuffix(strings.TrimPrefix(mock, "http://"), "/v1"))
	b.Run("direct", func(b *testing.B) { runPost(b, mock, benchDirect, false) })
	b.Run("floor", func(b *testing.B) { runPost(b, floor, benchDirect, false) })
	b.Run("gateway", func(b *testing.B) { runPost(b, h.base, benchBody, false) })
}
