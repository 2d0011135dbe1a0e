package proxy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestCallsAfterASpikeReuseTheLastConnection: after a spike of concurrent
// calls opened several upstream connections, calls one at a time go over
// the connection used last, not over every one of the spike's in turn, so
// the spike's extra connections idle out (and none of them, idle longest,
// is the one a call is sent on).
func TestCallsAfterASpikeReuseTheLastConnection(t *testing.T) {
	t.Parallel()
	const spike = 8
	var (
		mu   sync.Mutex
		seen []string // the remote address of each call, in order
		gate = make(chan struct{})
	)
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		seen = append(seen, ctx.RemoteAddr().String())
		n := len(seen)
		mu.Unlock()
		if n == spike {
			close(gate) // every spike call holds a connection: release them
		}
		if n <= spike {
			select {
			case <-gate:
			case <-time.After(5 * time.Second):
			}
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"c","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	})
	_, u := testUpstream(t, base, "")
	var wg sync.WaitGroup
	for range spike {
		wg.Go(func() {
			if _, err := u.Chat(context.Background(), chatReq(false)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	conns := map[string]bool{}
	for _, a := range seen {
		conns[a] = true
	}
	mu.Unlock()
	if len(conns) != spike {
		t.Fatalf("the spike's %d calls went over %d connections, want one each", spike, len(conns))
	}
	for range 2 * spike {
		if _, err := u.Chat(context.Background(), chatReq(false)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	after := map[string]bool{}
	for _, a := range seen[spike:] {
		after[a] = true
	}
	if len(after) != 1 {
		t.Fatalf("%d calls one at a time went over %d connections, want the one used last: %v", 2*spike, len(after), seen[spike:])
	}
}
