package gateway

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// hugeBody is the size of the answer the huge upstream sends: generated as it
// is written, never held by the test.
const hugeBody = 1 << 30

// hugeUpstream answers every request with status and a JSON-looking body of
// hugeBody bytes, with a Content-Length or chunked. It counts the bytes it
// managed to write.
func hugeUpstream(t *testing.T, status int, chunked bool, sent *atomic.Int64) *httptest.Server {
	t.Helper()
	block := []byte(strings.Repeat("a", 64<<10))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(hugeBody))
		}
		w.WriteHeader(status)
		n := 0
		for n < hugeBody {
			k, err := w.Write(block)
			n += k
			sent.Add(int64(k))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// heapPeak samples HeapInuse until stop is called and returns the highest
// value seen.
func heapPeak() (stop func() uint64) {
	var (
		peak uint64
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return peak }
}

func heapInuseAfterGC() uint64 {
	runtime.GC()
	runtime.GC() // a second cycle empties sync.Pool victims too
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// An upstream that answers a non-streamed call with 1 GiB (as a success or
// as an error status) costs the gateway at most max_response_bytes (or the
// kept part of an error body), not the whole body: the client gets a clean
// envelope without a byte of the body, and the heap stays flat. Not
// parallel: it measures the process heap.
func TestHugeUpstreamBodyIsRefused(t *testing.T) {
	schema := wiretest.LoadSchema(t)
	cases := []struct {
		name    string
		status  int
		chunked bool
		want    int
		code    string
	}{
		{name: "ok with content-length", status: 200, want: 502, code: "upstream_response_too_large"},
		{name: "ok chunked", status: 200, chunked: true, want: 502, code: "upstream_response_too_large"},
		{name: "error status with content-length", status: 500, want: 500},
		{name: "error status chunked", status: 500, chunked: true, want: 500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sent atomic.Int64
			up := hugeUpstream(t, c.status, c.chunked, &sent)
			cfg := strings.Replace(baseConfig, "retries = 0", "retries = 0\nmax_response_bytes = 4194304", 1)
			h := newHarness(t, strings.ReplaceAll(cfg, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})

			before := heapInuseAfterGC()
			stop := heapPeak()
			start := time.Now()
			status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil)
			took := time.Since(start)
			peak := stop()
			after := heapInuseAfterGC()
			t.Logf("status %d in %v; upstream wrote %d MiB; heap in use %d MiB before, peak +%d MiB, +%d MiB after GC",
				status, took, sent.Load()>>20, before>>20, int64(peak-before)>>20, int64(after-before)>>20)

			if took > 30*time.Second { // unbounded, it took minutes
				t.Errorf("the answer took %v", took)
			}
			if status != c.want {
				t.Fatalf("status %d, want %d: %.300s", status, c.want, body)
			}
			if err := schema.ErrorBody(body); err != nil {
				t.Fatalf("%v: %.300s", err, body)
			}
			if c.code != "" && gjson.GetBytes(body, "error.code").Str != c.code {
				t.Fatalf("code: %s", body)
			}
			if strings.Contains(string(body), "aaaa") {
				t.Fatalf("the upstream's body reached the client: %.300s", body)
			}
			const limit = 64 << 20
			if peak > before && peak-before > limit {
				t.Errorf("heap grew by %d MiB while reading a %d MiB body; want < %d MiB", (peak-before)>>20, hugeBody>>20, limit>>20)
			}
			if after > before && after-before > limit {
				t.Errorf("heap still %d MiB larger after the request", (after-before)>>20)
			}
		})
	}
}
