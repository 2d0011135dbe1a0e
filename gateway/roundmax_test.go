package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// providers.max_response_bytes bounds a streamed tool-loop round too, as
// the README says: the loop kept up to the default 32 MiB whatever the
// setting (a resource probe read 42.7 MB of one round under an 8 MiB one).
func TestMaxResponseBytesBoundsAStreamedRound(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(baseConfig, "retries = 0\n", "retries = 0\nmax_response_bytes = 65536\n", 1) + calculatorTool
	h := newHarness(t, cfg, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{Text: strings.Repeat("abcd", 40000)})})
	status, _, body := h.post("/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if status != 200 || !strings.Contains(string(body), "upstream_response_too_large") || strings.Contains(string(body), "[DONE]") {
		t.Fatalf("%d, %d bytes, ends %q", status, len(body), body[max(0, len(body)-300):])
	}
	text := 0
	for _, line := range strings.Split(string(body), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			text += len(gjson.Get(d, "choices.0.delta.content").Str)
		}
	}
	if text > 80000 {
		t.Fatalf("%d bytes of text streamed past a 64 KiB round bound", text)
	}
}
