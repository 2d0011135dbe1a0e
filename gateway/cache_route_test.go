package gateway

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/mockllm"
)

// Two models served by the same upstream model, one with a server tool and
// one without: an answer is never shared between them. The model that has
// the tool must get an answer made with the tool offered, not the plain
// model's answer to the same messages (and the other way round).
const cacheRoutesConfig = cacheConfig + `
[[models]]
name = "agent"
provider = "up"
upstream = "up-model"
[[tools]]
name = "calculator"
kind = "builtin"
models = ["agent"]
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}'
`

func TestCacheModelsOfOneUpstreamNeverShare(t *testing.T) {
	t.Parallel()
	h := newHarness(t, cacheRoutesConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Text: "offered [" + strings.Join(c.Tools, ",") + "]", Usage: &mockllm.Usage{Prompt: 5, Completion: 2}}
	}})
	ask := func(model string) (string, string) {
		p := det("what is 2+3*4?")
		p.Model = model
		resp, hv := h.chat(p)
		return resp.Choices[0].Message.Content, hv
	}
	steps := []struct{ model, header, content string }{
		{"agent", "miss", "offered [calculator]"},
		{"gpt-x", "miss", "offered []"},
		{"agent", "hit", "offered [calculator]"},
		{"gpt-x", "hit", "offered []"},
	}
	for i, s := range steps {
		content, hv := ask(s.model)
		if hv != s.header || content != s.content {
			t.Fatalf("step %d, model %s: x-gateway-cache %q (want %q), content %q (want %q)", i, s.model, hv, s.header, content, s.content)
		}
	}
	if n := h.mock.Calls("up-model"); n != 2 {
		t.Fatalf("upstream calls %d, want 2", n)
	}
}
