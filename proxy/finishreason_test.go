package proxy

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

func TestFillFinish(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"null", `{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}`, ""},
		{"reason", `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, ""},
		{"empty", `{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}`,
			`{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}`},
		{"spaces", `{"choices": [{"message": {"content": "x"}, "finish_reason" : ""}]}`,
			`{"choices": [{"message": {"content": "x"}, "finish_reason" : null}]}`},
		{"first member", `{"choices":[{"finish_reason":"","index":0}]}`, `{"choices":[{"finish_reason":null,"index":0}]}`},
		{"two choices", `{"choices":[{"index":0,"finish_reason":""},{"index":1,"finish_reason":"stop"},{"index":2,"finish_reason":""}]}`,
			`{"choices":[{"index":0,"finish_reason":null},{"index":1,"finish_reason":"stop"},{"index":2,"finish_reason":null}]}`},
		{"in a string", `{"choices":[{"delta":{"content":"\"finish_reason\":\"\""},"finish_reason":null}]}`, ""},
		{"string ending in the name", `{"choices":[{"delta":{"content":"finish_reason"},"finish_reason":null}]}`, ""},
		{"a value, not a key", `{"a":["finish_reason",""]}`, ""},
		{"cut", `{"finish_reason":"`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			want := c.want
			if want == "" {
				want = c.in
			}
			got, ok := fillFinish([]byte("reused"), []byte(c.in), finishNull)
			if string(got) != want || ok != (c.want != "") {
				t.Fatalf("got %s (%v), want %s", got, ok, want)
			}
			// An answer's gets "stop" where a chunk's gets null, and its
			// null finish_reason too: an answer is finished.
			stopped := strings.ReplaceAll(want, `"finish_reason":null`, `"finish_reason":"stop"`)
			stopped = strings.ReplaceAll(stopped, `"finish_reason" : null`, `"finish_reason" : "stop"`)
			if got, _ := fillFinish(nil, []byte(c.in), finishStop); string(got) != stopped {
				t.Fatalf("answer: got %s, want %s", got, stopped)
			}
		})
	}
}

// FuzzFillFinish: fillFinish never panics, never changes its input, keeps
// valid JSON valid, and changes only "" into null (or "stop").
func FuzzFillFinish(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"content":"\",\"finish_reason\":\"\""},"finish_reason":null}]}`))
	f.Add([]byte(`{ "finish_reason" :  "" , "x":{"finish_reason":""}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		out, ok := fillFinish(nil, body, finishNull)
		if stop, _ := fillFinish(nil, body, finishStop); !bytes.Equal(stop, bytes.ReplaceAll(out, []byte("null"), []byte(`"stop"`))) &&
			!bytes.Contains(in, []byte("null")) {
			t.Fatalf("%q: null %q, stop %q", in, out, stop)
		}
		if !bytes.Equal(body, in) {
			t.Fatal("the input was changed")
		}
		if !ok {
			if !bytes.Equal(out, in) {
				t.Fatalf("%q changed without reporting it: %q", in, out)
			}
			return
		}
		if !jsonvalid.Bytes(in) {
			return
		}
		if !jsonvalid.Bytes(out) {
			t.Fatalf("%q gave invalid JSON %q", in, out)
		}
		if stop, _ := fillFinish(nil, body, finishStop); !jsonvalid.Bytes(stop) {
			t.Fatalf("%q gave invalid JSON %q", in, stop)
		}
		null := []byte("null")
		if n := len(out) - len(in); n <= 0 || n%2 != 0 || bytes.Count(out, null)-bytes.Count(in, null) != n/2 {
			t.Fatalf("%q gave %q", in, out)
		}
	})
}

// BenchmarkFillFinish is the cost every relayed chunk pays: a typical
// text chunk, whose finish_reason is null, and the chunk of an upstream
// that sends "" on every chunk, given null in the stream's reused buffer.
func BenchmarkFillFinish(b *testing.B) {
	const head = `{"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1730000000,"model":"gpt-4o-mini","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" quick brown"},"logprobs":null,"finish_reason":`
	for _, c := range []struct {
		name, finish string
		fixed        bool
	}{{"null", "null", false}, {"empty", `""`, true}} {
		chunk := []byte(head + c.finish + `}]}`)
		b.Run(c.name, func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				out, ok := fillFinish(buf, chunk, finishNull)
				if ok != c.fixed {
					b.Fatal(string(out))
				}
				if ok {
					buf = out
				}
			}
		})
	}
}

// A JSON answer whose choices have no finish_reason gets "stop" on each,
// as the same answer streamed ends; one that has the member is left.
func TestAddFinish(t *testing.T) {
	t.Parallel()
	in := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a"}},{"index":1,"message":{"role":"assistant","content":"b"}}]}`
	out := addFinish([]byte(in))
	for i, want := range []string{"stop", "stop"} {
		if got := gjson.GetBytes(out, "choices."+strconv.Itoa(i)+".finish_reason").Str; got != want {
			t.Fatalf("choice %d: %q in %s", i, got, out)
		}
	}
	two := `{"choices":[{"index":0,"message":{"content":"a"},"finish_reason":"length"},{"index":1,"message":{"content":"b"}}]}`
	if got := gjson.GetBytes(addFinish([]byte(two)), "choices.#.finish_reason").Raw; got != `["length","stop"]` {
		t.Fatalf("two choices, one without: %s", got)
	}
	has := `{"choices":[{"index":0,"message":{"content":"a"},"finish_reason":"length"}]}`
	if got := addFinish([]byte(has)); string(got) != has {
		t.Fatalf("changed %s", got)
	}
}

// A JSON answer's choice that made tool calls without a finish reason
// (none, null or "") gets "tool_calls", as the same answer streamed through
// the tool loop ends; a reason it has is kept, and a choice without calls
// is left to fillFinish and addFinish ("stop").
func TestCallsFinish(t *testing.T) {
	t.Parallel()
	const calls = `"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]`
	for _, tc := range []struct{ in, want string }{
		{`{"choices":[{"index":0,"message":{` + calls + `},"finish_reason":""}]}`, `["tool_calls"]`},
		{`{"choices":[{"index":0,"message":{` + calls + `},"finish_reason":null}]}`, `["tool_calls"]`},
		{`{"choices":[{"index":0,"message":{` + calls + `}}]}`, `["tool_calls"]`},
		{`{"choices":[{"index":0,"message":{` + calls + `},"finish_reason":"length"}]}`, `["length"]`},
		{`{"choices":[{"index":0,"message":{"content":"a","tool_calls":null},"finish_reason":""},{"index":1,"message":{` + calls + `},"finish_reason":""}]}`, `["stop","tool_calls"]`},
	} {
		fixed, _ := fillFinish(nil, callsFinish([]byte(tc.in)), finishStop)
		if got := gjson.GetBytes(addFinish(fixed), "choices.#.finish_reason").Raw; got != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.want)
		}
	}
}

// keysOf and onlyIndexZero read keys, never text that spells them.
func TestChunkKeys(t *testing.T) {
	t.Parallel()
	for chunk, want := range map[string]chunkKeys{
		`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`:                                         {},
		`{"choices":[{"index":0,"delta":{},"finish_reason" : "stop"}]}`:                                                  {named: true},
		`{"choices":[{"index":0,"delta":{},"finish_reason":""}]}`:                                                        {empty: true},
		`{"choices":[{"index":0,"delta":{"content":"\"finish_reason\":\"stop\" \"tool_calls\""},"finish_reason":null}]}`: {},
		`{"choices":[{"index":0,"delta":{"tool_calls":[]}},{"index":1,"delta":{},"finish_reason":"stop"}]}`:              {named: true, calls: true},
	} {
		if got := keysOf([]byte(chunk)); got != want {
			t.Errorf("%s: %+v, want %+v", chunk, got, want)
		}
	}
	for chunk, want := range map[string]bool{
		`{"choices":[{"index":0,"delta":{}}]}`:                         true,
		`{"choices":[{"index":10,"delta":{}}]}`:                        false,
		`{"choices":[{"index":1,"delta":{}}]}`:                         false,
		`{"choices":[{"delta":{"content":"\"index\":0,"},"index":2}]}`: false,
		`{"choices":[{"index": 0}]}`:                                   false, // spaced: parsed instead
		`{"choices":[{"index":0,"delta":{}},{"index":1,"delta":{}}]}`:  false, // several choices: parsed
	} {
		if got := onlyIndexZero([]byte(chunk)); got != want {
			t.Errorf("%s: %v, want %v", chunk, got, want)
		}
	}
}
