package proxy

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// FuzzRetryAfter: whatever an upstream's Retry-After and Retry-After-Ms
// say, the wait read from them is between zero and maxRetryAfter (a huge
// or infinite value overflowed into a negative header to the client).
func FuzzRetryAfter(f *testing.F) {
	f.Add("", "9223372036")
	f.Add("1e300", "")
	f.Add("+Inf", "Inf")
	f.Add("NaN", "-1")
	f.Add("", "Mon, 02 Jan 2206 15:04:05 GMT")
	f.Add("250", "3")
	f.Fuzz(func(t *testing.T, ms, s string) {
		var h fasthttp.ResponseHeader
		if ms != "" {
			h.Set("Retry-After-Ms", ms)
		}
		if s != "" {
			h.Set(fasthttp.HeaderRetryAfter, s)
		}
		if d := retryAfter(&h); d < 0 || d > maxRetryAfter {
			t.Fatalf("Retry-After-Ms %q, Retry-After %q: %v", ms, s, d)
		}
	})
}

func TestRetryAfterValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ms, s string
		want  time.Duration
	}{
		{"250", "3", 250 * time.Millisecond},
		{"", "3", 3 * time.Second},
		{"", "9223372036", maxRetryAfter},
		{"+Inf", "", maxRetryAfter},
		{"NaN", "2", 2 * time.Second},
		{"", "-1", 0},
	} {
		var h fasthttp.ResponseHeader
		if tc.ms != "" {
			h.Set("Retry-After-Ms", tc.ms)
		}
		h.Set(fasthttp.HeaderRetryAfter, tc.s)
		if got := retryAfter(&h); got != tc.want {
			t.Errorf("Retry-After-Ms %q, Retry-After %q: %v, want %v", tc.ms, tc.s, got, tc.want)
		}
	}
}
