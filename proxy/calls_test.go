package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A call that ends within the grace period never registers with its
// context; one that lasts is registered by a sweep, and its context's end
// then marks it cancelled (its connection is not reused).
func TestCallGrace(t *testing.T) {
	t.Parallel()
	tab := &connTable{grace: 500 * time.Millisecond} // long: a stalled test machine must not see two sweeps in the first loop
	var h fasthttp.RequestHeader
	registered := func(c *call) bool {
		tab.mu.Lock()
		defer tab.mu.Unlock()
		return c.stop != nil
	}

	for range 100 {
		c := tab.startCall(context.Background(), &h)
		if registered(c) {
			t.Fatal("a call was registered as it began")
		}
		if !c.end() {
			t.Fatal("a short call's connection is not reusable")
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	c := tab.startCall(ctx, &h)
	deadline := time.Now().Add(5 * time.Second)
	for !registered(c) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !registered(c) {
		t.Fatal("a long call was never registered")
	}
	cancel()
	for !c.cancelled.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c.end() {
		t.Fatal("a cancelled call's connection is reusable")
	}

	// A context that ended before the sweep cancels the call at the sweep.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	c = tab.startCall(ctx, &h)
	for !c.cancelled.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c.end() {
		t.Fatal("a call cancelled within the grace was never interrupted")
	}
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if len(tab.calls) != 0 {
		t.Fatalf("%d calls left in the table", len(tab.calls))
	}
}
