package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/gateway/pipeline"
)

// alwaysBuffered says the upstream's next event is always already here.
type alwaysBuffered struct{}

func (alwaysBuffered) Buffered() bool { return true }

// TestSinkHoldIsBounded: however long the upstream keeps its next event
// buffered, the sink writes once it holds maxHeldBytes, so a long burst
// reaches the client in writes of about that size, not all at its end.
func TestSinkHoldIsBounded(t *testing.T) {
	t.Parallel()
	chunk := `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 1000) + `"}}]}`
	const events = 100
	_, _, _, addr := finishGateway(t, func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		r.Lookahead.Set(alwaysBuffered{})
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{
			NextFunc: func() ([]byte, error) {
				if n++; n > events {
					return nil, io.EOF
				}
				return []byte(chunk), nil
			},
			CloseFunc: func() {},
		}}, nil
	})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	for { // the head
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	writes, largest, total := 0, 0, 0
	for { // one HTTP chunk per write
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size %q", line)
		}
		if n == 0 {
			break
		}
		if _, err := io.CopyN(io.Discard, br, n+2); err != nil {
			t.Fatal(err)
		}
		writes, largest, total = writes+1, max(largest, int(n)), total+int(n)
	}
	if total < events*len(chunk) || writes < 5 || largest > maxHeldBytes+2*len(chunk) {
		t.Fatalf("%d bytes in %d writes, the largest %d: a held write must stay near %d bytes", total, writes, largest, maxHeldBytes)
	}
}
