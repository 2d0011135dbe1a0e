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
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"refusal"},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"Say \"refusal"},"logprobs":null,"finish_reason":"stop"}]}`,
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

// Only keys count: a value or a text that is a member's name does not
// stand for the member (the answer is fixed), nor for a finish_reason.
func TestAnswerKeysAreKeys(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"refusal"},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"Say \"refusal"},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"content","arguments":"{}"}}],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"logprobs","refusal":null},"finish_reason":"stop"}]}`,
		// Keys one level deeper: a call's arguments as an object (the
		// gateway makes them a string later), a content of parts.
		`{"choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"path":"a","content":"x"}}}],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"refusal":"x","logprobs":1}}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]},"logprobs":null,"finish_reason":"stop"}]}`,
	} {
		m := gjson.Get(string(addNulls([]byte(body))), "choices.0")
		if !m.Get("logprobs").Exists() || !m.Get("message.content").Exists() || !m.Get("message.refusal").Exists() {
			t.Errorf("addNulls(%s) left a member out: %s", body, m.Raw)
		}
	}
	for _, body := range []string{
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"finish_reason","refusal":null},"logprobs":null}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"x","refusal":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"finish_reason":"x"}}}]},"logprobs":null}]}`,
	} {
		if got := gjson.GetBytes(addFinish(callsFinish([]byte(body))), "choices.0.finish_reason").Str; got == "" {
			t.Errorf("callsFinish, addFinish(%s): no finish_reason", body)
		}
	}
	if k := keysOfAnswer([]byte(`{ "message" : {"content":"message"}, "x":["refusal","content"] ,"refusal"` + "\n:1}")); k != (answerKeys{message: 1, content: 1, refusal: 1}) {
		t.Errorf("keys %+v", k)
	}
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
