package proxy

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// An upstream that cuts its text by UTF-16 units splits a surrogate pair
// between two chunks; each chunk, read alone as every layer reads it, then
// holds the character whole (the tool loop's stream showed U+FFFD twice
// where the JSON answer had it). Text, reasoning, refusal and arguments
// alike; a backslash written as text ("\\ud83d") is text.
func TestUpstreamStreamJoinsSplitSurrogates(t *testing.T) {
	t.Parallel()
	head := `data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":`
	u := rawUpstream(t, head+`{"role":"assistant","content":"a\ud83d","reasoning_content":"r\uD83D"}}]}`+"\n\n"+
		head+`{"content":"\ude00b","reasoning_content":"\uDE01s"}}]}`+"\n\n"+
		head+`{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":\"\ud83d"}}]}}]}`+"\n\n"+
		head+`{"tool_calls":[{"index":0,"function":{"arguments":"\ude02\"}"}}]}}]}`+"\n\n"+
		head+`{"refusal":"no \\ud83d"}}]}`+"\n\n"+
		head+`{"refusal":"\\ude00"}}]}`+"\n\n"+
		"data: [DONE]\n\n")
	chunks, err := streamAll(t, u)
	// The seventh is the gateway's finish: the upstream named none.
	if err != nil || len(chunks) != 7 || gjson.GetBytes(chunks[6], "choices.0.finish_reason").Str != "tool_calls" {
		t.Fatalf("%v %q", err, chunks)
	}
	var content, reasoning, args, refusal string
	for _, c := range chunks {
		if !gjson.ValidBytes(c) {
			t.Fatalf("invalid chunk %s", c)
		}
		d := gjson.GetBytes(c, "choices.0.delta")
		content += d.Get("content").Str
		reasoning += d.Get("reasoning_content").Str
		args += d.Get("tool_calls.0.function.arguments").Str
		refusal += d.Get("refusal").Str
	}
	if content != "a😀b" || reasoning != "r😁s" || args != `{"x":"😂"}` || refusal != `no \ud83d\ude00` {
		t.Fatalf("content %q reasoning %q arguments %q refusal %q", content, reasoning, args, refusal)
	}
	if strings.ContainsRune(content+reasoning+args, '\uFFFD') {
		t.Fatal("a replacement character")
	}
}

// FuzzSurrogates: any two chunks are paired without a panic; valid JSON
// stays valid, and chunks without a \u escape pass as they are.
func FuzzSurrogates(f *testing.F) {
	f.Add([]byte(`{"c":"a\ud83d"}`), []byte(`{"c":"\ude00b"}`))
	f.Add([]byte(`{"c":"a\\ud83d","d":"\uDBFF"}`), []byte(`["\uDC00","\udfff"]`))
	f.Add([]byte(`"\ud800"`), []byte(`"\"\udc00"`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var s surrogates
		for _, in := range [][]byte{a, b} {
			in = append([]byte(nil), in...)
			out := s.pair(in)
			if gjson.ValidBytes(in) && !gjson.ValidBytes(out) {
				t.Fatalf("%q became invalid: %q", in, out)
			}
			if !strings.Contains(string(in), `\u`) && len(s.carry) == 0 && string(out) != string(in) {
				t.Fatalf("%q changed into %q", in, out)
			}
		}
	})
}

// Only a text member of a chunk of one choice gives its high half, and
// only the same member of the same choice takes it back: another member
// (an id), another choice, or a chunk of several choices leaves both
// halves where they are.
func TestSurrogatesPairOnlyTheSameText(t *testing.T) {
	t.Parallel()
	const (
		a = `{"choices":[{"index":0,"delta":{"content":"a\ud83d"}}]}`
		b = `{"choices":[{"index":0,"delta":{"content":"\ude00b"}}]}`
	)
	for _, tc := range []struct {
		name   string
		chunks [2]string
		want   [2]string
	}{
		{"same member, same choice", [2]string{a, b}, [2]string{`{"choices":[{"index":0,"delta":{"content":"a"}}]}`, `{"choices":[{"index":0,"delta":{"content":"\ud83d\ude00b"}}]}`}},
		{"another choice", [2]string{a, strings.Replace(b, `"index":0`, `"index":1`, 1)}, [2]string{`{"choices":[{"index":0,"delta":{"content":"a"}}]}`, strings.Replace(b, `"index":0`, `"index":1`, 1)}},
		{"another member", [2]string{a, strings.Replace(b, `"content"`, `"refusal"`, 1)}, [2]string{`{"choices":[{"index":0,"delta":{"content":"a"}}]}`, strings.Replace(b, `"content"`, `"refusal"`, 1)}},
		{"not a text member", [2]string{`{"id":"x\ud83d","choices":[{"index":0,"delta":{}}]}`, `{"id":"\ude00","choices":[{"index":0,"delta":{}}]}`},
			[2]string{`{"id":"x\ud83d","choices":[{"index":0,"delta":{}}]}`, `{"id":"\ude00","choices":[{"index":0,"delta":{}}]}`}},
		{"several choices", [2]string{`{"choices":[{"index":0,"delta":{"content":"a\ud83d"}},{"index":1,"delta":{}}]}`, b},
			[2]string{`{"choices":[{"index":0,"delta":{"content":"a\ud83d"}},{"index":1,"delta":{}}]}`, b}},
	} {
		var s surrogates
		for i, c := range tc.chunks {
			if got := string(s.pair([]byte(c))); got != tc.want[i] {
				t.Errorf("%s, chunk %d: %s, want %s", tc.name, i, got, tc.want[i])
			}
		}
	}
}
