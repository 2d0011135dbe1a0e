package anthropic

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

func TestLocalStops(t *testing.T) {
	t.Parallel()
	for body, want := range map[string][]string{
		`{"stop":"\n"}`:                  {"\n"},
		`{"stop":["\n","END"," \t",""]}`: {"\n", " \t"},
		`{"stop":"END"}`:                 nil,
		`{}`:                             nil,
	} {
		if got := LocalStops([]byte(body)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}

// textStream is a Messages stream of one text block sent in the given
// fragments, a tool_use block after it, and stop_reason tool_use.
func textStream(fragments ...string) [][]byte {
	evs := []string{`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`}
	for _, f := range fragments {
		evs = append(evs, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+strconv.Quote(f)+`}}`)
	}
	evs = append(evs, `{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`, `{"type":"message_stop"}`)
	out := make([][]byte, len(evs))
	for i, e := range evs {
		out[i] = []byte(e)
	}
	return out
}

// decodeStream runs events through a decoder with stops and returns the
// content, whether a tool call, the finish reason and the completion
// tokens the chunks carried.
func decodeStream(t *testing.T, stops []string, events [][]byte) (content string, call bool, finish string, out int64) {
	t.Helper()
	d := NewStreamDecoder("a", wire.Header{Created: 1, Model: "claude", IncludeUsage: true})
	d.StopAt(stops)
	for _, ev := range events {
		if err := d.Feed(ev); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		for c, ok := d.Pop(); ok; c, ok = d.Pop() {
			ch := gjson.ParseBytes(c)
			content += ch.Get("choices.0.delta.content").Str
			call = call || ch.Get("choices.0.delta.tool_calls").Exists()
			if f := ch.Get("choices.0.finish_reason").Str; f != "" {
				finish = f
			}
			if u := ch.Get("usage.completion_tokens"); u.Exists() {
				out = u.Int()
			}
		}
	}
	return content, call, finish, out
}

// A stop sequence of whitespace only, which Anthropic refuses, is applied
// by the gateway: the content ends where it begins (however the fragments
// cut it), nothing after it is shown, the finish is "stop", and the usage
// is the upstream's. The JSON answer says the same.
func TestLocalStopsEndTheContent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		stops     []string
		fragments []string
		want      string
		stopped   bool
	}{
		{"one line", []string{"\n"}, []string{"line", " one", "\n", "line two"}, "line one", true},
		{"split sequence", []string{"\n\n"}, []string{"a\n", "b\n", "\nc"}, "a\nb", true},
		{"the earliest of two", []string{"\n\n", " \t"}, []string{"x \t y\n\nz"}, "x", true},
		{"a held start that was no match", []string{"\n\n"}, []string{"a\n", "b"}, "a\nb", false},
		{"held at the end", []string{"\n\n"}, []string{"a", "\n"}, "a\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, call, finish, out := decodeStream(t, tc.stops, textStream(tc.fragments...))
			want := "tool_calls"
			if tc.stopped {
				want = "stop"
			}
			if content != tc.want || call == tc.stopped || finish != want || out != 9 {
				t.Errorf("stream: content %q call %v finish %q tokens %d; want %q, call %v, %q, 9", content, call, finish, out, tc.want, !tc.stopped, want)
			}
			body := `{"id":"m","type":"message","content":[{"type":"text","text":` + strconv.Quote(strings.Join(tc.fragments, "")) +
				`},{"type":"tool_use","id":"toolu_1","name":"f","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":9}}`
			js, err := DecodeMessageStopping("a", []byte(body), wire.Header{Created: 1, Model: "claude"}, tc.stops)
			if err != nil {
				t.Fatal(err)
			}
			msg := gjson.GetBytes(js, "choices.0")
			if msg.Get("message.content").Str != tc.want || msg.Get("message.tool_calls").Exists() == tc.stopped ||
				msg.Get("finish_reason").Str != want || gjson.GetBytes(js, "usage.completion_tokens").Int() != 9 {
				t.Errorf("json: %s", js)
			}
		})
	}
}

// FuzzStopper: wherever the fragments are cut, the content shown is the
// whole text up to the first stop sequence, and the stop is found.
func FuzzStopper(f *testing.F) {
	f.Add("line one\nline two", 3, 9)
	f.Add("a\n\n\nb", 1, 2)
	f.Add(" \t\n", 0, 1)
	f.Fuzz(func(t *testing.T, text string, a, b int) {
		stops := []string{"\n\n", " \t"}
		want, stopped := text, false
		at := -1
		for _, s := range stops {
			if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at) {
				at = i
			}
		}
		if at >= 0 {
			want, stopped = text[:at], true
		}
		a, b = clampCut(a, len(text)), clampCut(b, len(text))
		if a > b {
			a, b = b, a
		}
		s := newStopper(stops)
		var got strings.Builder
		pass := func(e *wire.Event) {
			flush, show := s.filter(e)
			got.Write(flush)
			if show && e.Kind == wire.Text && e.Key == "content" {
				got.Write(e.Text)
			}
		}
		for i, part := range []string{text[:a], text[a:b], text[b:]} {
			pass(&wire.Event{Kind: wire.Text, Key: "content", Text: []byte(part)})
			if i == 0 {
				pass(&wire.Event{Kind: wire.Text, Key: "reasoning_content", Text: []byte("between")}) // not content: no break in it
			}
		}
		pass(&wire.Event{Kind: wire.Finish, Finish: "stop"})
		if got.String() != want || s.stopped != stopped {
			t.Fatalf("%q cut at %d, %d: %q (stopped %v), want %q (%v)", text, a, b, got.String(), s.stopped, want, stopped)
		}
	})
}

func clampCut(v, n int) int {
	if v < 0 {
		v = -v
	}
	if n == 0 {
		return 0
	}
	return v % (n + 1)
}

// The content is the text blocks joined: a stop sequence that spans a
// thinking block between two of them still ends it there. A call shown
// before the match stays a call: the finish is tool_calls.
func TestLocalStopsAcrossBlocks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content, stop, want, finish string
		call                              bool
	}{
		{"thinking between", `{"type":"text","text":"a\n"},{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"\nb"}`, "\n\n", "a", "stop", false},
		{"a call before the match", `{"type":"tool_use","id":"toolu_1","name":"f","input":{}},{"type":"text","text":"x\ny"}`, "\n", "x", "tool_calls", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"id":"m","type":"message","content":[` + tc.content + `],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":4}}`
			content, call, finish, _ := decodeStream(t, []string{tc.stop}, streamOf(t, body))
			if content != tc.want || call != tc.call || finish != tc.finish {
				t.Errorf("stream: content %q call %v finish %q", content, call, finish)
			}
			js, err := DecodeMessageStopping("a", []byte(body), wire.Header{Created: 1, Model: "claude"}, []string{tc.stop})
			if err != nil {
				t.Fatal(err)
			}
			c := gjson.GetBytes(js, "choices.0")
			if c.Get("message.content").Str != tc.want || c.Get("message.tool_calls").Exists() != tc.call || c.Get("finish_reason").Str != tc.finish {
				t.Errorf("json: %s", js)
			}
		})
	}
}

// Once a stop sequence the gateway applies has matched, the answer the
// client gets is whole: an error event, or a cut, in the tail the model
// writes on past it ends the stream with its finish, not a failure.
func TestLocalStopEndsBeforeATailsFailure(t *testing.T) {
	t.Parallel()
	start := [][]byte{
		[]byte(`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}`),
		[]byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		[]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\nb"}}`),
	}
	content, _, finish, _ := decodeStream(t, []string{"\n"}, append(start, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)))
	if content != "a" || finish != "stop" {
		t.Errorf("error after the stop: content %q finish %q", content, finish)
	}
	d := NewStreamDecoder("a", wire.Header{Created: 1, Model: "claude"})
	d.StopAt([]string{"\n"})
	for _, ev := range start {
		if err := d.Feed(ev); err != nil {
			t.Fatal(err)
		}
	}
	if !d.EndStopped() || !d.Done() {
		t.Error("a cut after the stop did not end the stream")
	}
	// Before the stop matched, a failure is one.
	d = NewStreamDecoder("a", wire.Header{Created: 1, Model: "claude"})
	d.StopAt([]string{"\n"})
	if err := d.Feed(start[0]); err != nil {
		t.Fatal(err)
	}
	if d.EndStopped() || d.Feed([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)) == nil {
		t.Error("a failure before the stop matched was swallowed")
	}
}
