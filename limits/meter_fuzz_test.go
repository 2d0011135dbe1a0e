package limits

import (
	"bytes"
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzObserve: any upstream chunk is observed without panicking. Its usage
// object, if any, is kept for the charge. When the client asked for usage
// the chunk passes as is; when it did not (strip), a usage-only chunk is
// dropped and any other valid JSON chunk stays valid JSON with no
// top-level usage object left, its content kept, and a chunk with no usage
// object loses its usage member ("usage": null) too.
func FuzzObserve(f *testing.F) {
	for _, c := range []string{
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`,
		`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}`,
		`{"usage":{"prompt_tokens":1},"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":2}}`,
		`{"us\u0061ge":{"prompt_tokens":1},"choices":[{"delta":{}}]}`,
		`{"choices":[{"delta":{"content":"\"usage\":{}"}}]}`,
		`{"x":{"usage":{"prompt_tokens":1}},"choices":[1]}`,
		`{"choices":{"0":1},"usage":{}}`,
		`{"usage" : { } ,"choices":[0]}`,
		`[{"usage":{}}]`,
		`{"usage":{"prompt_tokens":1}`,
		`data: {"usage":{}}`,
		``,
	} {
		f.Add([]byte(c), true)
	}
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":3}}`), false)
	f.Add([]byte(`{"usage":null,"choices":[{"delta":{"content":"x"}}],"usage":null}`), true)
	f.Fuzz(func(t *testing.T, chunk []byte, strip bool) {
		in := bytes.Clone(chunk)
		defer func() {
			if !bytes.Equal(chunk, in) {
				t.Fatalf("observe wrote into the upstream's chunk: %q became %q", in, chunk)
			}
		}()
		hasUsage := gjson.ValidBytes(in) && gjson.GetBytes(in, "usage").IsObject()
		s := &meteredStream{strip: strip}
		out, skip := s.observe(chunk)
		if hasUsage && !s.seen {
			t.Fatalf("chunk %q: usage not seen", in)
		}
		if !strip {
			if s.seen && len(s.tail) > 0 {
				// The client asked, but the usage came on a chunk with
				// content: it goes once, in a chunk of its own at the end
				// (s.tail); the chunk stays valid without it. (An
				// upstream's chunk is checked as JSON before it is
				// metered: an invalid one only must not panic.)
				if !gjson.ValidBytes(in) {
					return
				}
				if skip || !gjson.ValidBytes(out) || gjson.GetBytes(out, "usage").Exists() || !gjson.ValidBytes(s.tail) {
					t.Fatalf("chunk %q became %q (skip %v), usage chunk %q", in, out, skip, s.tail)
				}
				return
			}
			if skip || !bytes.Equal(out, in) {
				t.Fatalf("chunk %q (usage seen %v) became %q, skip %v", in, s.seen, out, skip)
			}
			return
		}
		if !s.seen {
			// No usage object: only a usage member (null) may go, from a
			// valid chunk, which stays valid with its content.
			if !gjson.ValidBytes(in) {
				// Not JSON (the upstream stream refuses such an event
				// before the meter sees it): gjson's lenient reading may
				// take it for a usage-only chunk whose counts are no
				// counts, which goes; else it is left as it came.
				if !skip && !bytes.Equal(out, in) && !bytes.HasSuffix(in, []byte(`,"usage":null}`)) {
					t.Fatalf("invalid chunk %q changed to %q", in, out)
				}
				return
			}
			if skip {
				t.Fatalf("chunk %q skipped", in)
			}
			// A key spelled with escapes ("us\u0061ge") is left: the
			// member is dropped on one scan for its plain spelling, which
			// is what upstreams write.
			if !gjson.ValidBytes(out) || gjson.GetBytes(out, "usage").Exists() && bytes.Contains(out, []byte(`"usage"`)) ||
				gjson.GetBytes(in, "choices").Raw != gjson.GetBytes(out, "choices").Raw {
				t.Fatalf("chunk %q became %q: still a usage member, or not the same content", in, out)
			}
			return
		}
		if !gjson.ValidBytes(in) {
			return
		}
		if skip {
			if c := gjson.GetBytes(in, "choices"); c.IsArray() && len(c.Array()) > 0 {
				t.Fatalf("chunk %q with content dropped", in)
			}
			return
		}
		if !gjson.ValidBytes(out) {
			t.Fatalf("valid chunk %q became invalid %q", in, out)
		}
		if gjson.GetBytes(out, "usage").IsObject() {
			t.Fatalf("chunk %q kept a usage object the client did not ask for: %q", in, out)
		}
		if a, b := gjson.GetBytes(in, "choices").Raw, gjson.GetBytes(out, "choices").Raw; a != b {
			t.Fatalf("chunk %q: choices %s became %s", in, a, b)
		}
	})
}
