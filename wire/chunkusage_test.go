package wire

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestChunkUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, chunk, want string // want: the Raw of the usage object, "" for none
	}{
		{"usage chunk", `{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`, `{"prompt_tokens":3,"completion_tokens":2}`},
		{"null usage", `{"id":"c","choices":[{"delta":{"content":"hi"}}],"usage":null}`, ""},
		{"spaced null", `{"choices":[],"usage" : null}`, ""},
		{"spaced object", "{\"choices\":[],\"usage\" :\n\t{\"prompt_tokens\":1}}", `{"prompt_tokens":1}`},
		{"no usage", `{"choices":[{"delta":{"content":"hi"}}]}`, ""},
		{"nested object only", `{"choices":[{"delta":{"content":"x","x":{"usage":{"a":1}}}}]}`, ""},
		{"nested object before top-level", `{"choices":[{"delta":{"x":{"usage":{"a":1}}}}],"usage":{"prompt_tokens":9}}`, `{"prompt_tokens":9}`},
		{"nested null before top-level", `{"x":{"usage":null},"usage":{"prompt_tokens":9}}`, `{"prompt_tokens":9}`},
		{"usage in content", `{"choices":[{"delta":{"content":"\"usage\":{\"a\":1}"}}],"usage":{"prompt_tokens":2}}`, `{"prompt_tokens":2}`},
		{"usage in content only", `{"choices":[{"delta":{"content":"\"usage\":{\"a\":1}"}}],"usage":null}`, ""},
		{"array usage", `{"usage":[{"prompt_tokens":1}]}`, ""},
		{"escaped key", `{"\u0075sage":{"prompt_tokens":4}}`, `{"prompt_tokens":4}`},
		{"escaped last letter", `{"usag\u0065":{"prompt_tokens":5}}`, `{"prompt_tokens":5}`},
		{"first of repeated keys", `{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`, `{"prompt_tokens":1}`},
		{"key at the end", `{"a":1,"usage`, ""},
		{"empty", ``, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ChunkUsage([]byte(tc.chunk))
			if got.Raw != tc.want || got.IsObject() != (tc.want != "") {
				t.Fatalf("ChunkUsage(%s) = %q (%v), want %q", tc.chunk, got.Raw, got.Type, tc.want)
			}
			if g := gjson.Get(tc.chunk, "usage"); g.IsObject() != (tc.want != "") || (g.IsObject() && g.Raw != tc.want) {
				t.Fatalf("the table disagrees with gjson: %q", g.Raw)
			}
		})
	}
}

// FuzzChunkUsage: on any bytes, ChunkUsage finds the object gjson's Get
// of "usage" finds, and nothing when gjson finds no object.
func FuzzChunkUsage(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":3}}`))
	f.Add([]byte(`{"choices":[{"delta":{"content":"hi"}}],"usage":null}`))
	f.Add([]byte(`{"x":{"usage":{"a":1}},"usage" : {"prompt_tokens":9}}`))
	f.Add([]byte(`{"\u0075sage":{"b":2}}`))
	f.Add([]byte(`{"usage\q":{"b":2}}`))
	f.Add([]byte(`["usage",{"usage":{}}]`))
	f.Fuzz(func(t *testing.T, chunk []byte) {
		want := gjson.GetBytes(chunk, "usage")
		got := ChunkUsage(chunk)
		if want.IsObject() {
			if !got.IsObject() || got.Raw != want.Raw {
				t.Fatalf("%q: got %q, gjson finds %q", chunk, got.Raw, want.Raw)
			}
			return
		}
		if got.Exists() {
			t.Fatalf("%q: got %q, gjson finds no object (%q)", chunk, got.Raw, want.Raw)
		}
	})
}

var benchChunks = map[string][]byte{
	"content": []byte(`{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_b376dfbbd5","choices":[{"index":0,"delta":{"content":"Hello there"},"logprobs":null,"finish_reason":null}],"usage":null}`),
	"usage":   []byte(`{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_b376dfbbd5","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}}}`),
}

// BenchmarkChunkUsage compares the scan with the gjson read it replaces,
// on a content chunk ("usage":null) and on the usage chunk.
func BenchmarkChunkUsage(b *testing.B) {
	for _, name := range []string{"content", "usage"} {
		chunk := benchChunks[name]
		b.Run(name+"/scan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ChunkUsage(chunk)
			}
		})
		b.Run(name+"/gjson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				gjson.GetBytes(chunk, "usage")
			}
		})
	}
}
