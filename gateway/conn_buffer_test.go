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

// providers.read_buffer sizes each upstream connection's read buffer, which
// bounds the upstream's response head: the same 429 with a 3 KB header
// reaches the client as the upstream's 429 when the head fits, and as a 502
// (the upstream's answer could not be read) when it does not.
func TestProviderReadBuffer(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3000)
	cases := []struct {
		name   string
		buffer string
		status int
	}{
		{name: "1 KiB cannot read a 3 KB head", buffer: "read_buffer = 1024", status: 502},
		{name: "8 KiB reads it", buffer: "read_buffer = 8192", status: 429},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := strings.Replace(baseConfig, "retries = 0\n", "retries = 0\n"+c.buffer+"\n", 1)
			h := newHarness(t, cfg, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{
				Fault: &mockllm.Fault{Status: 429, Headers: map[string]string{"X-Big": big}}})})
			status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil)
			if status != c.status {
				t.Fatalf("status %d, want %d: %.200s", status, c.status, body)
			}
		})
	}
}
