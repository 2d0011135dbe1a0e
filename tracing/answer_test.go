package tracing

import (
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzAnswerOf: the one-pass read of a chat completion never fails on any
// bytes, and on valid JSON finds the usage object and finish reason that
// gjson's Get of their paths finds.
func FuzzAnswerOf(f *testing.F) {
	f.Add(`{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5}}`)
	f.Add(`{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2},"choices":[{"finish_reason":"len\u0067th"}],"choices":[]}`)
	f.Add(`{"choices":{"0":{"finish_reason":"stop"}}}`)
	f.Add(`[1,2]`)
	f.Fuzz(func(t *testing.T, raw string) {
		usage, finish := answerOf([]byte(raw))
		if !gjson.Valid(raw) {
			return
		}
		if u := gjson.Get(raw, "usage"); usage.Raw != u.Raw {
			t.Fatalf("%q: usage %q, want %q", raw, usage.Raw, u.Raw)
		}
		if f := gjson.Get(raw, "choices.0.finish_reason").Str; finish != f {
			t.Fatalf("%q: finish %q, want %q", raw, finish, f)
		}
	})
}
