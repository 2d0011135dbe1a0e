package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"

	"github.com/llmgw/gateway/mockllm"
)

// liveHeap is the heap a full collection finds live.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// An upstream answer refused as larger than max_response_bytes leaves
// nothing behind: its body buffer, grown to the limit, went back to
// fasthttp's pool, where the pooled buffers of later requests kept it
// alive. Eight such answers at once kept about 8× the limit live for good.
// Not parallel: the heap is measured while no other test runs.
func TestRefusedHugeAnswerFreesItsBuffer(t *testing.T) {
	const limit = 4 << 20
	chunk := strings.Repeat("x", 64<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`)
		for range 2 * limit / len(chunk) { // chunked, past the limit
			_, _ = io.WriteString(w, chunk)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, `"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	cfg := strings.Replace(baseConfig, "retries = 0", "retries = 0\nmax_response_bytes = 4194304", 1) + "[middleware.fallback]\nbreaker_failures = 1000\n"
	h := newHarness(t, strings.ReplaceAll(cfg, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	before := liveHeap()
	for range 2 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil)
				if status != http.StatusBadGateway || !strings.Contains(string(body), "upstream_response_too_large") {
					t.Errorf("%d %s", status, body)
				}
			})
		}
		wg.Wait()
	}
	grown := int64(liveHeap()) - int64(before)
	t.Logf("live heap grew by %d KiB", grown>>10)
	if grown > limit {
		t.Fatalf("the live heap grew by %d MiB after the refused answers", grown>>20)
	}
}
