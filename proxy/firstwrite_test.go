package proxy

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/gateway/pipeline"
)

// firstWriteGateway serves a chat handler whose stream sends one event at
// once and the rest once more is closed; handingOver runs at each
// stream's hand-over.
func firstWriteGateway(t *testing.T, more <-chan struct{}, handingOver func()) string {
	t.Helper()
	cfg, u := testUpstream(t, "http://127.0.0.1:1", "")
	chat := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if !r.Stream {
			return &pipeline.Response{Body: []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"json answer"},"finish_reason":"stop"}]}`)}, nil
		}
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{
			NextFunc: func() ([]byte, error) {
				switch n++; n {
				case 1:
					return []byte(`{"choices":[{"index":0,"delta":{"content":"first"}}]}`), nil
				case 2:
					<-more
					return []byte(`{"choices":[{"index":0,"delta":{"content":"second"}}]}`), nil
				}
				return nil, io.EOF
			},
			CloseFunc: func() {},
		}}, nil
	})
	addr, srv := serveRuntime(t, cfg, u, chat, func(s *Server) { s.handingOver = handingOver })
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return addr
}

func chatRequest(body string) string {
	return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// readUntil reads conn until what it read contains want, or 5 s pass.
func readUntil(conn net.Conn, got *[]byte, want string) bool {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for !strings.Contains(string(*got), want) {
		n, err := conn.Read(buf)
		*got = append(*got, buf[:n]...)
		if err != nil {
			return strings.Contains(string(*got), want)
		}
	}
	return true
}

// TestStreamFirstEventsLeaveBeforeHandOver: on a connection's first
// request, a stream's head and first event are written by the request's
// handler, not after the hand-over to the stream's own goroutine, so the
// first content token does not wait for that goroutine to be scheduled.
// Here the hand-over waits until the client has the first event: written
// from the hand-over, it never comes.
func TestStreamFirstEventsLeaveBeforeHandOver(t *testing.T) {
	t.Parallel()
	more, seen := make(chan struct{}), make(chan struct{})
	var moreOnce, seenOnce bool
	addr := firstWriteGateway(t, more, func() { <-seen })
	t.Cleanup(func() { // before the gateway's shutdown, which waits for the stream
		if !seenOnce {
			close(seen)
		}
		if !moreOnce {
			close(more)
		}
	})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, chatRequest(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	var got []byte
	if !readUntil(conn, &got, `"content":"first"`) {
		t.Fatalf("the first event did not come before the hand-over; got %q", got)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 200 OK\r\n") {
		t.Fatalf("the stream began %q", got)
	}
	close(seen)
	seenOnce = true
	close(more)
	moreOnce = true
	if !readUntil(conn, &got, "\r\n0\r\n\r\n") || !strings.Contains(string(got), `"content":"second"`) || !strings.Contains(string(got), "data: [DONE]") {
		t.Fatalf("the stream did not end whole: %q", got)
	}
}

// TestStreamFirstWriteBehindPipelinedAnswer: a stream requested on a
// connection behind a JSON request the client pipelined (fasthttp holds
// the JSON answer in its writer while the next request is already
// buffered) starts after that answer, not in the middle of it or before.
func TestStreamFirstWriteBehindPipelinedAnswer(t *testing.T) {
	t.Parallel()
	more := make(chan struct{})
	close(more)
	addr := firstWriteGateway(t, more, nil)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, chatRequest(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)+
		chatRequest(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	var got []byte
	if !readUntil(conn, &got, "\r\n0\r\n\r\n") {
		t.Fatalf("the stream did not end: %q", got)
	}
	s := string(got)
	json, stream := strings.Index(s, `"content":"json answer"`), strings.Index(s, `"content":"first"`)
	if !strings.HasPrefix(s, "HTTP/1.1 200 OK\r\n") || json < 0 || stream < 0 || json > stream ||
		strings.Count(s, "HTTP/1.1 200 OK\r\n") != 2 || strings.LastIndex(s, "HTTP/1.1 200 OK\r\n") > stream || strings.LastIndex(s, "HTTP/1.1 200 OK\r\n") < json {
		t.Fatalf("the two answers are not one after the other:\n%s", s)
	}
}

// secondBuffered reports the next event buffered from its second question
// on.
type secondBuffered struct{ asked atomic.Int32 }

func (b *secondBuffered) Buffered() bool { return b.asked.Add(1) > 1 }

// TestStreamFirstWritePanics: a layer that panics while the handler
// writes a stream's first events (reading the events already buffered
// behind the first) costs the request a 500 and its connection, counted
// and finished once, as a panic on the stream's own goroutine does.
func TestStreamFirstWritePanics(t *testing.T) {
	before := testutil.ToFloat64(panics)
	cfg, u := testUpstream(t, "http://127.0.0.1:1", "")
	chat := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		r.Lookahead.Set(&secondBuffered{})
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{
			NextFunc: func() ([]byte, error) {
				if n++; n == 1 {
					return []byte(`{"choices":[{"index":0,"delta":{"content":"first"}}]}`), nil
				}
				panic("a bug in a stream layer")
			},
			CloseFunc: func() {},
		}}, nil
	})
	addr, srv := serveRuntime(t, cfg, u, chat)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(conn, chatRequest(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	got, err := io.ReadAll(conn) // ends when the gateway closes the connection
	if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 500 ") || strings.Contains(string(got), "a bug") {
		t.Fatalf("read %q (%v): want a 500 envelope, then the connection's end", got, err)
	}
	if n := testutil.ToFloat64(panics) - before; n != 1 {
		t.Fatalf("gateway_panics_total rose by %v, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown after the panic: %v (the request was never finished)", err)
	}
}
