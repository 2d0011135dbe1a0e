package proxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// hookListener accepts connections whose writes go through write.
type hookListener struct {
	net.Listener
	write func(c net.Conn, p []byte) (int, error)
}

func (l hookListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: c, write: l.write}, nil
}

type hookConn struct {
	net.Conn
	write func(c net.Conn, p []byte) (int, error)
}

func (c *hookConn) Write(p []byte) (int, error) { return c.write(c.Conn, p) }

// failEnd is a write hook that fails the write of a chunked body's last
// chunk (when fail is set), as a client that left just before it: the
// bytes before it in the same write go out, then the connection is closed
// and the write returns an error.
func failEnd(fail *atomic.Bool) func(net.Conn, []byte) (int, error) {
	return func(c net.Conn, p []byte) (int, error) {
		if fail.Load() && bytes.HasSuffix(p, lastChunk) {
			n, _ := c.Write(p[:len(p)-len(lastChunk)])
			_ = c.Close()
			return n, errors.New("write: broken pipe")
		}
		return c.Write(p)
	}
}

// TestCompleteStreamEndWriteFails: a stream fasthttp writes whole (the
// upstream's answer all here, Lookahead.Complete) whose last chunk cannot
// be written (the client left) is finished as one whose client left: 499,
// its last write not counted, as on a stream's own connection, whose last
// write carries the last chunk. It was finished in WriteTo, before
// fasthttp wrote that chunk: logged 200 with every byte. A stream whose
// end is written is logged 200 with its bytes.
func TestCompleteStreamEndWriteFails(t *testing.T) {
	t.Parallel()
	cfg, u := testUpstream(t, burstUpstream(t, "", 0, nil), "")
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	logs := &lockedBuffer{}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Chat: pipeline.HandlerFunc(u.Chat), Upstream: u}, zerolog.New(logs))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fail := &atomic.Bool{}
	go func() { _ = srv.Serve(hookListener{Listener: ln, write: failEnd(fail)}) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	access := func(n int) gjson.Result { // the n-th chat access line, once logged
		var line gjson.Result
		waitFor(t, 5*time.Second, func() bool {
			i := 0
			for _, l := range strings.Split(logs.String(), "\n") {
				if gjson.Get(l, "message").Str == "request" && gjson.Get(l, "path").Str == "/v1/chat/completions" {
					if i++; i == n {
						line = gjson.Parse(l)
						return true
					}
				}
			}
			return false
		})
		return line
	}
	got, _, _ := rawStream(t, ln.Addr().String())
	ok := access(1)
	if !strings.Contains(got, "data: [DONE]") || ok.Get("status").Int() != 200 || ok.Get("bytes").Int() == 0 {
		t.Fatalf("a stream written whole: %s\n%q", ok.Raw, got)
	}
	fail.Store(true)
	got, _, _ = rawStream(t, ln.Addr().String())
	if !strings.Contains(got, "data: [DONE]") || strings.Contains(got, "\r\n0\r\n\r\n") {
		t.Fatalf("the client did not get the events without the last chunk: %q", got)
	}
	if h := srv.handovers.Load(); h != 0 {
		t.Fatalf("%d hand-overs: the stream was not written by fasthttp", h)
	}
	if gone := access(2); gone.Get("status").Int() != statusClientClosed || gone.Get("bytes").Int() >= ok.Get("bytes").Int() {
		t.Fatalf("a stream whose last chunk failed: %s\nwritten whole: %s", gone.Raw, ok.Raw)
	}
}
