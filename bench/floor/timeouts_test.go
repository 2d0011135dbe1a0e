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

// TestCallTimeout: -call-timeout bounds the upstream call; the client gets
// the floor's 502 in about that time, not the slow upstream's answer.
func TestCallTimeout(t *testing.T) {
	up := slowUpstream(t, 3*time.Second)
	addr := serve(t, newServer(options{upstream: up, maxConns: 4, callTimeout: 200 * time.Millisecond}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, chatRequest); err != nil {
		t.Fatal(err)
	}
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
	addr := serve(t, newServer(options{upstream: slowUpstream(t, 0), maxConns: 4, readTimeout: 200 * time.Millisecond}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, chatRequest[:40]); err != nil { // the head, cut
		t.Fatal(err)
	}
	if !closedWithin(t, c, 2*time.Second) {
		t.Fatal("a request cut short kept its connection open 2 s: reading it was not bounded")
	}
}

// TestIdleTimeout: -idle-timeout closes a keep-alive connection that sends
// no next request in time, after answering the first.
func TestIdleTimeout(t *testing.T) {
	addr := serve(t, newServer(options{upstream: slowUpstream(t, 0), maxConns: 4, idleTimeout: 200 * time.Millisecond}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, chatRequest); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var resp fasthttp.Response
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if err := resp.Read(br); err != nil || resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("first request: %v, status %d", err, resp.StatusCode())
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.Copy(io.Discard, br); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("an idle keep-alive connection stayed open 2 s: the wait for the next request was not bounded")
		}
	}
}
