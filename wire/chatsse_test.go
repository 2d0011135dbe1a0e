package wire

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/wiretest"
	"github.com/tidwall/gjson"
)

var testUsage = []byte(`{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`)

// encodeAll renders evs with ChatSSE and frames the chunks as a client
// receives them.
func encodeAll(h Header, evs []Event) (raw []byte, chunks []string) {
	w := NewChatSSE(h)
	for i := range evs {
		if c := w.Encode(nil, &evs[i]); len(c) > 0 {
			chunks = append(chunks, string(c))
			raw = append(append(append(raw, "data: "...), c...), "\n\n"...)
		}
	}
	return append(raw, "data: [DONE]\n\n"...), chunks
}

// TestChatSSEKeepsTheStreamRules feeds ChatSSE sequences a careless
// producer might send and checks that the chunks still follow the stream
// rules and say what was meant.
func TestChatSSEKeepsTheStreamRules(t *testing.T) {
	t.Parallel()
	trace := []byte(`{"iterations":1}`)
	tests := []struct {
		name      string
		usage     bool
		events    []Event
		content   string
		calls     []string // name(args)
		finish    string
		chunks    int
		traceLast bool
	}{
		{name: "text with usage", usage: true, events: []Event{{Kind: Role}, {Kind: Text, Key: "content", Text: []byte("hé\n\"q\"")},
			{Kind: Finish, Finish: "stop"}, {Kind: Usage, Raw: testUsage, Trace: trace}},
			content: "hé\n\"q\"", finish: "stop", chunks: 4, traceLast: true},
		{name: "second role dropped", events: []Event{{Kind: Role}, {Kind: Text, Key: "content", Text: []byte("a")}, {Kind: Role},
			{Kind: Text, Key: "content", Text: []byte("b")}, {Kind: Finish, Finish: "stop", Trace: trace}},
			content: "ab", finish: "stop", chunks: 4, traceLast: true},
		{name: "empty text makes no chunk", events: []Event{{Kind: Role}, {Kind: Text, Key: "content"}, {Kind: Finish, Finish: "length"}},
			finish: "length", chunks: 2},
		{name: "calls numbered densely in header order", events: []Event{{Kind: Role},
			{Kind: CallHeader, ID: "call_a", Name: "f"}, {Kind: CallArgs, Text: []byte(`{"x":`)}, {Kind: CallArgs, Text: []byte(`1}`)},
			{Kind: CallHeader, ID: "call_b", Name: "g"}, {Kind: CallArgs, Text: []byte(`{}`)},
			{Kind: Finish, Finish: "tool_calls"}},
			calls: []string{`f({"x":1})`, `g({})`}, finish: "tool_calls", chunks: 7},
		{name: "arguments before any header dropped", events: []Event{{Kind: Role}, {Kind: CallArgs, Text: []byte(`{}`)},
			{Kind: Finish, Finish: "stop"}}, finish: "stop", chunks: 2},
		{name: "nothing after finish but usage", usage: true, events: []Event{{Kind: Role}, {Kind: Finish, Finish: "stop"},
			{Kind: Text, Key: "content", Text: []byte("late")}, {Kind: Finish, Finish: "length"}, {Kind: Role},
			{Kind: Usage, Raw: testUsage}, {Kind: Usage, Raw: testUsage}}, finish: "stop", chunks: 3},
		{name: "usage not asked for dropped", events: []Event{{Kind: Role}, {Kind: Finish, Finish: "stop"}, {Kind: Usage, Raw: testUsage}},
			finish: "stop", chunks: 2},
		{name: "usage before finish dropped", usage: true, events: []Event{{Kind: Role}, {Kind: Usage, Raw: testUsage},
			{Kind: Finish, Finish: "stop"}, {Kind: Usage, Raw: testUsage}}, finish: "stop", chunks: 3},
		{name: "finish without a reason says stop", events: []Event{{Kind: Role}, {Kind: Finish}}, finish: "stop", chunks: 2},
		{name: "end makes no chunk", events: []Event{{Kind: Role}, {Kind: Finish, Finish: "stop"}, {Kind: End}}, finish: "stop", chunks: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw, chunks := encodeAll(Header{ID: "chatcmpl-1", Created: 1767225600, Model: "gpt-x", IncludeUsage: tt.usage}, tt.events)
			sum, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: tt.usage})
			if err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
			var calls []string
			for _, c := range sum.ToolCalls {
				calls = append(calls, c.Name+"("+c.Arguments+")")
			}
			if sum.Content != tt.content || sum.FinishReason != tt.finish || strings.Join(calls, " ") != strings.Join(tt.calls, " ") {
				t.Fatalf("got content %q finish %q calls %v; want %q %q %v", sum.Content, sum.FinishReason, calls, tt.content, tt.finish, tt.calls)
			}
			if len(chunks) != tt.chunks {
				t.Fatalf("%d chunks, want %d:\n%s", len(chunks), tt.chunks, raw)
			}
			for i, c := range chunks {
				if has := gjson.Get(c, "x_gateway").Exists(); has != (tt.traceLast && i == len(chunks)-1) {
					t.Fatalf("chunk %d x_gateway %v: %s", i, has, c)
				}
			}
		})
	}
}

// TestChatSSESchema validates every chunk form against the OpenAPI schema.
func TestChatSSESchema(t *testing.T) {
	t.Parallel()
	schema := wiretest.LoadSchema(t)
	raw, _ := encodeAll(Header{ID: "chatcmpl-1", Created: 1, Model: "m", Fingerprint: "fp_1", IncludeUsage: true}, []Event{
		{Kind: Role}, {Kind: Text, Key: "content", Text: []byte("hi")}, {Kind: Text, Key: "refusal", Text: []byte("no")},
		{Kind: CallHeader, ID: "call_a", Name: "f"}, {Kind: CallArgs, Text: []byte(`{}`)},
		{Kind: Finish, Finish: "tool_calls"}, {Kind: Usage, Raw: testUsage}})
	wiretest.CheckStreamAll(t, raw, wiretest.Options{WantUsage: true}, schema)
}

// TestChatJSON: the accumulated chat.completion of an event sequence is
// what the stream of the same events accumulates, and valid by the schema.
func TestChatJSON(t *testing.T) {
	t.Parallel()
	h := Header{ID: "chatcmpl-1", Created: 1767225600, Model: "gpt-x", Fingerprint: "fp_1", IncludeUsage: true}
	evs := []Event{{Kind: Role}, {Kind: Text, Key: "content", Text: []byte("Checking ")}, {Kind: Text, Key: "content", Text: []byte("Zürich.")},
		{Kind: CallHeader, ID: "call_a", Name: "lookup_city"}, {Kind: CallArgs, Text: []byte(`{"name":`)}, {Kind: CallArgs, Text: []byte(`"Zürich"}`)},
		{Kind: Finish, Finish: "tool_calls"}, {Kind: Usage, Raw: testUsage, Trace: []byte(`{"iterations":2}`)}, {Kind: End}}
	j := NewChatJSON(h)
	body := completionOf(t, j, evs)
	raw, _ := encodeAll(h, evs)
	sum, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	m := gjson.GetBytes(body, "choices.0.message")
	if m.Get("content").Str != sum.Content || gjson.GetBytes(body, "choices.0.finish_reason").Str != sum.FinishReason ||
		m.Get("tool_calls.0.function.arguments").Str != sum.ToolCalls[0].Arguments || m.Get("tool_calls.0.id").Str != "call_a" ||
		gjson.GetBytes(body, "usage").Raw != string(testUsage) || gjson.GetBytes(body, "x_gateway.iterations").Int() != 2 ||
		gjson.GetBytes(body, "system_fingerprint").Str != "fp_1" {
		t.Fatalf("completion %s disagrees with the stream %+v", body, sum)
	}
	if again := j.Encode(nil, &Event{Kind: End}); len(again) != 0 {
		t.Fatalf("a second End appended %s", again)
	}
}

// completionOf encodes evs with j and checks the completion against the
// schema.
func completionOf(t *testing.T, j *ChatJSON, evs []Event) []byte {
	t.Helper()
	var body []byte
	for i := range evs {
		body = j.Encode(body, &evs[i])
	}
	if err := wiretest.LoadSchema(t).Completion(body); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return body
}

// BenchmarkChatSSEText is the per-delta cost of the live loop's encoder.
func BenchmarkChatSSEText(b *testing.B) {
	w := NewChatSSE(Header{ID: "chatcmpl-0123456789", Created: 1767225600, Model: "gpt-4o-mini", IncludeUsage: true})
	w.Encode(nil, &Event{Kind: Role})
	buf := make([]byte, 0, 4096)
	e := Event{Kind: Text, Key: "content", Text: []byte("The answer is forty")}
	b.ReportAllocs()
	for b.Loop() {
		buf = w.Encode(buf[:0], &e)
	}
}

// TestChatJSONKeepsWhatTheStreamForwards: reasoning text the stream passes
// on is in the JSON message too, and a choice whose finish never came ends
// "stop" in both forms (the JSON form wrote "").
func TestChatJSONKeepsWhatTheStreamForwards(t *testing.T) {
	t.Parallel()
	h := Header{ID: "chatcmpl-1", Created: 1767225600, Model: "gpt-x"}
	evs := []Event{{Kind: Role}, {Kind: Text, Key: "reasoning_content", Text: []byte("think ")}, {Kind: Text, Key: "reasoning_content", Text: []byte("more")},
		{Kind: Text, Key: "content", Text: []byte("Answer.")}, {Kind: Finish}, {Kind: End}}
	j := NewChatJSON(h)
	body := completionOf(t, j, evs)
	raw, _ := encodeAll(h, evs)
	if !strings.Contains(string(raw), `"reasoning_content":"think "`) {
		t.Fatalf("the stream does not forward the reasoning: %s", raw)
	}
	m := gjson.GetBytes(body, "choices.0.message")
	if m.Get("reasoning_content").Str != "think more" || m.Get("content").Str != "Answer." || gjson.GetBytes(body, "choices.0.finish_reason").Str != "stop" {
		t.Fatalf("completion %s", body)
	}
	sum, err := wiretest.CheckStream(raw, wiretest.Options{})
	if err != nil || sum.FinishReason != "stop" {
		t.Fatalf("stream finish %q, %v", sum.FinishReason, err)
	}
}
