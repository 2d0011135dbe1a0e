package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// An answer the model wrote after a server tool failed is not stored: the
// failure (a tool's service down for a moment) must not be served for the
// cache's TTL to everyone who asks the same question. The next ask runs the
// tool again and its answer, made with a result, is the one kept. Streamed
// and JSON fills alike.
func TestCacheNeverStoresAnAnswerMadeWithAFailedTool(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hits := map[string]int{} // by the tool's arguments: the first call of each fails
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hits[string(b)]++
		n := hits[string(b)]
		mu.Unlock()
		if n == 1 {
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
		if n != 2 {
			t.Fatalf("%s: tool server hit %d times, want 2", city, n)
		}
	}
}
