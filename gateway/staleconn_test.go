package gateway

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// An upstream that closes idle keep-alive connections sooner than the
// gateway's pool drops them (Node's and uvicorn's servers do after 5 s)
// leaves the pool a connection it has closed. A request written on it
// reads the close before any byte of an answer: the upstream never saw
// it, and the gateway sends it again on a new connection instead of
// failing it with a 502, even with retries = 0 (chat and pass-through).
func TestStaleUpstreamConnectionIsRetried(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	h := harnessOn(t, baseConfig+openPassthrough, &fasthttp.Server{
		IdleTimeout: 20 * time.Millisecond,
		ConnState: func(_ net.Conn, s fasthttp.ConnState) {
			if s == fasthttp.StateNew {
				conns.Add(1)
			}
		},
		Handler: func(ctx *fasthttp.RequestCtx) {
			time.Sleep(30 * time.Millisecond) // concurrent calls each take a connection of their own
			ctx.SetContentType("application/json")
			if strings.HasSuffix(string(ctx.Path()), "/embeddings") {
				ctx.SetBodyString(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"model":"up-model","usage":{"prompt_tokens":1,"total_tokens":1}}`)
				return
			}
			ctx.SetBodyString(`{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		},
	})
	// Rounds of four concurrent calls, each after the upstream closed
	// the pool's idle connections: every round finds four stale ones.
	for i := range 4 {
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for range 4 {
			for _, path := range []string{"/chat/completions", "/embeddings"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`
					if path == "/embeddings" {
						body = `{"model":"gpt-x","input":"hi"}`
					}
					if code, _, b := h.post(path, body, nil); code != 200 {
						errs <- fmt.Sprintf("round %d %s: %d %s", i, path, code, b)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		time.Sleep(150 * time.Millisecond) // the upstream closes the idle connections; the gateway checks after 100 ms unused
	}
	if n := conns.Load(); n < 12 {
		t.Fatalf("the upstream saw %d connections: its idle ones were not closed, the test tests nothing", n)
	}
}
