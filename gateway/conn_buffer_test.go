package gateway

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/mockllm"
)

// server.read_buffer sizes each client connection's read buffer, which
// bounds the request head: a head that does not fit is refused, one that
// fits is served. The same head passes with a larger buffer.
func TestServerReadBuffer(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3000) // a header value over 1 KiB, under 8 KiB
	cases := []struct {
		name   string
		buffer string
		ok     bool
	}{
		{name: "1 KiB refuses a 3 KB header", buffer: "read_buffer = 1024", ok: false},
		{name: "8 KiB serves it", buffer: "read_buffer = 8192", ok: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := strings.Replace(baseConfig, "[server]\n", "[server]\n"+c.buffer+"\n", 1)
			h := newHarness(t, cfg, mockllm.Options{})
			status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`,
				map[string]string{"X-Big": big})
			if (status == 200) != c.ok {
				t.Fatalf("status %d: %.200s", status, body)
			}
		})
	}
}
