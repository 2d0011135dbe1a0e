package proxy

import (
	"fmt"
	"strings"
	"testing"
)

// The item tap's cost on an answer's bytes: a stream of text deltas, and
// a large JSON answer.
func BenchmarkItemTap(b *testing.B) {
	var sse strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&sse, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_0123456789abcdef0123456789abcdef0123456789abcdef\",\"output_index\":1,\"content_index\":0,\"delta\":\" word\",\"logprobs\":[],\"obfuscation\":\"aBcD\"}\n\n", i)
	}
	js := `{"id":"resp_1","object":"response","output":[{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"` + strings.Repeat("lorem ipsum dolor sit amet ", 40000) + `"}]}]}`
	for _, tc := range []struct {
		name string
		sse  bool
		body []byte
	}{{"sse", true, []byte(sse.String())}, {"json", false, []byte(js)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				itemTapAll(tc.sse, tc.body, 32<<10)
			}
		})
	}
}
