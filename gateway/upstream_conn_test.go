package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// Regression tests for defects found in review; each failed before its fix.

// Streamed uploads through the pass-through: the server's request stream was
// released twice (once by the client request, once by the server) and two
// connections ended up sharing it: "reading released body stream" panics.
func TestPassthroughConcurrentStreamedUploads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+openPassthrough, mockllm.Options{})
	body := bytes.Repeat([]byte("0123456789abcdef"), 20<<10/16) // 20 KiB, beyond fasthttp's buffered body
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 4; j++ {
				resp, err := http.Post(h.base+"/files", "application/octet-stream", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || len(gjson.GetBytes(b, "body").Str) != len(body) {
					errs <- fmt.Errorf("status %d, echoed %d bytes", resp.StatusCode, len(gjson.GetBytes(b, "body").Str))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Many streams in a row over a small pool: a cancel that ran before Close
// fired the stream's AfterFunc on a connection already back in the pool,
// which then failed another request with a timeout.
func TestStreamsReuseConnectionsSafely(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(baseConfig, "retries = 0", "retries = 0\nmax_conns = 2", 1), mockllm.Options{
		Respond: mockllm.Sequence(mockllm.Turn{Text: "a short streamed answer"}),
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 25; j++ {
				status, _, b := h.post("/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
				if status != 200 || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of 200 streams failed", failed)
	}
}

// A non-stream answer whose model already had the client's name was returned
// pointing into a pooled fasthttp buffer: later requests overwrote it.
func TestNonStreamBodyIsOwned(t *testing.T) {
	t.Parallel()
	cfg := baseConfig + "\n[[models]]\nname = \"same\"\nprovider = \"up\"\n"
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn { return mockllm.Turn{Text: "echo " + c.LastText} }})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				q := fmt.Sprintf("q-%d-%d", i, j)
				_, _, b := h.post("/chat/completions", `{"model":"same","messages":[{"role":"user","content":"`+q+`"}]}`, nil)
				if got := gjson.GetBytes(b, "choices.0.message.content").Str; got != "echo "+q {
					errs <- fmt.Sprintf("asked %s, got %q", q, got)
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// An upstream 401 is about the gateway's provider key: its message (which
// may quote key fragments) never reaches the client.
func TestUpstreamAuthMessageNotForwarded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{
		Fault: mockllm.StatusFault(401, "invalid_api_key", "Incorrect API key provided: sk-proj-****abcd")})})
	status, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"x"}]}`, nil)
	if status != 401 || strings.Contains(string(b), "sk-proj") || gjson.GetBytes(b, "error.code").Str != "upstream_auth" {
		t.Fatalf("%d %s", status, b)
	}
}
