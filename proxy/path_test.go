package proxy

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/llmgw/gateway/pipeline"
)

func TestCanonicalPath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, raw, want string
		status          int // 0 = accepted
	}{
		{"chat", "/v1/chat/completions", "/v1/chat/completions", 0},
		{"model id with an encoded colon", "/v1/models/ft%3Agpt-4o%3Aorg", "/v1/models/ft:gpt-4o:org", 0},
		{"model id with dots", "/v1/models/gpt-3.5-turbo", "/v1/models/gpt-3.5-turbo", 0},
		{"root", "/", "/", 0},
		{"trailing slash", "/v1/chat/completions/", "", 404},
		{"encoded slash", "/v1/chat/completions%2f", "", 404},
		{"encoded backslash", "/v1/chat%5ccompletions", "", 404},
		{"parameter", "/v1/chat/completions;x=1", "", 404},
		{"empty segment", "/v1//chat/completions", "", 404},
		{"NUL", "/v1/chat%00/completions", "", 404},
		{"trailing space", "/v1/chat/completions%20", "", 404},
		{"space inside", "/v1/chat/comp%20letions", "", 404},
		{"raw space", "/v1/chat/completions ", "", 404},
		{"no-break space", "/v1/chat/completions%c2%a0", "", 404},
		{"zero-width space", "/v1/chat/completions%e2%80%8b", "", 404},
		{"fullwidth slash", "/v1/chat%ef%bc%8fcompletions", "", 404},
		{"overlong dot", "/v1/chat/completions%C0%AE", "", 404},
		{"double-encoded space", "/v1/chat/completions%2520", "", 404},
		{"DEL", "/v1/chat/completions%7f", "", 404},
		{"relative", "v1/chat/completions", "", 404},
		{"dot", "/v1/chat/completions/.", "", 400},
		{"dot dot", "/v1/x/../chat/completions", "", 400},
		{"encoded dot dot", "/v1/%2e%2e/x", "", 400},
		{"mixed encoded dot dot", "/v1/.%2E/x", "", 400},
		{"double-encoded dot dot", "/v1/%252e%252e/x", "", 400},
		{"triple-encoded dot dot", "/v1/%25252e%25252e/x", "", 400},
		{"too many layers", "/v1/%2525252541", "", 400},
		{"bad escape", "/v1/%zz", "", 400},
		{"three dots are a name", "/v1/files/...", "/v1/files/...", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := canonicalPath(c.raw)
			if c.status == 0 {
				if err != nil || got != c.want {
					t.Fatalf("canonicalPath(%q) = %q, %v; want %q", c.raw, got, err, c.want)
				}
				return
			}
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != c.status {
				t.Fatalf("canonicalPath(%q) = %q, %v; want status %d", c.raw, got, err, c.status)
			}
		})
	}
}

// FuzzCanonicalPath: an accepted path has exactly one spelling: no dot,
// empty or parameter segment survives any number of decodings, and it is the
// raw path decoded once.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/%2e%2e/x", "/v1/%252e/x", "/v1/models/ft%3Ax", "/v1//x", "/v1/x;y", "/v1/x/", "/%", "/v1/%2f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := canonicalPath(raw)
		if err != nil {
			var pe *pipeline.Error
			if !errors.As(err, &pe) || (pe.Status != 400 && pe.Status != 404) {
				t.Fatalf("canonicalPath(%q): unexpected error %v", raw, err)
			}
			return
		}
		if once, err := url.PathUnescape(raw); err != nil || once != got {
			t.Fatalf("canonicalPath(%q) = %q, not the raw path decoded once (%q, %v)", raw, got, once, err)
		}
		for p, i := got, 0; i < 8; i++ {
			if hasDotSegment(p) {
				t.Fatalf("canonicalPath(%q) = %q keeps a dot segment at depth %d", raw, got, i)
			}
			d, err := url.PathUnescape(p)
			if err != nil || d == p {
				break
			}
			p = d
		}
		if !strings.HasPrefix(got, "/") || strings.Contains(got, "//") || strings.ContainsAny(got, ";\\") {
			t.Fatalf("canonicalPath(%q) = %q is not canonical", raw, got)
		}
	})
}
