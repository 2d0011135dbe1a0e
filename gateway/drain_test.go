package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/mockllm"
)

// sendWhole writes head and then body in 16 KiB pieces, and only then
// reads the answer, as curl and the SDKs do: a server that closes with
// bytes of the body unread resets the connection, and the client's next
// write fails before it reads any answer.
func sendWhole(t *testing.T, addr, head string, body []byte, chunked bool) (*http.Response, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(head)); err != nil {
		return nil, err
	}
	for i := 0; i < len(body); i += 16 << 10 {
		piece := body[i:min(len(body), i+16<<10)]
		if chunked {
			piece = append(fmt.Appendf(nil, "%x\r\n", len(piece)), append(piece, "\r\n"...)...)
		}
		if _, err := c.Write(piece); err != nil {
			// The server stopped reading and closed: a client sees the
			// reset as it sends (curl, the SDKs), before any answer.
			return nil, fmt.Errorf("sending the body: %w", err)
		}
	}
	if chunked {
		_, _ = c.Write([]byte("0\r\n\r\n"))
	}
	return http.ReadResponse(bufio.NewReader(c), nil)
}

// An error answered before the body was read (a chunked body over the
// limit; a pass-through body refused by its content type) reaches a client
// that is still sending a moderate excess: the gateway reads and drops it
// first. It used to close the connection with the body unread, which
// reset it, and the client (an SDK retries a reset) never saw the answer.
func TestErrorBeforeBodyIsRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(baseConfig, "[server]", "[server]\nmax_body_bytes = 1048576", 1)+openPassthrough, mockllm.Options{})
	addr := strings.TrimSuffix(strings.TrimPrefix(h.base, "http://"), "/v1")
	body := []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"` + strings.Repeat("a", 3000000) + `"}]}`)
	for i := range 10 {
		resp, err := sendWhole(t, addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", body, true)
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked chat over the limit, try %d: %v %v", i, resp, err)
		}
		resp, err = sendWhole(t, addr, fmt.Sprintf("POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", len(body)), body, false)
		if err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Fatalf("pass-through refused by its type, try %d: %v %v", i, resp, err)
		}
	}
}
