package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/proxy"
)

// connsListener remembers the connections it accepted, so that a test can
// close them as the process's exit would.
type connsListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connsListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
}

// When the shutdown grace period ends with streams still waiting on a
// stalled upstream, every one of them has ended with event: error (the
// shutdown envelope) by the time Shutdown returns: the process exits right
// after, which the test plays by closing every server connection. Streams
// through the tool loop take longest to wind down.
func TestShutdownEndsEveryStreamWithAnError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, config string }{
		{"plain streams", baseConfig},
		{"tool-loop streams", toolConfig},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testShutdownStreams(t, c.config)
		})
	}
}

func testShutdownStreams(t *testing.T, toml string) {
	const streams = 20
	mock := mockllm.New(mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{
		Text: strings.Repeat("a stalled answer ", 20), Fault: &mockllm.Fault{Stall: time.Minute, StallAfter: 3}})})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg, err := config.Parse([]byte(strings.NewReplacer("{{MOCK}}", mockURL, "{{HTTP}}", "http://127.0.0.1:1/").Replace(toml)))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Build(cfg, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	srv := proxy.NewServer(rt, zerolog.New(io.Discard))
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &connsListener{Listener: inner}
	go func() { _ = srv.Serve(ln) }()

	body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"go"}]}`
	clients := make([]*bufio.Reader, streams)
	for i := range clients {
		conn, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		br := bufio.NewReader(conn)
		for { // until the first event: the stream is under way
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if strings.HasPrefix(line, "data: ") {
				break
			}
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		clients[i] = br
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = srv.Shutdown(ctx)
	ln.closeAll() // the process exits

	for i, br := range clients {
		rest, err := io.ReadAll(br)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Errorf("stream %d: %v", i, err)
		}
		if !strings.Contains(string(rest), "event: error\ndata: ") || !strings.Contains(string(rest), `"code":"server_shutting_down"`) {
			t.Errorf("stream %d ended without the shutdown error event; its last bytes: %q", i, tail(rest, 200))
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
