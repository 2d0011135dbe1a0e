//go:build linux

package proxy

import (
	"net"
	"testing"
	"time"
)

// peerClosed sees the peer's close of an idle connection, also behind
// bytes the connection has not read, and nothing on an open one.
func TestPeerClosed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, unread := range []bool{false, true} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if peerClosed(c) {
			t.Fatal("an open connection reported closed")
		}
		if unread {
			_, _ = s.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n"))
		}
		_ = s.Close()
		deadline := time.Now().Add(5 * time.Second)
		for !peerClosed(c) {
			if time.Now().After(deadline) {
				t.Fatalf("unread bytes %v: the peer's close was not seen", unread)
			}
			time.Sleep(time.Millisecond)
		}
		_ = c.Close()
	}
	if peerClosed(&net.TCPConn{}) {
		t.Fatal("a connection without a socket reported closed")
	}
}
