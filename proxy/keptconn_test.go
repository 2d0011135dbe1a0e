package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// TestKeptConnectionReadsTheNextRequestWhole: after a stream, the
// connection's next request is read by the stream's goroutine into a
// pooled buffer (awaitRequest), then by fasthttp: a request larger than
// that buffer, one that arrives in pieces, and one pipelined behind it all
// reach the handler whole and in order; a connection that sends nothing
// more is closed at the idle timeout.
func TestKeptConnectionReadsTheNextRequestWhole(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	cfg, u := testUpstream(t, "http://127.0.0.1:1", "")
	addr, _ := serveRuntime(t, cfg, u, pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		mu.Lock()
		seen = append(seen, strconv.Itoa(len(r.Body)))
		mu.Unlock()
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
			if n++; n > 1 {
				return nil, io.EOF
			}
			return []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`), nil
		}, CloseFunc: func() {}}}, nil
	}), func(s *Server) { s.srv.IdleTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	req := func(model string, pad int) string {
		body := `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", pad) + `"}]}`
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	read := func(n int) {
		t.Helper()
		for range n {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				t.Fatalf("status %d, %q, %v", resp.StatusCode, b, err)
			}
		}
	}
	write := func(s string) {
		t.Helper()
		if _, err := io.WriteString(conn, s); err != nil {
			t.Fatal(err)
		}
	}
	write(req("m", 0))
	read(1)
	write(req("m", 20000)) // larger than the pooled buffer
	read(1)
	split := req("m", 10)
	write(split[:7])
	time.Sleep(50 * time.Millisecond)
	write(split[7:] + req("m", 5000)) // its rest, and one more behind it
	read(2)
	var want []string
	for _, pad := range []int{0, 20000, 10, 5000} {
		want = append(want, strconv.Itoa(len(`{"model":"m","stream":true,"messages":[{"role":"user","content":""}]}`)+pad))
	}
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	if got != strings.Join(want, ",") {
		t.Fatalf("the handler saw bodies of %s bytes, want %q", got, want)
	}
	// Nothing more: the idle timeout closes the connection.
	start := time.Now()
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v: the idle connection was not closed", n, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %v", d)
	}
}
