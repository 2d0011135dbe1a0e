package mockllm

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// toolFrag is one tool-call entry seen in a chunk.
type toolFrag struct {
	index       int64
	header      bool // carried id/type/name
	id, name    string
	args        string
	hasIDorName bool
}

// streamSummary is what checkStream extracts from a valid stream.
type streamSummary struct {
	text    string
	deltas  []string // content deltas
	tools   []toolFrag
	finish  string
	usage   gjson.Result
	roleRaw string // delta of the role chunk
}

// checkStream asserts the invariants every default-mode stream must meet
// (docs/wire.md, rules 5 to 13) and summarises it.
func checkStream(t *testing.T, body []byte, model string, includeUsage bool) streamSummary {
	t.Helper()
	events := sse(body)
	if len(events) == 0 || events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", body)
	}
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("[DONE] not followed by a blank line")
	}
	data := dataOf(events)
	data = data[:len(data)-1]
	var sum streamSummary
	var id, created string
	roles, finishes := 0, 0
	for i, d := range data {
		if !gjson.Valid(d) {
			t.Fatalf("chunk %d is not JSON: %s", i, d)
		}
		c := gjson.Parse(d)
		if c.Get("object").Str != "chat.completion.chunk" || c.Get("model").Str != model ||
			c.Get("system_fingerprint").Str != "fp_mock" || c.Get("error").Exists() {
			t.Fatalf("chunk %d header fields wrong: %s", i, d)
		}
		if i == 0 {
			id, created = c.Get("id").Str, c.Get("created").Raw
			if !strings.HasPrefix(id, "chatcmpl-mock-") {
				t.Fatalf("id %q", id)
			}
		} else if c.Get("id").Str != id || c.Get("created").Raw != created {
			t.Fatalf("chunk %d id/created changed: %s", i, d)
		}
		u := c.Get("usage")
		if includeUsage != u.Exists() {
			t.Fatalf("chunk %d: usage key present=%v, want %v", i, u.Exists(), includeUsage)
		}
		choices := c.Get("choices")
		if !choices.IsArray() {
			t.Fatalf("chunk %d without choices: %s", i, d)
		}
		if len(choices.Array()) == 0 {
			if !includeUsage || i != len(data)-1 || u.Type == gjson.Null {
				t.Fatalf("empty choices outside a final usage chunk: %d %s", i, d)
			}
			sum.usage = u
			continue
		}
		if includeUsage && u.Type != gjson.Null {
			t.Fatalf("chunk %d: usage must be null before the last chunk", i)
		}
		ch := choices.Get("0")
		if ch.Get("index").Int() != 0 || ch.Get("logprobs").Type != gjson.Null || !ch.Get("finish_reason").Exists() {
			t.Fatalf("chunk %d choice fields wrong: %s", i, d)
		}
		if finishes > 0 {
			t.Fatalf("chunk %d after the finish chunk", i)
		}
		delta := ch.Get("delta")
		if fr := ch.Get("finish_reason"); fr.Type != gjson.Null {
			finishes++
			sum.finish = fr.Str
			if delta.Raw != "{}" {
				t.Fatalf("finish chunk delta must be {}: %s", d)
			}
			continue
		}
		if r := delta.Get("role"); r.Exists() {
			roles++
			if i != 0 || r.Str != "assistant" {
				t.Fatalf("role in chunk %d: %s", i, d)
			}
			sum.roleRaw = delta.Raw
			continue
		}
		if c := delta.Get("content"); c.Exists() {
			if !utf8.ValidString(c.Str) {
				t.Fatalf("invalid UTF-8 delta %q", c.Str)
			}
			sum.deltas = append(sum.deltas, c.Str)
			sum.text += c.Str
		}
		if tcs := delta.Get("tool_calls"); tcs.Exists() {
			if len(tcs.Array()) != 1 {
				t.Fatalf("want one tool-call entry per chunk: %s", d)
			}
			e := tcs.Get("0")
			if !e.Get("index").Exists() {
				t.Fatalf("tool call without index: %s", d)
			}
			f := toolFrag{index: e.Get("index").Int(), args: e.Get("function.arguments").Str}
			f.id, f.name = e.Get("id").Str, e.Get("function.name").Str
			f.hasIDorName = e.Get("id").Exists() || e.Get("function.name").Exists() || e.Get("type").Exists()
			f.header = e.Get("id").Exists() && e.Get("type").Str == "function" && e.Get("function.name").Exists()
			if !utf8.ValidString(f.args) {
				t.Fatalf("invalid UTF-8 arguments fragment %q", f.args)
			}
			sum.tools = append(sum.tools, f)
		}
	}
	if roles != 1 || finishes != 1 {
		t.Fatalf("roles=%d finishes=%d, want 1 and 1", roles, finishes)
	}
	if includeUsage && !sum.usage.Exists() {
		t.Fatal("usage chunk missing")
	}
	return sum
}

func TestStreamText(t *testing.T) {
	t.Parallel()
	const text = "héllo wörld 🌍, ça va? \"quoted\"\n"
	tests := []struct {
		name  string
		usage bool
		runes int
	}{
		{name: "with usage", usage: true, runes: 0},
		{name: "without usage", usage: false, runes: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{
				Respond:  func(*Call) Turn { return Turn{Text: text} },
				Chunking: Chunking{TextRunes: tc.runes},
			})
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m-1", true, tc.usage, userHi))
			if r.status != 200 || !strings.HasPrefix(r.header["content-type"], "text/event-stream") || !r.ended {
				t.Fatalf("status %d headers %v ended %v", r.status, r.header, r.ended)
			}
			if r.header["x-request-id"] == "" || r.header["cache-control"] != "no-cache" {
				t.Fatalf("headers %v", r.header)
			}
			sum := checkStream(t, r.body, "m-1", tc.usage)
			if sum.text != text || sum.finish != "stop" || sum.roleRaw != `{"role":"assistant","content":""}` {
				t.Fatalf("text %q finish %q role %s", sum.text, sum.finish, sum.roleRaw)
			}
			want := tc.runes
			if want == 0 {
				want = 4
			}
			for i, d := range sum.deltas {
				if n := utf8.RuneCountInString(d); n > want || (i < len(sum.deltas)-1 && n != want) {
					t.Fatalf("delta %d %q has %d runes, want %d", i, d, n, want)
				}
			}
			if tc.usage {
				u := sum.usage
				if u.Get("prompt_tokens").Int() < 1 || u.Get("completion_tokens").Int() != int64(len(text)/4) ||
					u.Get("total_tokens").Int() != u.Get("prompt_tokens").Int()+u.Get("completion_tokens").Int() ||
					!u.Get("prompt_tokens_details.cached_tokens").Exists() {
					t.Fatalf("usage %s", u.Raw)
				}
			}
		})
	}
}

func TestStreamToolCalls(t *testing.T) {
	t.Parallel()
	calls := []ToolCall{
		{Name: "lookup_city", Arguments: `{"name":"Zürich","note":"日本語テキスト"}`},
		{ID: "call_fixed", Name: "local_time", Arguments: `{"tz":"CET"}`},
	}
	tests := []struct {
		name     string
		chunking Chunking
		check    func(t *testing.T, frags []toolFrag)
	}{
		{
			name:     "sequential",
			chunking: Chunking{ArgBytes: 4},
			check: func(t *testing.T, frags []toolFrag) {
				seen1 := false
				for _, f := range frags {
					if f.index == 1 {
						seen1 = true
					} else if seen1 {
						t.Fatal("call 0 fragment after call 1 started")
					}
					if !f.header && len(f.args) > 4+3 {
						t.Fatalf("fragment %q longer than ArgBytes", f.args)
					}
				}
			},
		},
		{
			name:     "interleaved",
			chunking: Chunking{InterleaveToolCalls: true},
			check: func(t *testing.T, frags []toolFrag) {
				for i := 0; i < 4; i++ {
					if frags[i].index != int64(i%2) {
						t.Fatalf("entry %d index %d: want 0,1,0,1", i, frags[i].index)
					}
				}
			},
		},
		{
			name:     "whole",
			chunking: Chunking{WholeToolCalls: true},
			check: func(t *testing.T, frags []toolFrag) {
				if len(frags) != 2 {
					t.Fatalf("want 2 whole deltas, got %d", len(frags))
				}
				for i, f := range frags {
					if !f.header || f.args != calls[i].Arguments {
						t.Fatalf("delta %d not whole: %+v", i, f)
					}
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{
				Respond:  func(*Call) Turn { return Turn{ToolCalls: calls} },
				Chunking: tc.chunking,
			})
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", true, true, userHi))
			sum := checkStream(t, r.body, "m", true)
			if sum.finish != "tool_calls" || sum.roleRaw != `{"role":"assistant","content":null}` || sum.text != "" {
				t.Fatalf("finish %q role %s text %q", sum.finish, sum.roleRaw, sum.text)
			}
			args := map[int64]string{}
			ids := map[int64]string{}
			for _, f := range sum.tools {
				if f.header {
					if _, dup := ids[f.index]; dup {
						t.Fatalf("second header for call %d", f.index)
					}
					ids[f.index] = f.id
					if f.name != calls[f.index].Name {
						t.Fatalf("name %q", f.name)
					}
				} else {
					if f.hasIDorName {
						t.Fatalf("later delta repeats id/type/name: %+v", f)
					}
					if _, ok := ids[f.index]; !ok {
						t.Fatalf("fragment before header for %d", f.index)
					}
				}
				args[f.index] += f.args
			}
			for i, c := range calls {
				if args[int64(i)] != c.Arguments {
					t.Fatalf("call %d arguments %q, want %q", i, args[int64(i)], c.Arguments)
				}
			}
			if !strings.HasPrefix(ids[0], "call_") || ids[0] == "call_fixed" || ids[1] != "call_fixed" {
				t.Fatalf("ids %v", ids)
			}
			tc.check(t, sum.tools)
		})
	}
}

func TestStreamTextThenTools(t *testing.T) {
	t.Parallel()
	_, addr := start(t, Options{Respond: func(*Call) Turn {
		return Turn{Text: "Let me check.", ToolCalls: []ToolCall{{Name: "f", Arguments: `{}`}}, FinishReason: "length",
			Usage: &Usage{Prompt: 100, Completion: 7, Cached: 64, CacheWrite: 12}}
	}})
	r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", true, true, userHi))
	sum := checkStream(t, r.body, "m", true)
	if sum.text != "Let me check." || len(sum.tools) != 2 || sum.finish != "length" {
		t.Fatalf("%+v", sum)
	}
	u := sum.usage
	if u.Get("prompt_tokens").Int() != 100 || u.Get("total_tokens").Int() != 107 ||
		u.Get("prompt_tokens_details.cached_tokens").Int() != 64 || u.Get("prompt_tokens_details.cache_write_tokens").Int() != 12 {
		t.Fatalf("usage %s", u.Raw)
	}
}

// TestSplitWrites reads the raw socket: every event arrives in several HTTP
// chunks, and some chunk ends inside a multi-byte character.
func TestSplitWrites(t *testing.T) {
	t.Parallel()
	_, addr := start(t, Options{
		Respond:  func(*Call) Turn { return Turn{Text: "añb€c🌍d"} },
		Chunking: Chunking{SplitWrites: true, TextRunes: 2},
	})
	r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", true, false, userHi))
	if !r.ended {
		t.Fatal("stream not ended")
	}
	sum := checkStream(t, r.body, "m", false)
	if sum.text != "añb€c🌍d" {
		t.Fatalf("text %q", sum.text)
	}
	events := len(dataOf(sse(r.body)))
	if len(r.chunks) < 2*events {
		t.Fatalf("%d HTTP chunks for %d events: writes were not split", len(r.chunks), events)
	}
	insideRune, insideData, betweenNewlines := false, false, false
	for _, c := range r.chunks {
		if !utf8.Valid(c) {
			insideRune = true
		}
		if string(c) == "dat" {
			insideData = true
		}
		if len(c) > 0 && c[0] == '\n' && (len(c) == 1) {
			betweenNewlines = true
		}
	}
	if !insideRune || !insideData || !betweenNewlines {
		t.Fatalf("splits: inside rune %v, inside data: %v, between newlines %v", insideRune, insideData, betweenNewlines)
	}
}

// TestStreamStampHeld: with StampHeld every chunk carries, as its first
// fields, how long the mock held the request until it wrote the chunk (at
// least the delays it slept by then, growing chunk by chunk) and when the
// request came; the chunks stay what they were otherwise.
func TestStreamStampHeld(t *testing.T) {
	t.Parallel()
	const first, gap = 20 * time.Millisecond, 5 * time.Millisecond
	_, addr := start(t, Options{
		Respond:        func(*Call) Turn { return Turn{Text: "stamped answer"} },
		FirstByteDelay: first, ChunkDelay: gap, StampHeld: true,
	})
	r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m-1", true, true, userHi))
	data := sse(r.body)
	for i := range data {
		data[i] = strings.TrimPrefix(data[i], "data: ")
	}
	if r.status != 200 || len(data) < 4 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("status %d, events %q", r.status, data)
	}
	var last int64
	for i, d := range data[:len(data)-1] {
		held := gjson.Get(d, "x_mock_held_ns")
		if !strings.HasPrefix(d, `{"x_mock_held_ns":`) || !gjson.Valid(d) || held.Int() < int64(first+time.Duration(i)*gap) || held.Int() <= last {
			t.Fatalf("chunk %d %s: held %d after %d", i, d, held.Int(), last)
		}
		last = held.Int()
		if at := time.Unix(0, gjson.Get(d, "x_mock_received_unix_ns").Int()); time.Since(at) > time.Minute || time.Until(at) > 0 {
			t.Fatalf("chunk %d %s: received at %v", i, d, at)
		}
	}
	sum := checkStream(t, r.body, "m-1", true)
	if sum.text != "stamped answer" {
		t.Fatalf("text %q", sum.text)
	}
}
