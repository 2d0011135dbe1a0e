package pipeline

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

func TestResponseUsage(t *testing.T) {
	t.Parallel()
	r := &Response{Body: []byte(`{"choices":[{"message":{"content":"{\"usage\":1}"}}],"usage":{"prompt_tokens":3}}`)}
	if got := r.Usage().Get("prompt_tokens").Int(); got != 3 {
		t.Fatalf("prompt_tokens = %d, want 3", got)
	}
	if got := r.Usage().Raw; got != `{"prompt_tokens":3}` {
		t.Fatalf("second read = %q", got)
	}
	// A layer that stores a new body is read afresh, even one of the same length.
	r.Body = []byte(`{"choices":[{"message":{"content":"{\"usage\":1}"}}],"usage":{"prompt_tokens":4}}`)
	if got := r.Usage().Get("prompt_tokens").Int(); got != 4 {
		t.Fatalf("after a new body: prompt_tokens = %d, want 4", got)
	}
	r.Body = r.Body[:20] // the same bytes, fewer of them
	if r.Usage().IsObject() {
		t.Fatal("a shortened body is not read afresh")
	}
	for _, body := range []string{"", `{"id":"x"}`} {
		if u := (&Response{Body: []byte(body)}).Usage(); u.Exists() {
			t.Fatalf("%q: usage %q", body, u.Raw)
		}
	}
}

func BenchmarkResponseUsage(b *testing.B) {
	r := &Response{Body: []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		"a fairly long answer of the model, as a completion has one, before its usage object at the end" +
		`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)}
	// Three readers (the meter, the prompt cache and the access log): each
	// scanning the body, or sharing one scan.
	b.Run("scan-each", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for range 3 {
				if !gjson.GetBytes(r.Body, "usage").IsObject() {
					b.Fatal("no usage")
				}
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.usage = usageMemo{} // a new response
			for range 3 {
				if !r.Usage().IsObject() {
					b.Fatal("no usage")
				}
			}
		}
	})
}

func TestResponseChatUsage(t *testing.T) {
	t.Parallel()
	r := &Response{Body: []byte(`{"usage":{"prompt_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":5}}}`)}
	for range 2 {
		c, ok := r.ChatUsage()
		if !ok || c.Prompt != 7 || c.Completion != 2 || c.Cached != 5 {
			t.Fatalf("ChatUsage = %+v, %v", c, ok)
		}
	}
	r.Body = []byte(`{"usage":{"prompt_tokens":1}}`)
	if c, ok := r.ChatUsage(); !ok || c.Prompt != 1 || c.Cached != 0 {
		t.Fatalf("after a new body: %+v, %v", c, ok)
	}
	r.Body = []byte(`{"usage":null}`)
	if c, ok := r.ChatUsage(); ok {
		t.Fatalf("usage null: %+v, ok", c)
	}
}

// TestResponseUsageAfterBodyEmptied: a Response whose Body was emptied
// reports no usage, not the earlier body's.
func TestResponseUsageAfterBodyEmptied(t *testing.T) {
	t.Parallel()
	r := &Response{Body: []byte(`{"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`)}
	if c, ok := r.ChatUsage(); !ok || c.Prompt != 7 {
		t.Fatalf("%+v, %v; want prompt 7", c, ok)
	}
	r.Body = nil
	if c, ok := r.ChatUsage(); ok {
		t.Fatalf("%+v, true after the body was emptied: the earlier body's usage", c)
	}
	if u := r.Usage(); u.Exists() {
		t.Fatalf("usage %s after the body was emptied", u.Raw)
	}
}

// TestUsageLog: the usage since a mark sums the calls noted after it, the
// total sums every call, and a nil log notes and finds nothing.
func TestUsageLog(t *testing.T) {
	t.Parallel()
	var nilLog *UsageLog
	nilLog.Note(wire.ChatUsage{Prompt: 1})
	if _, ok := nilLog.Total(); ok {
		t.Fatal("a nil log found a usage")
	}
	l := new(UsageLog)
	start := l.Mark()
	if _, ok := l.Since(start); ok {
		t.Fatal("a usage before any was noted")
	}
	l.Note(wire.ChatUsage{Prompt: 10, Completion: 2, Total: 12, Cached: 4})
	second := l.Mark()
	l.Note(wire.ChatUsage{Prompt: 5, Completion: 1, Total: 6, CacheWrite: 3, HasCacheWrite: true, Reasoning: 1})
	l.Note(wire.ChatUsage{Prompt: 7, Completion: 2, Total: 9})
	if c, ok := l.Since(second); !ok || c != (wire.ChatUsage{Prompt: 12, Completion: 3, Total: 15, CacheWrite: 3, HasCacheWrite: true, Reasoning: 1}) {
		t.Fatalf("the calls after the first: %+v %v", c, ok)
	}
	if _, ok := l.Since(l.Mark()); ok {
		t.Fatal("a usage after the last noted")
	}
	want := wire.ChatUsage{Prompt: 22, Completion: 5, Total: 27, Cached: 4, CacheWrite: 3, HasCacheWrite: true, Reasoning: 1}
	if c, ok := l.Total(); !ok || c != want {
		t.Fatalf("total %+v, want %+v", c, want)
	}
	if c, _ := l.Since(start); c != want {
		t.Fatalf("since the start %+v, want the total %+v", c, want)
	}
	// OpenAI's audio and prediction details are kept too (a cache entry
	// stored from a stream without usage takes its usage from the log).
	third := l.Mark()
	l.Note(wire.ChatUsage{Prompt: 1, Extra: [4]int64{2, 0, 3, 0}, HasExtra: [4]bool{true, false, true, false}})
	if c, _ := l.Since(third); c.Extra != [4]int64{2, 0, 3, 0} || c.HasExtra != [4]bool{true, false, true, false} {
		t.Fatalf("details since the mark: %+v", c)
	}
	if c, _ := l.Since(second); c.HasExtra != [4]bool{true, false, true, false} || c.Extra[2] != 3 {
		t.Fatalf("details since an earlier mark: %+v", c)
	}
}
