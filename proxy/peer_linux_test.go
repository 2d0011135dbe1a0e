//go:build linux

package proxy

import (
	"testing"
	"time"
)

// A watch that ends within the grace period is never registered with
// epoll (no system call); one that lasts is, and notices its client leave.
func TestPeerWatchGrace(t *testing.T) {
	t.Parallel()
	client, server := tcpPair(t)
	w := &peerWatcher{grace: 50 * time.Millisecond}
	defer w.close()
	armed := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.armed
	}

	for range 100 {
		w.unwatch(w.watch(server, func() { t.Error("gone called for an ended watch") }))
	}
	time.Sleep(3 * w.grace) // two passes: every watch above would be due
	if n := armed(); n != 0 {
		t.Fatalf("%d short watches were registered with epoll", n)
	}

	gone := make(chan struct{})
	p := w.watch(server, func() { close(gone) })
	defer w.unwatch(p)
	start := time.Now()
	_ = client.Close() // before it is armed: noticed once it is
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("a client that left was never noticed")
	}
	if d := time.Since(start); d < w.grace/2 { // armed a grace after the pass that followed the watch
		t.Fatalf("noticed after %v, within the grace of %v", d, w.grace)
	}
	if n := armed(); n != 1 {
		t.Fatalf("%d watches armed, want 1", n)
	}
}
