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
	addr, _ := serveGateway(t, "http://127.0.0.1:1/v1", pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	for proto, want := range map[string]string{
		"HTTP/1.1": "HTTP/1.1 200", "HTTP/1.0": "HTTP/1.1 200",
		"HTTP/2.0": "HTTP/1.1 505", "HTTP/0.9": "HTTP/1.1 505", "HTTP/1.9": "HTTP/1.1 505", "HTTP/9.9": "HTTP/1.1 505",
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET /v1/models %s\r\nHost: gw\r\nConnection: close\r\n\r\n", proto)
		got, _ := io.ReadAll(bufio.NewReader(conn)) // ends when the gateway closes the connection
		_ = conn.Close()
		if !strings.HasPrefix(string(got), want) {
			t.Errorf("%s: %.80q, want %s", proto, got, want)
		}
		if want != "HTTP/1.1 200" && !strings.Contains(string(got), `"code":"http_version_not_supported"`) {
			t.Errorf("%s: %q", proto, got)
		}
	}
}
