package proxy

import (
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestCopyResponseHeaders checks the pass-through's response-side header
// hygiene: hop-by-hop headers (fixed, and those the upstream's Connection
// header lists), the headers the gateway writes itself and those about the
// gateway's provider account (its identity, its rate limits) never reach
// the client; everything else does, unchanged.
func TestCopyResponseHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers [][2]string
		keep    []string // header: value expected at the client
		drop    []string // header names expected absent
	}{
		{
			name:    "end-to-end headers pass",
			headers: [][2]string{{"Content-Type", "application/json"}, {"Openai-Processing-Ms", "12"}},
			keep:    []string{"Content-Type: application/json", "Openai-Processing-Ms: 12"},
		},
		{
			// The gateway's shared provider account's counters: the
			// handler sets the tenant's own where it has limits.
			name: "the provider account's rate limits",
			headers: [][2]string{{"X-Ratelimit-Limit-Requests", "10000"}, {"x-ratelimit-remaining-requests", "9"}, {"X-Ratelimit-Reset-Requests", "6ms"},
				{"X-Ratelimit-Limit-Tokens", "2000000"}, {"X-Ratelimit-Remaining-Tokens", "1999000"}, {"X-Ratelimit-Reset-Tokens", "30ms"},
				{"Anthropic-Ratelimit-Requests-Remaining", "49"}, {"X-Ratelimit", "odd"}, {"X-Kept", "1"}, {"X-Ratelimiter", "kept"}},
			keep: []string{"X-Kept: 1", "X-Ratelimiter: kept"},
			drop: []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
				"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", "Anthropic-Ratelimit-Requests-Remaining", "X-Ratelimit"},
		},
		{
			// The IETF draft's fields (draft-ietf-httpapi-ratelimit-headers),
			// in its current and earlier forms.
			name: "the provider account's IETF rate-limit fields",
			headers: [][2]string{{"RateLimit", `"default";r=50;t=30`}, {"RateLimit-Policy", `"default";q=100;w=60`},
				{"RateLimit-Limit", "100"}, {"ratelimit-remaining", "50"}, {"RateLimit-Reset", "30"}, {"X-Kept", "1"}},
			keep: []string{"X-Kept: 1"},
			drop: []string{"RateLimit", "RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"},
		},
		{
			name: "fixed hop-by-hop headers",
			headers: [][2]string{{"Keep-Alive", "timeout=5"}, {"Proxy-Authenticate", "Basic"}, {"Proxy-Connection", "keep-alive"},
				{"Te", "trailers"}, {"Trailer", "X-Checksum"}, {"Upgrade", "h2c"}, {"X-Kept", "1"}},
			keep: []string{"X-Kept: 1"},
			drop: []string{"Keep-Alive", "Proxy-Authenticate", "Proxy-Connection", "Te", "Trailer", "Upgrade"},
		},
		{
			name:    "headers the Connection header lists",
			headers: [][2]string{{"Connection", "X-Hop, x-other-hop"}, {"X-Hop", "a"}, {"X-Other-Hop", "b"}, {"X-Kept", "1"}},
			keep:    []string{"X-Kept: 1"},
			drop:    []string{"X-Hop", "X-Other-Hop"},
		},
		{
			name:    "headers the gateway writes",
			headers: [][2]string{{"X-Request-Id", "upstream-id"}, {"Server", "upstream"}, {"Date", "Mon, 01 Jan 2024 00:00:00 GMT"}, {"X-Kept", "1"}},
			keep:    []string{"X-Kept: 1"},
			drop:    []string{"X-Request-Id", "Server", "Date"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var src, dst fasthttp.ResponseHeader
			for _, h := range tc.headers {
				src.Add(h[0], h[1])
			}
			copyResponseHeaders(&dst, &src)
			for _, kv := range tc.keep {
				k, v, _ := strings.Cut(kv, ": ")
				if got := string(dst.Peek(k)); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			for _, k := range tc.drop {
				if v := dst.Peek(k); v != nil {
					t.Errorf("%s reached the client: %q", k, v)
				}
			}
			if dst.ConnectionClose() {
				t.Error("the upstream's Connection header closed the client's connection")
			}
		})
	}
}

// TestHopByHop checks the one list both directions of the pass-through
// drop: the fixed set and every name the Connection header lists.
func TestHopByHop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		connection string
		want       []string // beyond the fixed set
	}{
		{name: "none", connection: ""},
		{name: "close only", connection: "close", want: []string{"close"}},
		{name: "listed names", connection: " X-A ,x-b,, keep-alive", want: []string{"X-A", "x-b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := hopByHop([]byte(tc.connection))
			want := append(slices.Clone(hopHeaders), tc.want...)
			if !slices.Equal(got, want) {
				t.Fatalf("hopByHop(%q) = %q, want %q", tc.connection, got, want)
			}
			if len(hopHeaders) != 9 {
				t.Fatalf("hopByHop changed the fixed list: %q", hopHeaders)
			}
		})
	}
}
