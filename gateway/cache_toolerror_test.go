package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// An answer the model wrote after a server tool failed is not stored: the
// failure (a tool's service down for a moment) must not be served for the
// cache's TTL to everyone who asks the same question. The next ask runs the
// tool again and its answer, made with a result, is the one kept (the tool
// is idempotent: an answer a volatile tool took part in is never kept, and
// its failed calls are tried twice more). Streamed and JSON fills alike.
func TestCacheNeverStoresAnAnswerMadeWithAFailedTool(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hits := map[string]int{} // by the tool's arguments: the first call of each fails, and its two retries
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hits[string(b)]++
		n := hits[string(b)]
		mu.Unlock()
		if n <= 3 {
			http.Error(w, "upstream down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"temp":21}`))
	}))
	t.Cleanup(srv.Close)
	cfg := cacheConfig + `
[[tools]]
name = "weather"
kind = "http"
url = "` + srv.URL + `"
idempotent = true
parameters = '{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}'
`
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "user" {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "weather", Arguments: `{"city":"` + c.LastText + `"}`}}}
		}
		return mockllm.Turn{Text: "Weather: " + strings.Join(c.ToolResults, " | "), Usage: &mockllm.Usage{Prompt: 9, Completion: 4}}
	}})
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{false, true} {
		city := map[bool]string{false: "Oslo", true: "Bergen"}[stream]
		steps := []struct {
			header  string
			content string // a part of the answer
		}{
			{"miss", `"error"`},
			{"miss", `"temp":21`},
			{"hit", `"temp":21`},
		}
		for i, s := range steps {
			var content, hv string
			if stream {
				acc, _, v := h.streamed(det(city), true, schema)
				content, hv = acc.Choices[0].Message.Content, v
			} else {
				resp, v := h.chat(det(city))
				content, hv = resp.Choices[0].Message.Content, v
			}
			if hv != s.header || !strings.Contains(content, s.content) {
				t.Fatalf("%s, ask %d: x-gateway-cache %q (want %q), content %q (want it to hold %s)", city, i, hv, s.header, content, s.content)
			}
		}
		mu.Lock()
		n := hits[`{"city":"`+city+`"}`]
		mu.Unlock()
		if n != 4 {
			t.Fatalf("%s: tool server hit %d times, want 4 (three for the failed call, one for the kept answer)", city, n)
		}
	}
}

// An answer a server tool took part in is stored only when the tool is
// marked idempotent, or is a pure builtin (calculator): a hit does not run
// the tool, so an answer made with current_time (or with a call that sends
// a message) would stand for the time, or the message, of the first ask.
// JSON and streamed fills alike.
func TestCacheStoresNoAnswerOfAVolatileTool(t *testing.T) {
	t.Parallel()
	var calls sync.Map // tool → *atomic.Int64, the calls the model made
	counter := func(tool string) *atomic.Int64 {
		v, _ := calls.LoadOrStore(tool, new(atomic.Int64))
		return v.(*atomic.Int64)
	}
	count := func(tool string) int { return int(counter(tool).Load()) }
	cfg := cacheConfig + `
[[tools]]
name = "current_time"
kind = "builtin"
[[tools]]
name = "calculator"
kind = "builtin"
`
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "user" {
			tool, args := "calculator", `{"expression":"6*7"}`
			if strings.HasPrefix(c.LastText, "time") {
				tool, args = "current_time", `{}`
			}
			counter(tool).Add(1)
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: tool, Arguments: args}}}
		}
		return mockllm.Turn{Text: "Result: " + strings.Join(c.ToolResults, " | ")}
	}})
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{false, true} {
		ask := func(q string) string {
			if stream {
				_, _, v := h.streamed(det(q), true, schema)
				return v
			}
			_, v := h.chat(det(q))
			return v
		}
		suffix := map[bool]string{false: " json", true: " stream"}[stream]
		for _, tc := range []struct {
			q, tool, second string
			calls           int
		}{
			{"time now" + suffix, "current_time", "miss", 2},
			{"calc" + suffix, "calculator", "hit", 1},
		} {
			before := count(tc.tool)
			if v := ask(tc.q); v != "miss" {
				t.Fatalf("%s: first ask %q", tc.q, v)
			}
			if v := ask(tc.q); v != tc.second {
				t.Fatalf("%s: second ask %q, want %q", tc.q, v, tc.second)
			}
			if n := count(tc.tool) - before; n != tc.calls {
				t.Fatalf("%s: the model called %s %d times, want %d", tc.q, tc.tool, n, tc.calls)
			}
		}
	}
}
