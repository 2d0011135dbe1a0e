package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// A request line of an HTTP version other than 1.1 and 1.0 is answered
// 505 in the OpenAI envelope, its connection closed: fasthttp would serve
// it as HTTP/1.1.
func TestUnsupportedHTTPVersion(t *testing.T) {
	t.Parallel()
	addr, srv := serveGateway(t, "http://127.0.0.1:1/v1", pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeAdmin(ln) }()
	t.Cleanup(func() { _ = ln.Close() })
	send := func(addr, head string) string {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(conn, head)
		got, _ := io.ReadAll(bufio.NewReader(conn)) // ends when the gateway closes the connection
		return string(got)
	}
	for proto, want := range map[string]string{
		"HTTP/1.1": "HTTP/1.1 200", "HTTP/1.0": "HTTP/1.1 200",
		"HTTP/2.0": "HTTP/1.1 505", "HTTP/0.9": "HTTP/1.1 505", "HTTP/1.9": "HTTP/1.1 505", "HTTP/9.9": "HTTP/1.1 505",
	} {
		for _, a := range []struct{ addr, path string }{{addr, "/v1/models"}, {ln.Addr().String(), "/healthz"}} {
			got := send(a.addr, fmt.Sprintf("GET %s %s\r\nHost: gw\r\nConnection: close\r\n\r\n", a.path, proto))
			if !strings.HasPrefix(got, want) {
				t.Errorf("%s %s: %.80q, want %s", proto, a.path, got, want)
			}
			if want != "HTTP/1.1 200" && !strings.Contains(got, `"code":"http_version_not_supported"`) {
				t.Errorf("%s %s: %q", proto, a.path, got)
			}
		}
	}
	// Asking before its body, it is not told to go on.
	got := send(addr, "POST /v1/chat/completions HTTP/1.9\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	if !strings.HasPrefix(got, "HTTP/1.1 505") {
		t.Errorf("Expect: 100-continue: %.80q", got)
	}
}
