package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/option"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// Issue 7 acceptance, end to end: context editing keeps a tool loop with
// large tool results inside the window, edits a fallback for its own window,
// reports itself in x-gateway-context-edits, and keeps its edits stable from
// round to round.

const placeholder = "[tool result cleared]"

// pageText is the deterministic ~6 KB plain-text body of page n.
func pageText(n int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < 6000; i++ {
		fmt.Fprintf(&sb, "Page %d, line %d: the quick brown fox jumps over the lazy dog near river %d.\n", n, i, (n*31+i)%97)
	}
	return sb.String()
}

// pageServer serves pageText for the http tool: it reads {"page":n}.
func pageServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, pageText(int(gjson.GetBytes(b, "page").Int())))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// editLoopConfig: "gpt-edit" and "gpt-raw" share the upstream "up-model"
// (window 4000 on the mock, bytes/4); only gpt-edit has context editing. The
// trigger (2000 tiktoken tokens) and keep = 1 leave at most ~1.5 pages
// upstream, where the unedited loop needs 6.
const editLoopConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
retries = 0
[[models]]
name = "gpt-edit"
provider = "up"
upstream = "up-model"
context_window = 4000
[[models]]
name = "gpt-raw"
provider = "up"
upstream = "up-model"
context_window = 4000
middleware = ["prompt_cache", "fallback"]
[[tools]]
name = "fetch_page"
kind = "http"
url = "{{HTTP}}"
parameters = '{"type":"object","properties":{"page":{"type":"integer"}},"required":["page"]}'
timeout = "5s"
[tool_loop]
max_iterations = 10
[middleware.context_edit]
trigger = 2000
keep = 1
`

const loopPages = 6

// readPages calls fetch_page once per round until loopPages results are in
// the transcript (cleared ones included: editing never removes a tool
// message), then answers.
func readPages(c *mockllm.Call) mockllm.Turn {
	n := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array())
	if c.LastRole == "user" && strings.Contains(c.LastText, "no tools") {
		return mockllm.Turn{Text: "nothing to read"}
	}
	if n < loopPages {
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "fetch_page", Arguments: fmt.Sprintf(`{"page":%d}`, n+1)}}}
	}
	return mockllm.Turn{Text: fmt.Sprintf("read %d pages", n)}
}

func editLoopHarness(t *testing.T) *harness {
	cfg := strings.ReplaceAll(editLoopConfig, "{{HTTP}}", pageServer(t))
	return newHarness(t, cfg, mockllm.Options{Respond: readPages, ContextWindow: map[string]int{"up-model": 4000}})
}

// chatBodies returns the recorded chat completion bodies sent to model, in order.
func chatBodies(h *harness, model string) [][]byte {
	var out [][]byte
	for _, r := range h.mock.Requests() {
		if r.Model == model && strings.HasSuffix(r.Path, "/chat/completions") {
			out = append(out, r.Body)
		}
	}
	return out
}

// toolContents returns the contents of the tool messages of body, in order.
func toolContents(body []byte) []string {
	var out []string
	for _, c := range gjson.GetBytes(body, `messages.#(role=="tool")#.content`).Array() {
		out = append(out, c.Str)
	}
	return out
}

func TestContextEditToolLoopOverflow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		model  string
		edit   bool
		stream bool
	}{
		{name: "without editing the upstream overflows", model: "gpt-raw"},
		{name: "with editing the loop completes", model: "gpt-edit", edit: true},
		{name: "with editing the streamed loop completes", model: "gpt-edit", edit: true, stream: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := editLoopHarness(t)
			p := userMsg("read every page")
			p.Model = tc.model
			if tc.stream {
				acc, sum, err := h.streamChat(p, wiretest.Options{}, wiretest.LoadSchema(t), option.WithHeader("x-gateway-tool-trace", "1"))
				if err != nil {
					t.Fatal(err)
				}
				if got := acc.Choices[0].Message.Content; got != fmt.Sprintf("read %d pages", loopPages) {
					t.Fatalf("answer %q", got)
				}
				// The response headers left with the first round, before any
				// edit: the trace on the last chunk reports them, and the
				// upstream bodies show them.
				last := sum.Chunks[len(sum.Chunks)-1]
				if n := gjson.GetBytes(last, "x_gateway.context_edits.cleared").Int(); n != loopPages-1 {
					t.Fatalf("x_gateway.context_edits on the last chunk: %s", gjson.GetBytes(last, "x_gateway"))
				}
				bodies := chatBodies(h, "up-model")
				if n := len(bodies); n != loopPages+1 {
					t.Fatalf("%d upstream calls, want %d", n, loopPages+1)
				}
				checkStableEdits(t, bodies)
				return
			}
			resp, err := h.client.Chat.Completions.New(context.Background(), p)
			_, hdr := h.lastRaw()
			bodies := chatBodies(h, "up-model")
			if !tc.edit {
				var apiErr *openai.Error
				if !asAPIError(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
					t.Fatalf("want 400 context_length_exceeded, got %v (%+v)", err, resp)
				}
				if v := hdr.Get(contextedit.MetaHeader); v != "" {
					t.Fatalf("%s = %q without context editing", contextedit.MetaHeader, v)
				}
				// The mock refused the round whose transcript outgrew its window.
				if n := len(bodies); n < 2 || n > loopPages {
					t.Fatalf("%d upstream calls before the overflow", n)
				}
				for _, b := range bodies {
					for _, c := range toolContents(b) {
						if c == placeholder {
							t.Fatal("a tool result was cleared without context editing")
						}
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != fmt.Sprintf("read %d pages", loopPages) {
				t.Fatalf("answer %q", got)
			}
			if n := len(bodies); n != loopPages+1 {
				t.Fatalf("%d upstream calls, want %d", n, loopPages+1)
			}
			// The header reports the clears of the whole client request; keep = 1
			// leaves the last result, every earlier one is cleared by the end.
			v := hdr.Get(contextedit.MetaHeader)
			if !strings.HasPrefix(v, fmt.Sprintf("cleared=%d;tokens_saved=", loopPages-1)) {
				t.Fatalf("%s = %q", contextedit.MetaHeader, v)
			}
			last := toolContents(bodies[len(bodies)-1])
			for i, c := range last {
				if cleared := c == placeholder; cleared != (i < len(last)-1) {
					t.Fatalf("last round: result %d cleared=%v: %.80q", i, cleared, c)
				}
			}
			if !strings.Contains(last[len(last)-1], fmt.Sprintf("Page %d, line 0", loopPages)) {
				t.Fatalf("the kept result is not the last page: %.80q", last[len(last)-1])
			}
			checkStableEdits(t, bodies)

			// A request without edits carries no header.
			q := userMsg("no tools needed")
			q.Model = tc.model
			if _, err := h.client.Chat.Completions.New(context.Background(), q); err != nil {
				t.Fatal(err)
			}
			if _, hdr := h.lastRaw(); hdr.Get(contextedit.MetaHeader) != "" {
				t.Fatalf("%s = %q without edits", contextedit.MetaHeader, hdr.Get(contextedit.MetaHeader))
			}
		})
	}
}

// checkStableEdits checks consecutive rounds of one tool loop: every message
// of round k comes back byte for byte in round k+1, except a tool result
// newly cleared in k+1; a result cleared in round k stays cleared with the
// same placeholder. So the edited prefix is shared up to the newest clear.
func checkStableEdits(t *testing.T, bodies [][]byte) {
	t.Helper()
	carried := 0
	for k := 0; k+1 < len(bodies); k++ {
		prev := gjson.GetBytes(bodies[k], "messages").Array()
		next := gjson.GetBytes(bodies[k+1], "messages").Array()
		if len(next) < len(prev) {
			t.Fatalf("round %d has %d messages, round %d %d", k+2, len(next), k+1, len(prev))
		}
		for i, m := range prev {
			n := next[i]
			if m.Raw == n.Raw {
				if m.Get("content").Str == placeholder {
					carried++
				}
				continue
			}
			newlyCleared := m.Get("role").Str == "tool" && m.Get("content").Str != placeholder &&
				n.Get("content").Str == placeholder && m.Get("tool_call_id").Str == n.Get("tool_call_id").Str
			if !newlyCleared {
				t.Fatalf("round %d changed message %d of round %d:\n%.200s\n%.200s", k+2, i, k+1, m.Raw, n.Raw)
			}
		}
	}
	if carried == 0 {
		t.Fatal("no cleared result was carried from one round to the next")
	}
}

// editFallbackConfig: "primary" (window 100000) falls back to "small"
// (window 4000, the mock's too). Editing triggers at half the route's window.
const editFallbackConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
retries = 0
[[models]]
name = "primary"
provider = "up"
upstream = "up-primary"
context_window = 100000
fallbacks = ["small"]
[[models]]
name = "small"
provider = "up"
upstream = "up-small"
context_window = 4000
{{SMALL_MW}}
[middleware.context_edit]
trigger = 0.5
keep = 1
[middleware.fallback]
base_backoff = "10ms"
max_backoff = "20ms"
`

// fallbackTranscript is a client transcript with four large results of a
// client tool: ~6k tokens by the mock's estimate, 24 KB.
func fallbackTranscript() openai.ChatCompletionNewParams {
	p := userMsg("read four pages")
	p.Model = "primary"
	p.Tools = []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "read_page"}),
	}
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("call_page_%d", i)
		p.Messages = append(p.Messages,
			openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "read_page", Arguments: fmt.Sprintf(`{"page":%d}`, i)},
				}}},
			}},
			openai.ToolMessage(pageText(i), id))
	}
	return p
}

func TestContextEditFallbackToSmallerWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		smallMW string
		edit    bool
	}{
		{name: "the fallback is edited for its own window", smallMW: "", edit: true},
		{name: "without editing the fallback overflows", smallMW: `middleware = ["fallback"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := strings.ReplaceAll(editFallbackConfig, "{{SMALL_MW}}", tc.smallMW)
			h := newHarness(t, cfg, mockllm.Options{
				Respond: byModel(map[string]func(int) mockllm.Turn{
					"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")} },
				}),
				ContextWindow: map[string]int{"up-primary": 100000, "up-small": 4000},
			})
			resp, err := h.client.Chat.Completions.New(context.Background(), fallbackTranscript())
			_, hdr := h.lastRaw()
			if h.mock.Calls("up-primary") != 1 || h.mock.Calls("up-small") != 1 {
				t.Fatalf("calls: primary %d, small %d", h.mock.Calls("up-primary"), h.mock.Calls("up-small"))
			}
			// The primary's window needs no edit: it got the transcript as sent.
			for i, c := range toolContents(chatBodies(h, "up-primary")[0]) {
				if c != pageText(i+1) {
					t.Fatalf("primary: result %d edited: %.80q", i, c)
				}
			}
			small := toolContents(chatBodies(h, "up-small")[0])
			if !tc.edit {
				// The small model refused the prompt as too long; the answer
				// is the primary's 500, which a retry may get past, not a
				// context-length 400 for a prompt the primary takes.
				var apiErr *openai.Error
				if !asAPIError(err, &apiErr) || apiErr.StatusCode != 500 {
					t.Fatalf("want the primary's 500, got %v", err)
				}
				if small[0] == placeholder {
					t.Fatal("the small model's request was edited without context editing")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != "answer from up-small" {
				t.Fatalf("answer %q", got)
			}
			want := []string{placeholder, placeholder, placeholder, pageText(4)}
			if strings.Join(small, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("small model's tool results: %.80q", small)
			}
			if v := hdr.Get(contextedit.MetaHeader); !strings.HasPrefix(v, "cleared=3;tokens_saved=") {
				t.Fatalf("%s = %q", contextedit.MetaHeader, v)
			}
			if m := hdr.Get("X-Gateway-Model"); m != "small" {
				t.Fatalf("x-gateway-model %q", m)
			}
		})
	}
}

// editLoopFallbackConfig: a tool loop on "primary" (window 100000), which
// always fails, falling back every round to "small" (window 4000, the mock's
// too). The breaker never opens, so the primary is tried every round.
const editLoopFallbackConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
retries = 0
[[models]]
name = "primary"
provider = "up"
upstream = "up-primary"
context_window = 100000
fallbacks = ["small"]
[[models]]
name = "small"
provider = "up"
upstream = "up-small"
context_window = 4000
[[tools]]
name = "fetch_page"
kind = "http"
url = "{{HTTP}}"
parameters = '{"type":"object","properties":{"page":{"type":"integer"}},"required":["page"]}'
timeout = "5s"
[middleware.context_edit]
trigger = 0.5
keep = 1
[middleware.fallback]
breaker_failures = 100
`

// In a tool loop the routes share the request's edit log: the small model's
// clears are decided for its window, and the primary re-applies them in the
// next round (it would need none for its own), so no result is ever restored.
func TestContextEditToolLoopFallback(t *testing.T) {
	t.Parallel()
	cfg := strings.ReplaceAll(editLoopFallbackConfig, "{{HTTP}}", pageServer(t))
	h := newHarness(t, cfg, mockllm.Options{
		Respond: func(c *mockllm.Call) mockllm.Turn {
			if c.Model == "up-primary" {
				return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")}
			}
			return readPages(c)
		},
		ContextWindow: map[string]int{"up-primary": 100000, "up-small": 4000},
	})
	p := userMsg("read every page")
	p.Model = "primary"
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != fmt.Sprintf("read %d pages", loopPages) {
		t.Fatalf("answer %q", got)
	}
	_, hdr := h.lastRaw()
	if v := hdr.Get(contextedit.MetaHeader); !strings.HasPrefix(v, fmt.Sprintf("cleared=%d;", loopPages-1)) {
		t.Fatalf("%s = %q", contextedit.MetaHeader, v)
	}
	primary, small := chatBodies(h, "up-primary"), chatBodies(h, "up-small")
	if len(primary) != loopPages+1 || len(small) != loopPages+1 {
		t.Fatalf("calls: primary %d, small %d", len(primary), len(small))
	}
	checkStableEdits(t, small)
	cleared := func(body []byte) string {
		var b strings.Builder
		for _, c := range toolContents(body) {
			if c == placeholder {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	for k := 1; k < len(primary); k++ {
		// Round k's primary request: the small model's clears of round k-1
		// re-applied, nothing new for its own window, the new result unedited.
		if got, want := cleared(primary[k]), cleared(small[k-1])+"."; got != want {
			t.Fatalf("round %d: primary clears %q, small's previous round %q", k+1, got, want)
		}
	}
	if got := cleared(small[len(small)-1]); got != strings.Repeat("x", loopPages-1)+"." {
		t.Fatalf("last small round clears %q", got)
	}
}

// A gateway holds no tokenizer until a request needs a count: building one
// at start kept tens of MB live that every garbage collection marked. A
// request far under its model's context window counts nothing.
func TestTokenizerBuiltOnFirstUse(t *testing.T) {
	t.Parallel()
	const enc = "r50k_base" // no other test of the package uses it
	h := newHarness(t, strings.Replace(baseConfig, "context_window = 1000", "context_window = 1000\nencoding = \""+enc+"\"", 1), mockllm.Options{})
	if contextedit.CounterBuilt(enc) {
		t.Fatal("the tokenizer was built at start")
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(h.base, "http://"), "/v1")
	testproc.StreamChunks(t, addr, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, func([]byte) {})
	if contextedit.CounterBuilt(enc) {
		t.Fatal("a short request built the tokenizer")
	}
}
