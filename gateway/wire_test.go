package gateway

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
	"github.com/openai/openai-go/v3"
)

// chunkHead matches the id and created every chunk repeats: the only bytes
// a replay may change.
var chunkHead = regexp.MustCompile(`\{"id":"[^"]*","object":"chat\.completion\.chunk","created":[0-9]+`)

// TestLiveAndReplayByteIdentical: the tool loop's live stream and its cache
// replay encode the same answer through the same encoder (wire.ChatSSE), so
// the bytes differ only in id and created. The answers are cut the way a
// replay cuts them (64-byte text pieces, whole arguments under 64 bytes),
// so both carry the same events. The stream checker and the schema run on
// both.
func TestLiveAndReplayByteIdentical(t *testing.T) {
	t.Parallel()
	config := baseConfig + `
[middleware.cache]
enabled = true
tool_calls = true
[[tools]]
name = "calculator"
kind = "builtin"
`
	answer := strings.Repeat("The result is fourteen; ", 6) // 144 ASCII bytes: 64 + 64 + 16
	tests := []struct {
		name    string
		usage   bool
		tools   bool
		respond func(c *mockllm.Call) mockllm.Turn
	}{
		{name: "server round then text, with usage", usage: true, respond: func(c *mockllm.Call) mockllm.Turn {
			if len(c.ToolResults) == 0 {
				return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"2+3*4"}`}}}
			}
			return mockllm.Turn{Text: answer, Usage: &mockllm.Usage{Prompt: 20, Completion: 9, Cached: 4}}
		}},
		{name: "text then a client call", tools: true, respond: func(c *mockllm.Call) mockllm.Turn {
			return mockllm.Turn{Text: "Checking.", ToolCalls: []mockllm.ToolCall{{Name: "lookup_city", Arguments: `{"name":"Zürich"}`}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, config, mockllm.Options{Respond: tt.respond,
				Chunking: mockllm.Chunking{TextRunes: 64, WholeToolCalls: true}})
			schema := wiretest.LoadSchema(t)
			p := det("what is 2+3*4?")
			if tt.usage {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			if tt.tools {
				p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup_city"})}
			}
			var raws [2][]byte
			var sums [2]*wiretest.Summary
			for i := range raws {
				_, sum, err := h.streamChat(p, wiretest.Options{WantUsage: tt.usage}, schema)
				if err != nil {
					t.Fatal(err)
				}
				raw, hdr := h.lastRaw()
				if want := []string{"miss", "hit"}[i]; hdr.Get("x-gateway-cache") != want {
					t.Fatalf("request %d: x-gateway-cache %q, want %q", i, hdr.Get("x-gateway-cache"), want)
				}
				raws[i], sums[i] = raw, sum
			}
			if sums[0].ID == sums[1].ID {
				t.Fatalf("the replay kept the live id %q", sums[0].ID)
			}
			live := chunkHead.ReplaceAll(raws[0], []byte(`{"id":"X","object":"chat.completion.chunk","created":0`))
			replay := chunkHead.ReplaceAll(raws[1], []byte(`{"id":"X","object":"chat.completion.chunk","created":0`))
			if !bytes.Equal(live, replay) {
				t.Fatalf("live and replay differ beyond id/created:\nlive:\n%s\nreplay:\n%s", live, replay)
			}
		})
	}
}
