//go:build linux

package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/llmgw/gateway/pipeline"
)

// waitQueued waits until c's socket holds n unread bytes.
func waitQueued(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		queued := 0
		_ = rc.Control(func(fd uintptr) { queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		return queued >= n
	})
}

// TestTrackedConnReadsAhead: after a read that filled its buffer, ahead
// takes what the socket holds without waiting, and the reads after it
// return those bytes first, then the socket's, in order; the end of the
// connection (or its error) it met comes after them. After a read that did
// not fill its buffer, ahead reads nothing: the socket was drained then.
// A connection that is not plain TCP (TLS) is never read ahead.
func TestTrackedConnReadsAhead(t *testing.T) {
	t.Parallel()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 400) // 6,400 bytes
	t.Run("bytes", func(t *testing.T) {
		t.Parallel()
		client, server := tcpPair(t)
		tc := (&connTable{}).wrap(client).(*trackedConn)
		if _, err := server.Write(payload); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, client.(*net.TCPConn), len(payload))
		buf := make([]byte, 4096)
		if n, err := tc.Read(buf); n != 4096 || err != nil {
			t.Fatalf("first read %d, %v", n, err)
		}
		ahead := tc.ahead()
		if !bytes.Equal(ahead, payload[4096:]) {
			t.Fatalf("ahead %d bytes, want the %d the socket held", len(ahead), len(payload)-4096)
		}
		if _, err := server.Write([]byte("later")); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, client.(*net.TCPConn), 5)
		if again := tc.ahead(); len(again) != len(ahead) {
			t.Fatalf("a second ahead read more: %d bytes", len(again))
		}
		got := append([]byte(nil), buf...)
		small := make([]byte, 100)
		n, err := tc.Read(small)
		got = append(got, small[:n]...)
		if n != 100 || err != nil {
			t.Fatalf("read %d, %v", n, err)
		}
		n, err = tc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("read back %d bytes (%v), not the payload", len(got), err)
		}
		if tc.spillBuf != nil {
			t.Fatal("the buffer was kept after its bytes were read")
		}
		// The last read ahead did not fill its buffer: nothing more is
		// read ahead, although "later" waits in the socket.
		if extra := tc.ahead(); extra != nil {
			t.Fatalf("read ahead %q after a read that drained the socket", extra)
		}
		if n, err := tc.Read(buf); string(buf[:n]) != "later" || err != nil {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
	})
	t.Run("end", func(t *testing.T) {
		t.Parallel()
		client, server := tcpPair(t)
		tc := (&connTable{}).wrap(client).(*trackedConn)
		_, _ = server.Write(payload[:4096])
		_ = server.Close()
		waitQueued(t, client.(*net.TCPConn), 4096)
		buf := make([]byte, 4096)
		if n, err := tc.Read(buf); n != 4096 || err != nil {
			t.Fatalf("first read %d, %v", n, err)
		}
		if ahead := tc.ahead(); len(ahead) != 0 {
			t.Fatalf("ahead %q at the connection's end", ahead)
		}
		if n, err := tc.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("read %d, %v after the end, want EOF", n, err)
		}
	})
	t.Run("not tcp", func(t *testing.T) {
		t.Parallel()
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		tc := &trackedConn{Conn: a, table: &connTable{}}
		go func() { _, _ = b.Write(payload) }()
		buf := make([]byte, 64)
		if n, err := tc.Read(buf); n != 64 || err != nil {
			t.Fatalf("read %d, %v", n, err)
		}
		if ahead := tc.ahead(); ahead != nil {
			t.Fatalf("read ahead %d bytes of a connection that is not plain TCP", len(ahead))
		}
	})
}

// TestCompleteStreamLeavesInOneWrite: a stream fasthttp writes whole (the
// upstream's answer all here) leaves in one write, head, events, [DONE]
// and the last chunk together: no part of it waits for the network, so
// none is flushed on its own.
func TestCompleteStreamLeavesInOneWrite(t *testing.T) {
	t.Parallel()
	cfg, u := testUpstream(t, burstUpstream(t, "", 0, nil), "")
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Chat: pipeline.HandlerFunc(u.Chat), Upstream: u}, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	writes := &atomic.Int32{}
	go func() {
		_ = srv.Serve(hookListener{Listener: ln, write: func(c net.Conn, p []byte) (int, error) {
			writes.Add(1)
			return c.Write(p)
		}})
	}()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	got, _, _ := rawStream(t, ln.Addr().String())
	if !strings.Contains(got, `"three"`) || !strings.HasSuffix(got, "data: [DONE]\n\n\r\n0\r\n\r\n") {
		t.Fatalf("stream %q", got)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("%d writes, want 1", n)
	}
}
