package proxy

import (
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzAddNulls: a valid answer stays valid, every choice with a message
// then has its logprobs and its message its content and refusal, and a
// second pass changes nothing; any input, never a panic.
func FuzzAddNulls(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","tool_calls":[]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"logprobs":{"content":[],"refusal":null},"message":{"role":"assistant"}},{"message":null},7]}`,
		`{"choices":[{"message":{"content":"say \"message\" and \"content\""}}]}`,
		`{"choices":{"message":{}}}`, `[`, `{"message":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := addNulls(append([]byte(nil), in...))
		if !gjson.ValidBytes(in) {
			return
		}
		if !gjson.ValidBytes(out) {
			t.Fatalf("addNulls(%q) = %q is not JSON", in, out)
		}
		root := gjson.ParseBytes(out)
		if cs := root.Get("choices"); cs.IsArray() && gjson.GetBytes(in, "choices").IsArray() {
			cs.ForEach(func(_, c gjson.Result) bool {
				if !c.IsObject() {
					return true
				}
				m := c.Get("message")
				if m.IsObject() && (!c.Get("logprobs").Exists() || !m.Get("content").Exists() || !m.Get("refusal").Exists()) {
					t.Fatalf("addNulls(%q) = %q leaves a member out", in, out)
				}
				return true
			})
		}
		if again := addNulls(append([]byte(nil), out...)); string(again) != string(out) {
			t.Fatalf("not idempotent: %q then %q", out, again)
		}
	})
}

// The usual answer has every member: byte counts, no parse, no copy.
func BenchmarkAddNulls(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-mock-244002","object":"chat.completion","created":1796102363,"model":"chat","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":30,"total_tokens":38,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"system_fingerprint":"fp_mock"}`)
	b.ReportAllocs()
	for b.Loop() {
		if out := addNulls(body); &out[0] != &body[0] {
			b.Fatal("copied")
		}
	}
}
