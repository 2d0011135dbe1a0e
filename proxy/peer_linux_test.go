//go:build linux

package proxy

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestPeerWatcherWaitsInPoller: the watcher's goroutine waits for its epoll
// instance in the runtime's poller, both asleep (no watch pending) and
// between passes, never in a blocking epoll_wait, which would hold a thread
// and its P in a system call.
func TestPeerWatcherWaitsInPoller(t *testing.T) {
	t.Parallel()
	_, server := tcpPair(t)
	w := &peerWatcher{grace: 200 * time.Millisecond}
	defer w.close()
	check := func(when string) {
		t.Helper()
		time.Sleep(20 * time.Millisecond) // let the loop reach its wait
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if !strings.Contains(g, "peerWatcher).run") {
				continue
			}
			if !strings.Contains(g, "runtime_pollWait") || strings.Contains(g, "EpollWait") {
				t.Fatalf("%s, the watcher waits outside the runtime's poller:\n%s", when, g)
			}
			return
		}
		t.Fatalf("%s: no watcher goroutine", when)
	}
	p := w.watch(server, func() {})
	check("with a watch pending")
	w.unwatch(p)
	time.Sleep(3 * w.grace) // two passes: nothing pending, the loop sleeps
	check("asleep")
}

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

	// A watch is armed no sooner than a grace after watch began, and never
	// once unwatch has returned, so only a watch whose watch-to-unwatch
	// span reached the grace can have been armed: on a loaded machine the
	// test may be descheduled that long between the two calls. Those are
	// excused; every other watch must stay unarmed.
	long := 0
	for range 100 {
		began := time.Now()
		w.unwatch(w.watch(server, func() { t.Error("gone called for an ended watch") }))
		if time.Since(began) >= w.grace {
			long++
		}
	}
	time.Sleep(3 * w.grace) // two passes: every watch above would be due
	short := armed()
	if short > long {
		t.Fatalf("%d short watches were registered with epoll (%d lasted the grace)", short, long)
	}

	gone := make(chan struct{})
	start := time.Now() // before watch: the grace runs from within it
	p := w.watch(server, func() { close(gone) })
	defer w.unwatch(p)
	_ = client.Close() // before it is armed: noticed once it is
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("a client that left was never noticed")
	}
	// Armed at the second pass after the watch, a grace or more after it.
	if d := time.Since(start); d < w.grace {
		t.Fatalf("noticed after %v, within the grace of %v", d, w.grace)
	}
	if n := armed() - short; n != 1 {
		t.Fatalf("%d watches armed, want 1", n)
	}
}
