package contextedit

import (
	"context"
	"testing"

	"github.com/llmgw/gateway/config"
)

// transcript100k is a tool-loop transcript of about 100k o200k tokens.
func transcript100k(b *testing.B) []byte {
	body := chatBody(loop(330, 8, search)...)
	n := mustCount(b, body)
	if n < 90_000 || n > 120_000 {
		b.Fatalf("transcript has %d tokens", n)
	}
	return body
}

func BenchmarkCount100k(b *testing.B) {
	body := transcript100k(b)
	b.Run("cached", func(b *testing.B) {
		c := counter(b, "o200k_base")
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Count(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		c, err := newCounter("o200k_base", 0)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Count(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The no-op path: a small request far under the window.
func BenchmarkMiddlewareNoOp(b *testing.B) {
	h, _ := newHandler(ceConfig(nil))
	req := request(chatBody(loop(2, 2, search)...), 128_000)
	req.EditLog = NewEditLog()
	ctx := context.Background()
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Chat(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// One round of a long tool loop over the trigger: re-apply the log, count
// (cached), build the edited body.
func BenchmarkMiddlewareEditRound(b *testing.B) {
	body := transcript100k(b)
	h, _ := newHandler(ceConfig(func(c *config.ContextEdit) { c.ClearAtLeast = 20_000 }))
	ctx := context.Background()
	req := request(body, 128_000)
	req.EditLog = NewEditLog()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Chat(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
