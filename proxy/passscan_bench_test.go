package proxy

import (
	"strings"
	"testing"
)

// BenchmarkOwnerTap: the cost of reading a response's id from a JSON
// answer whose id comes after a long output (the scan follows every byte
// before it), and from an event stream.
func BenchmarkOwnerTap(b *testing.B) {
	text := strings.Repeat("lorem ipsum dolor sit amet ", 40000)
	js := `{"output":[{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"` + text + `"}]}],"id":"resp_1","object":"response"}`
	sse := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"output\":[{\"text\":\"" + text + "\"}],\"id\":\"resp_1\"}}\n\n"
	for _, tc := range []struct {
		name, ct, body string
	}{{"json", "application/json", js}, {"sse", "text/event-stream", sse}} {
		body := []byte(tc.body)
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if id, ok := ownerTapAll(tc.ct, body, 32<<10); !ok || id != "resp_1" {
					b.Fatal("no id")
				}
			}
		})
	}
}

// BenchmarkUsageTapLongLine: the cost of reading the usage of an event
// stream's data line too long to keep whole (an event carrying an image),
// which is followed byte by byte.
func BenchmarkUsageTapLongLine(b *testing.B) {
	body := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"result\":\"" +
		strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 40000) + "\"}],\"usage\":{\"input_tokens\":8,\"output_tokens\":9}}}\n\n"
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tapAll("text/event-stream", body, 32<<10).usage(); !ok {
			b.Fatal("no usage")
		}
	}
}
