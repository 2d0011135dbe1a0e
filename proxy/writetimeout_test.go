package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// TestStalledReaderEndsItsStream: a streaming client that stops reading but
// keeps its connection open ends its request once a write has waited
// server.write_timeout: the upstream stream is closed. Without the write
// deadline the gateway's write blocks for as long as the client holds the
// connection, and with it the stream's goroutine and upstream call.
func TestStalledReaderEndsItsStream(t *testing.T) {
	t.Parallel()
	addr, closed := endlessStream(t, time.Second)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	var b [1024]byte
	if _, err := conn.Read(b[:]); err != nil { // the stream started; now the client stops reading
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("the stream to a client that stopped reading was still running 15 s later")
	}
}

// TestPassthroughBodyHasATotalDeadline: a pass-through answer that trickles
// (a byte every 200 ms, never idle long enough to trip the idle timeout)
// ends at the provider's total_timeout, as a chat call does, instead of
// holding the request for as long as the upstream keeps sending.
func TestPassthroughBodyHasATotalDeadline(t *testing.T) {
	t.Parallel()
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/octet-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for range 200 { // 40 s
				if _, err := w.WriteString("x"); err != nil || w.Flush() != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	})
	cfg, u := testUpstream(t, base, `stream_idle_timeout = "1s"`+"\n"+`total_timeout = "2s"`)
	addr, srv := serveRuntime(t, cfg, u, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return nil, nil }))
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	c := &fasthttp.HostClient{Addr: addr, ReadTimeout: 30 * time.Second}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://gw/v1/embeddings")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyString(`{"model":"m","input":"x"}`)
	start := time.Now()
	_ = c.Do(req, resp) // a cut answer is an error here; only its end matters
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("the trickling answer lasted %v; total_timeout is 2s", d)
	}
}

// TestStalledReaderOfLargeAnswerLosesIt: a client that stops reading a large
// JSON answer (more than its socket buffers take whole) but keeps its
// connection loses the connection once the answer's write has waited
// server.write_timeout, as a stream's client does, instead of holding the
// request's goroutine and the answer's bytes for as long as it likes.
// Without the deadline the client, reading at last, gets the whole answer.
func TestStalledReaderOfLargeAnswerLosesIt(t *testing.T) {
	t.Parallel()
	answer := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", 16<<20) + `"},"finish_reason":"stop"}]}`)
	chat := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: answer}, nil
	})
	cfg, u := testUpstream(t, "http://127.0.0.1:1", "")
	cfg.Server.WriteTimeout = config.Duration(500 * time.Millisecond)
	addr, srv := serveRuntime(t, cfg, u, chat)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	// The answer's first byte: the gateway is writing (on a loaded machine
	// it may take longer than the stall below to get there). Then no
	// reading, for four times write_timeout.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var first [1]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	n, _ := io.Copy(io.Discard, conn) // ends at the gateway's close (or the guard)
	if n+1 >= int64(len(answer)) {
		t.Fatalf("the client read %d bytes, the whole answer, after stalling past write_timeout", n)
	}
}

// TestSlowReaderKeepsItsStream: a client that reads slowly but steadily
// (4 KiB every 50 ms through a small receive buffer) keeps its stream
// for as long as it reads, though the gateway's writes wait longer than
// server.write_timeout for room in the socket: the deadline gives up on a
// client that stops reading, not on one that reads slowly. The timeout is
// a second, so that a loaded machine's scheduling stalls of the reader
// (a few hundred ms under the race detector) do not look like a stop.
func TestSlowReaderKeepsItsStream(t *testing.T) {
	t.Parallel()
	addr, closed := endlessStream(t, time.Second)

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	var b [4 << 10]byte
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			t.Fatalf("the stream to a slow reader ended: %v", err)
		}
		select {
		case <-closed:
			t.Fatal("the stream to a client still reading was ended")
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// endlessStream serves a gateway with write_timeout wt whose chat streams
// never end (64 KiB events, as fast as they are taken); closed is closed
// when the stream's upstream is.
func endlessStream(t *testing.T, wt time.Duration) (addr string, closed chan struct{}) {
	t.Helper()
	closed = make(chan struct{})
	chunk := []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 64<<10) + `"},"finish_reason":null}]}`)
	chat := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: &pipeline.StreamFunc{
			NextFunc:  func() ([]byte, error) { return chunk, nil },
			CloseFunc: func() { close(closed) },
		}}, nil
	})
	cfg, u := testUpstream(t, "http://127.0.0.1:1", "")
	cfg.Server.WriteTimeout = config.Duration(wt)
	addr, srv := serveRuntime(t, cfg, u, chat)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return addr, closed
}
