package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

func TestFlattenParts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"string content", `{"choices":[{"delta":{"content":"x"}}]}`, `{"choices":[{"delta":{"content":"x"}}]}`},
		{"text parts", `{"choices":[{"delta":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}`,
			`{"choices":[{"delta":{"content":"ab"}}]}`},
		{"thinking parts", `{"choices":[{"delta":{"content" : [{"type":"thinking","thinking":[{"type":"text","text":"t"}]},{"type":"text","text":"a"}]}}]}`,
			`{"choices":[{"delta":{"content" : "a","reasoning_content":"t"}}]}`},
		{"thinking string, reasoning kept", `{"choices":[{"delta":{"reasoning_content":"r","content":[{"type":"thinking","thinking":"t"}]}}]}`,
			`{"choices":[{"delta":{"reasoning_content":"r","content":null}}]}`},
		// A list of thinking alone is no content, in a JSON answer too: as
		// a stream that sends none accumulates it (null, not "").
		{"thinking alone, message", `{"choices":[{"message":{"content":[{"type":"thinking","thinking":"t"}]}}]}`,
			`{"choices":[{"message":{"content":null,"reasoning_content":"t"}}]}`},
		{"two choices", `{"choices":[{"delta":{"content":[{"type":"text","text":"a"}]}},{"delta":{"content":[{"type":"text","text":"\"q\""}]}}]}`,
			`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"\"q\""}}]}`},
		{"other key", `{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}`, `{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}`},
	} {
		key := "delta"
		if strings.Contains(c.name, "message") {
			key = "message"
		}
		if got := flattenParts([]byte(c.in), key); string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// FuzzFlattenParts: whatever an upstream sends, flattenParts never panics,
// keeps valid JSON valid, leaves no list content behind in valid JSON that
// hasPartsContent finds (a key spelt with escapes it does not), and
// changes nothing in a body hasPartsContent passes over.
func FuzzFlattenParts(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"content":[{"type":"text","text":"a"},{"type":"thinking","thinking":[{"type":"text","text":"t"}]}]}}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"content":"x"}}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"content":[1,{"type":"text","text":2}]}}],"content":[]}`))
	f.Add([]byte(`{"content":[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		out := flattenParts(body, "delta")
		if !bytes.Equal(body, in) {
			t.Fatalf("the input was changed")
		}
		if !hasPartsContent(in) && !bytes.Equal(out, in) {
			t.Fatalf("%q changed without a list content: %q", in, out)
		}
		if !jsonvalid.Bytes(in) {
			return
		}
		if !jsonvalid.Bytes(out) {
			t.Fatalf("%q gave invalid JSON %q", in, out)
		}
		gjson.GetBytes(out, "choices").ForEach(func(_, ch gjson.Result) bool {
			if ch.Get("delta.content").IsArray() && hasPartsContent(in) && gjson.GetBytes(in, "choices").IsArray() {
				t.Fatalf("%q left a list content: %q", in, out)
			}
			return true
		})
	})
}

// BenchmarkHasPartsContent is the cost every chunk of every stream pays: a
// typical text chunk, whose content is a string.
func BenchmarkHasPartsContent(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-abc123","object":"chat.completion.chunk","created":1730000000,"model":"gpt-4o-mini","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" quick brown"},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if hasPartsContent(chunk) {
			b.Fatal("a string content")
		}
	}
}
