package anthropic

import (
	"bytes"
	"os"
	"testing"

	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wire"
)

// BenchmarkStreamDecoder decodes the published tool-use stream (text, two
// tool_use blocks in fragments, usage): per stream, the cost the provider
// adds over relaying chat chunks.
func BenchmarkStreamDecoder(b *testing.B) {
	raw, err := os.ReadFile("testdata/tool_use.sse")
	if err != nil {
		b.Fatal(err)
	}
	var events [][]byte
	rd := sse.NewReader(bytes.NewReader(raw), 1<<20)
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		events = append(events, append([]byte(nil), ev.Data...))
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		d := NewStreamDecoder("a", wire.Header{Model: "claude", IncludeUsage: true})
		for _, ev := range events {
			if err := d.Feed(ev); err != nil {
				b.Fatal(err)
			}
			for _, ok := d.Pop(); ok; _, ok = d.Pop() {
			}
		}
	}
}

// BenchmarkTranslateRequest translates a request that uses every mapping.
func BenchmarkTranslateRequest(b *testing.B) {
	body := []byte(fullChat)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := TranslateRequest(body, RequestOptions{Model: "m"}); err != nil {
			b.Fatal(err)
		}
	}
}
