package contextedit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

func jstr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func sysMsg(s string) string  { return `{"role":"system","content":` + jstr(s) + `}` }
func userMsg(s string) string { return `{"role":"user","content":` + jstr(s) + `}` }
func asstMsg(s string) string { return `{"role":"assistant","content":` + jstr(s) + `}` }

// callMsg is an assistant turn calling tool name with id.
func callMsg(id, name, args string) string {
	return `{"role":"assistant","content":null,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":` + jstr(args) + `}}]}`
}

func resultMsg(id, content string) string {
	return `{"role":"tool","tool_call_id":"` + id + `","content":` + jstr(content) + `}`
}

// toolOutput is a realistic tool result of roughly n records.
func toolOutput(i, n int) string {
	var b strings.Builder
	b.WriteString(`{"status":"ok","data":[`)
	for k := range n {
		if k > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"title":"Result %d of search %d","snippet":"The quick brown fox jumps over the lazy dog near Oslo, item %d."}`, k, k, i, k*i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// loop returns the messages of a tool loop with rounds calls of tool name(i).
func loop(rounds, records int, name func(int) string) []string {
	msgs := []string{sysMsg("You are a research agent. Use the tools."), userMsg("Find everything about foxes in Oslo.")}
	for i := range rounds {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs, callMsg(id, name(i), fmt.Sprintf(`{"query":"foxes Oslo page %d","limit":%d}`, i, records)), resultMsg(id, toolOutput(i, records)))
	}
	return msgs
}

func search(int) string { return "search" }

func chatBody(msgs ...string) []byte {
	return []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `],"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}]}`)
}

// capture is the next handler: it records what it was sent.
type capture struct {
	mu   sync.Mutex
	reqs []*pipeline.Request
}

func (c *capture) Chat(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, r)
	return &pipeline.Response{Body: []byte(`{}`)}, nil
}

func (c *capture) last(t testing.TB) *pipeline.Request {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) == 0 {
		t.Fatal("next was not called")
	}
	return c.reqs[len(c.reqs)-1]
}

func ceConfig(mod func(*config.ContextEdit)) config.ContextEdit {
	c := config.Defaults().Middleware.ContextEdit
	if mod != nil {
		mod(&c)
	}
	return c
}

func newHandler(cfg config.ContextEdit) (pipeline.Handler, *capture) {
	next := &capture{}
	return New(Options{Config: cfg, Logger: zerolog.Nop()})(next), next
}

func request(body []byte, window int) *pipeline.Request {
	return &pipeline.Request{Body: body, Model: "m", Route: &pipeline.Route{Name: "m", ContextWindow: window}, Meta: &pipeline.Meta{}}
}

func mustCount(t testing.TB, body []byte) int {
	t.Helper()
	n, err := counter(t, "").Count(body)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// messages returns the raw messages of body.
func messages(body []byte) []string {
	var out []string
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		out = append(out, m.Raw)
		return true
	})
	return out
}

// checkPairing fails unless every tool call has exactly one result after it
// and every result answers a call before it.
func checkPairing(t testing.TB, body []byte) {
	t.Helper()
	open := map[string]bool{}
	for i, m := range messages(body) {
		r := gjson.Parse(m)
		switch r.Get("role").Str {
		case "assistant":
			r.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
				open[c.Get("id").Str] = true
				return true
			})
		case "tool":
			id := r.Get("tool_call_id").Str
			if !open[id] {
				t.Errorf("message %d: result %s has no call before it", i, id)
			}
			delete(open, id)
		case "user":
			if len(open) > 0 {
				t.Errorf("message %d: user turn while calls %v are unanswered", i, open)
			}
		}
	}
	if len(open) > 0 {
		t.Errorf("calls without results: %v", open)
	}
}

// contents maps tool_call_id to the tool result content in body.
func contents(body []byte) map[string]string {
	out := map[string]string{}
	for _, m := range messages(body) {
		r := gjson.Parse(m)
		if r.Get("role").Str == "tool" {
			out[r.Get("tool_call_id").Str] = r.Get("content").Str
		}
	}
	return out
}

// arguments maps tool_call_id to the call's arguments in body.
func arguments(body []byte) map[string]string {
	out := map[string]string{}
	for _, m := range messages(body) {
		gjson.Parse(m).Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
			out[c.Get("id").Str] = c.Get("function.arguments").Str
			return true
		})
	}
	return out
}
