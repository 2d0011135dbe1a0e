package proxy

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
)

// serveUpstream serves h on a loopback port until the test ends and returns
// its base URL (http://host:port/v1).
func serveUpstream(tb testing.TB, h fasthttp.RequestHandler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1"
}

// testUpstream returns a config with one provider "p" at baseURL (extra is
// added to its table) serving model "m" as "up", and its Upstream client,
// closed when the test ends.
func testUpstream(tb testing.TB, baseURL, extra string) (*config.Config, *Upstream) {
	tb.Helper()
	cfg, err := config.Parse([]byte(`
[[providers]]
name = "p"
kind = "openai"
base_url = "` + baseURL + `"
` + extra + `
[[models]]
name = "m"
provider = "p"
upstream = "up"
`))
	if err != nil {
		tb.Fatal(err)
	}
	u, err := NewUpstream(cfg.Providers, cfg.Models)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(u.Close)
	return cfg, u
}

// tcpPair returns both ends of a loopback TCP connection, closed when the
// test ends.
func tcpPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}
