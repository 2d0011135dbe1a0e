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
		if ok != u.IsObject() {
			t.Fatalf("ok %v for %q", ok, raw)
		}
		// A count's sign is its number's: a huge count never reads as a
		// negative one (nor a huge negative one as positive).
		if p := u.Get("prompt_tokens"); ok && p.Type == gjson.Number && (p.Num >= 1 && got.Prompt <= 0 || p.Num <= -1 && got.Prompt >= 0) {
			t.Fatalf("%q: prompt_tokens %v read as %d", raw, p.Num, got.Prompt)
		}
		if !ok || !gjson.Valid(raw) {
			return
		}
		write := u.Get("prompt_tokens_details.cache_write_tokens")
		if !write.Exists() {
			write = u.Get("cache_creation_input_tokens")
		}
		want := ChatUsage{Prompt: u.Get("prompt_tokens").Int(), Completion: u.Get("completion_tokens").Int(),
			Total: u.Get("total_tokens").Int(), Cached: u.Get("prompt_tokens_details.cached_tokens").Int(),
			CacheWrite: write.Int(), HasCacheWrite: write.Exists(),
			Reasoning: u.Get("completion_tokens_details.reasoning_tokens").Int()}
		for i, d := range extraDetails {
			v := u.Get(d[0] + "." + d[1])
			want.Extra[i], want.HasExtra[i] = v.Int(), v.Exists()
		}
		if got != want {
			t.Fatalf("%q: got %+v, want %+v", raw, got, want)
		}
	})
}

// FuzzChatUsageJSON: a usage written by AppendJSON reads back as itself
// (total_tokens as prompt + completion when it had none), and Add sums
// every count.
func FuzzChatUsageJSON(f *testing.F) {
	f.Add(int64(10), int64(5), int64(0), int64(2), int64(1), true, int64(3))
	f.Add(int64(-1), int64(1<<40), int64(7), int64(0), int64(0), false, int64(0))
	f.Fuzz(func(t *testing.T, prompt, completion, total, cached, write int64, hasWrite bool, reasoning int64) {
		if !hasWrite {
			write = 0
		}
		c := ChatUsage{Prompt: prompt, Completion: completion, Total: total, Cached: cached, CacheWrite: write, HasCacheWrite: hasWrite, Reasoning: reasoning}
		b := c.AppendJSON(nil)
		got, ok := ParseChatUsage(gjson.ParseBytes(b))
		want := c
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
	if got := string(b.AppendJSON(nil)); got != `{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}` {
		t.Fatalf("without details: %s", got)
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

// An upstream's count past int64's ends reads as the nearest end (gjson's
// Int saturates), never as the other one; a negative one stays negative:
// metering (limits' tokens.sane), not parsing, decides what a negative or
// absurd count is charged, and the client sees the usage as it came.
func TestUsageCountsSaturate(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want ChatUsage
	}{
		{`{"prompt_tokens":1.5e300,"completion_tokens":-1.5e300,"total_tokens":99999999999999999999,"prompt_tokens_details":{"cached_tokens":"1e300"}}`,
			ChatUsage{Prompt: math.MaxInt64, Completion: math.MinInt64, Total: math.MaxInt64, Cached: math.MaxInt64}},
		{`{"prompt_tokens":-5,"completion_tokens":-1,"total_tokens":"7","prompt_tokens_details":{"cached_tokens":-100}}`,
			ChatUsage{Prompt: -5, Completion: -1, Total: 7, Cached: -100}},
		{`{"prompt_tokens":9223372036854775807,"completion_tokens":-9223372036854775808,"total_tokens":1e18}`,
			ChatUsage{Prompt: math.MaxInt64, Completion: math.MinInt64, Total: 1e18}},
	} {
		if got, _ := ParseChatUsage(gjson.Parse(tc.raw)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.raw, got, tc.want)
		}
	}
	got, _ := ParseResponsesUsage(gjson.Parse(`{"input_tokens":1.5e300,"output_tokens":-3,"input_tokens_details":{"cached_tokens":-1e300}}`))
	if want := (ChatUsage{Prompt: math.MaxInt64, Completion: -3, Cached: math.MinInt64}); got != want {
		t.Errorf("responses usage: %+v, want %+v", got, want)
	}
}
