package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serve starts srv on a loopback port and returns its address.
func serve(t *testing.T, srv *fasthttp.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// slowUpstream answers every request after d, or at the end of the test.
func slowUpstream(t *testing.T, d time.Duration) string {
	done := make(chan struct{})
	addr := serve(t, &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		select {
		case <-time.After(d):
		case <-done:
		}
		ctx.SetBodyString(`{"ok":true}`)
	}})
	t.Cleanup(func() { close(done) }) // before the server's shutdown waits for its handlers
	return addr
}

const chatRequest = "POST /v1/chat/completions HTTP/1.1\r\nHost: floor\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"model\":\"m\"}"

// closedWithin reports whether the server closes c within d (reading and
// discarding whatever it sends first).
func closedWithin(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

// send starts a floor proxy with o and writes raw to a new connection to it.
func send(t *testing.T, o options, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", serve(t, newServer(o)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCallTimeout: -call-timeout bounds the upstream call; the client gets
// the floor's 502 in about that time, not the slow upstream's answer.
func TestCallTimeout(t *testing.T) {
	start := time.Now()
	c := send(t, options{upstream: slowUpstream(t, 3*time.Second), maxConns: 4, callTimeout: 200 * time.Millisecond}, chatRequest)
	_ = c.SetReadDeadline(time.Now().Add(2500 * time.Millisecond))
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		t.Fatalf("no answer within 2.5 s (%v): the call was not bounded", err)
	}
	if resp.StatusCode() != fasthttp.StatusBadGateway || !strings.Contains(string(resp.Body()), "timeout") {
		t.Fatalf("got %d %q after %v, want the floor's 502 for a timed-out call", resp.StatusCode(), resp.Body(), time.Since(start))
	}
}

// TestReadTimeout: -read-timeout closes a connection whose request does not
// arrive whole in time.
func TestReadTimeout(t *testing.T) {
	c := send(t, options{upstream: slowUpstream(t, 0), maxConns: 4, readTimeout: 200 * time.Millisecond}, chatRequest[:40]) // the head, cut
	if !closedWithin(t, c, 2*time.Second) {
		t.Fatal("a request cut short kept its connection open 2 s: reading it was not bounded")
	}
}

// TestIdleTimeout: -idle-timeout closes a keep-alive connection that sends
// no next request in time, after answering the first.
func TestIdleTimeout(t *testing.T) {
	c := send(t, options{upstream: slowUpstream(t, 0), maxConns: 4, idleTimeout: 200 * time.Millisecond}, chatRequest)
	var resp fasthttp.Response
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if err := resp.Read(bufio.NewReader(c)); err != nil || resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("first request: %v, status %d", err, resp.StatusCode())
	}
	if !closedWithin(t, c, 2*time.Second) {
		t.Fatal("an idle keep-alive connection stayed open 2 s: the wait for the next request was not bounded")
	}
}
