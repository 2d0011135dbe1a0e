package wire

import (
	"math"
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
	f.Add(`{"prompt_tokens":50,"cache_creation_input_tokens":30}`)
	f.Add(`{"cache_creation_input_tokens":1,"prompt_tokens_details":{"cache_write_tokens":2}}`)
	f.Add(`{"prompt_tokens_details":{"audio_tokens":2},"completion_tokens_details":{"audio_tokens":1,"accepted_prediction_tokens":3},"completion_tokens_details":{"rejected_prediction_tokens":4,"audio_tokens":9}}`)
	f.Add(`[]`)
	// An upstream's negative and absurd counts.
	f.Add(`{"prompt_tokens":-5,"completion_tokens":-1,"prompt_tokens_details":{"cached_tokens":-100}}`)
	f.Add(`{"prompt_tokens":1.5e300,"completion_tokens":-1.5e300,"total_tokens":99999999999999999999}`)
	f.Add(`{"prompt_tokens":"1e400","completion_tokens":9223372036854775807,"total_tokens":-9223372036854775808}`)
	f.Add(`{"prompt_tokens_details":{"cached_tokens":1e19},"completion_tokens_details":{"reasoning_tokens":-1e19}}`)
	f.Fuzz(func(t *testing.T, raw string) {
		u := gjson.Parse(raw)
		got, ok := ParseChatUsage(u)
		// Every count read is a count: never negative, never huge.
		for _, n := range append([]int64{got.Prompt, got.Completion, got.Total, got.Cached, got.CacheWrite, got.Reasoning}, got.Extra[:]...) {
			if n < 0 || n > MaxTokenCount {
				t.Fatalf("%q: a count of %d in %+v", raw, n, got)
			}
		}
		if !gjson.Valid(raw) {
			if ok && !u.IsObject() {
				t.Fatalf("ok for %q", raw)
			}
			return
		}
		// A usage whose prompt, completion or total is there but is not a
		// count is no usage at all.
		wantOK := u.IsObject()
		for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens"} {
			if v := u.Get(k); v.Exists() && v.Type != gjson.Null && !isCount(v) {
				wantOK = false
			}
		}
		if ok != wantOK {
			t.Fatalf("ok %v for %q, want %v", ok, raw, wantOK)
		}
		if !ok {
			return
		}
		write := u.Get("prompt_tokens_details.cache_write_tokens")
		if !write.Exists() {
			write = u.Get("cache_creation_input_tokens")
		}
		want := ChatUsage{Prompt: countOf(u.Get("prompt_tokens")), Completion: countOf(u.Get("completion_tokens")),
			Total: countOf(u.Get("total_tokens")), Cached: countOf(u.Get("prompt_tokens_details.cached_tokens")),
			CacheWrite: countOf(write), HasCacheWrite: write.Exists(),
			Reasoning: countOf(u.Get("completion_tokens_details.reasoning_tokens")), HasReasoning: u.Get("completion_tokens_details.reasoning_tokens").Exists()}
		for i, d := range extraDetails {
			v := u.Get(d[0] + "." + d[1])
			want.Extra[i], want.HasExtra[i] = countOf(v), v.Exists()
		}
		if got != want {
			t.Fatalf("%q: got %+v, want %+v", raw, got, want)
		}
	})
}

// isCount is TokenCount's rule, said another way: a JSON number whose
// value is a whole number from 0 to MaxTokenCount.
func isCount(v gjson.Result) bool {
	return v.Type == gjson.Number && v.Num >= 0 && v.Num <= MaxTokenCount && math.Floor(v.Num) == v.Num
}

func countOf(v gjson.Result) int64 {
	if !isCount(v) {
		return 0
	}
	return int64(v.Num)
}

// FuzzChatUsageJSON: a usage written by AppendJSON reads back as itself
// (total_tokens as prompt + completion when it had none), and Add sums
// every count.
func FuzzChatUsageJSON(f *testing.F) {
	f.Add(int64(10), int64(5), int64(0), int64(2), int64(1), true, int64(3))
	f.Add(int64(-1), int64(1<<40), int64(7), int64(0), int64(0), false, int64(0))
	f.Fuzz(func(t *testing.T, prompt, completion, total, cached, write int64, hasWrite bool, reasoning int64) {
		// Counts as the readers give them (TokenCount), halved so that a
		// total written as prompt + completion is one too.
		for _, n := range []*int64{&prompt, &completion, &total, &cached, &write, &reasoning} {
			*n = (*n & (MaxTokenCount - 1)) / 2
		}
		if !hasWrite {
			write = 0
		}
		c := ChatUsage{Prompt: prompt, Completion: completion, Total: total, Cached: cached, CacheWrite: write, HasCacheWrite: hasWrite, Reasoning: reasoning}
		b := c.AppendJSON(nil)
		got, ok := ParseChatUsage(gjson.ParseBytes(b))
		want := c
		want.HasReasoning = reasoning != 0 // written when not 0 (HasReasoning is false here)
		if want.Total == 0 {
			want.Total = prompt + completion
		}
		if !ok || !gjson.ValidBytes(b) || got != want {
			t.Fatalf("%s read back as %+v, want %+v", b, got, want)
		}
		sum := c
		sum.Add(c)
		if sum.Prompt != 2*prompt || sum.Completion != 2*completion || sum.Total != 2*total || sum.Cached != 2*cached ||
			sum.CacheWrite != 2*write || sum.HasCacheWrite != hasWrite || sum.Reasoning != 2*reasoning {
			t.Fatalf("%+v doubled is %+v", c, sum)
		}
	})
}

// OpenAI's audio and prediction details survive a sum (a tool loop's
// usage): written when reported, added up, and absent when no call had
// them.
func TestChatUsageKeepsOtherDetails(t *testing.T) {
	a, _ := ParseChatUsage(gjson.Parse(`{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,` +
		`"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":1},` +
		`"completion_tokens_details":{"reasoning_tokens":1,"audio_tokens":0,"accepted_prediction_tokens":2,"rejected_prediction_tokens":1}}`))
	b, _ := ParseChatUsage(gjson.Parse(`{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}`))
	a.Add(b)
	want := `{"prompt_tokens":30,"completion_tokens":10,"total_tokens":40,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":1},` +
		`"completion_tokens_details":{"reasoning_tokens":1,"audio_tokens":0,"accepted_prediction_tokens":2,"rejected_prediction_tokens":1}}`
	if got := string(a.AppendJSON(nil)); got != want {
		t.Fatalf("sum\n got %s\nwant %s", got, want)
	}
	if got := string(b.AppendJSON(nil)); got != `{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25,"prompt_tokens_details":{"cached_tokens":0}}` {
		t.Fatalf("without details: %s", got)
	}
	// A reasoning count is written when reported (0 too), or when not 0;
	// without it, the first other detail opens the object.
	c, _ := ParseChatUsage(gjson.Parse(`{"prompt_tokens":1,"completion_tokens":1,"completion_tokens_details":{"reasoning_tokens":0}}`))
	d, _ := ParseChatUsage(gjson.Parse(`{"prompt_tokens":1,"completion_tokens":1,"completion_tokens_details":{"audio_tokens":3}}`))
	for u, want := range map[*ChatUsage]string{
		&c:                        `{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`,
		&d:                        `{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"audio_tokens":3}}`,
		{Prompt: 1, Reasoning: 4}: `{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":4}}`,
	} {
		if got := string(u.AppendJSON(nil)); got != want {
			t.Errorf("got %s\nwant %s", got, want)
		}
	}
}

// The Responses usage of a chat usage keeps every count the chat usage
// reported, prompt-cache writes in either spelling included.
func TestAppendResponsesUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, chat, want string }{
		{"plain", `{"prompt_tokens":10,"completion_tokens":5}`,
			`{"input_tokens":10,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}`},
		{"details", `{"prompt_tokens":50,"completion_tokens":5,"total_tokens":55,"prompt_tokens_details":{"cached_tokens":20,"cache_write_tokens":10},"completion_tokens_details":{"reasoning_tokens":2}}`,
			`{"input_tokens":50,"input_tokens_details":{"cached_tokens":20,"cache_write_tokens":10},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":55}`},
		{"anthropic spelling", `{"prompt_tokens":50,"completion_tokens":5,"cache_creation_input_tokens":30}`,
			`{"input_tokens":50,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":30},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":55}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := string(AppendResponsesUsage(nil, []byte(tc.chat))); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// BenchmarkParseChatUsage reads an OpenAI usage object with both details
// objects, as metering does for every answer.
func BenchmarkParseChatUsage(b *testing.B) {
	u := gjson.Parse(`{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseChatUsage(u); !ok {
			b.Fatal("not parsed")
		}
	}
}

// An upstream's usage whose prompt, completion or total is not a count
// (negative, a fraction, huge, a string) is no usage: a client is never
// shown it, a tool loop never sums it, a meter never charges it (the call
// is estimated, as one without usage). A detail that is not a count is 0.
// Null is no count, not a bad one.
func TestUsageCountsAreCounts(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want ChatUsage
		ok   bool
	}{
		{`{"prompt_tokens":1.5e300,"completion_tokens":1}`, ChatUsage{}, false},
		{`{"prompt_tokens":-5,"completion_tokens":1}`, ChatUsage{}, false},
		{`{"prompt_tokens":5,"completion_tokens":1,"total_tokens":"6"}`, ChatUsage{}, false},
		{`{"prompt_tokens":5,"completion_tokens":1.5}`, ChatUsage{}, false},
		{`{"prompt_tokens":1099511627777}`, ChatUsage{}, false},
		{`{"prompt_tokens":1099511627776,"completion_tokens":2,"total_tokens":null,"prompt_tokens_details":{"cached_tokens":-100},` +
			`"completion_tokens_details":{"reasoning_tokens":1e300}}`, ChatUsage{Prompt: 1 << 40, Completion: 2, HasReasoning: true}, true},
		{`{"prompt_tokens":5e0,"completion_tokens":2.0,"total_tokens":7}`, ChatUsage{Prompt: 5, Completion: 2, Total: 7}, true},
	} {
		if got, ok := ParseChatUsage(gjson.Parse(tc.raw)); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.raw, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := ParseResponsesUsage(gjson.Parse(`{"input_tokens":1.5e300,"output_tokens":3}`)); ok || got != (ChatUsage{}) {
		t.Errorf("responses usage with a huge count: %+v %v", got, ok)
	}
	if got, ok := ParseResponsesUsage(gjson.Parse(`{"input_tokens":4,"output_tokens":3,"input_tokens_details":{"cached_tokens":-1}}`)); !ok || got != (ChatUsage{Prompt: 4, Completion: 3}) {
		t.Errorf("responses usage with a bad detail: %+v %v", got, ok)
	}
}

// Cached input is part of the prompt: a report of more is read as the
// whole prompt cached, never as a ratio over 100%.
func TestCachedNeverOverPrompt(t *testing.T) {
	c, ok := ParseChatUsage(gjson.Parse(`{"prompt_tokens":1200,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":5000}}`))
	if !ok || c.Cached != 1200 || c.Prompt != 1200 {
		t.Fatalf("%+v %v", c, ok)
	}
}
