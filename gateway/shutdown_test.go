package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
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

// stallingMock starts a mock whose answers stall for a minute after their
// third event, and returns its base URL.
func stallingMock(t *testing.T) string {
	t.Helper()
	mock := mockllm.New(mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{
		Text: strings.Repeat("a stalled answer ", 20), Fault: &mockllm.Fault{Stall: time.Minute, StallAfter: 3}})})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	return mockURL
}

// serveToml serves toml's runtime in process (serveBuilt).
func serveToml(t *testing.T, toml string) (*proxy.Server, *connsListener) {
	t.Helper()
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	return serveBuilt(t, cfg, zerolog.New(io.Discard))
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
	mockURL := stallingMock(t)
	srv, ln := serveToml(t, strings.NewReplacer("{{MOCK}}", mockURL, "{{HTTP}}", "http://127.0.0.1:1/").Replace(toml))
	inner := ln.Listener

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

// A stored Responses stream that a shutdown ends (response.failed, after
// response.created announced its id) is stored failed, on Redis too: the
// save used the server's context, which the shutdown had cancelled, and
// the other replicas could not find the id the client was given.
func TestShutdownStoresTheFailedResponse(t *testing.T) {
	t.Parallel()
	mockURL := stallingMock(t)
	toml := strings.ReplaceAll(baseConfig, "{{MOCK}}", mockURL) + "\n[redis]\naddr = \"" + testredis.Start(t).Addr() + "\"\n"
	srv, ln := serveToml(t, toml)
	addr := ln.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	body := `{"model":"gpt-x","stream":true,"store":true,"input":"go"}`
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	id := ""
	for { // until the text streams: the answer is under way
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if v := gjson.Get(strings.TrimPrefix(line, "data: "), "response.id").Str; id == "" {
			id = v
		}
		if strings.Contains(line, "output_text.delta") && id != "" {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = srv.Shutdown(ctx)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "response.failed") {
		t.Fatalf("the stream did not end failed:\n%s", rest)
	}
	_, other := serveToml(t, toml) // another replica on the same Redis
	resp, err := http.Get("http://" + other.Addr().String() + "/v1/responses/" + id)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || gjson.GetBytes(got, "status").Str != "failed" {
		t.Fatalf("GET %s on another replica: %d %s", id, resp.StatusCode, got)
	}
}
