package wire

import (
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzChatUsage: one pass over a usage object never fails on any bytes,
// and on valid JSON reads what gjson's Get of each path reads.
func FuzzChatUsage(f *testing.F) {
	f.Add(`{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`)
	f.Add(`{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4,"cache_write_tokens":2}}`)
	f.Add(`{"prompt_tokens":1,"prompt_tokens":2,"prompt_tokens_details":{"cached_tokens":"3"},"prompt_tokens_details":{"cached_tokens":9}}`)
	f.Add(`{"prompt_tokens_details":[1,2],"completion_tokens":1e3}`)
	f.Add(`{"prompt_tokens_details":{},"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, raw string) {
		u := gjson.Parse(raw)
		got, ok := ParseChatUsage(u)
		if ok != u.IsObject() {
			t.Fatalf("ok %v for %q", ok, raw)
		}
		if !ok || !gjson.Valid(raw) {
			return
		}
		write := u.Get("prompt_tokens_details.cache_write_tokens")
		want := ChatUsage{Prompt: u.Get("prompt_tokens").Int(), Completion: u.Get("completion_tokens").Int(),
			Total: u.Get("total_tokens").Int(), Cached: u.Get("prompt_tokens_details.cached_tokens").Int(),
			CacheWrite: write.Int(), HasCacheWrite: write.Exists(),
			Reasoning: u.Get("completion_tokens_details.reasoning_tokens").Int()}
		if got != want {
			t.Fatalf("%q: got %+v, want %+v", raw, got, want)
		}
	})
}
