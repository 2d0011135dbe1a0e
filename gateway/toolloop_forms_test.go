package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// The streamed and the JSON answer of the same tool-loop request carry the
// same content: what openai-go's ChatCompletionAccumulator builds from the
// stream (every round's text, as it streamed live) is exactly the JSON
// message's content.
func TestToolLoopStreamAndJSONContentAgree(t *testing.T) {
	t.Parallel()
	weather := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object"}})}
	for _, tc := range []struct {
		name    string
		respond func(c *mockllm.Call) mockllm.Turn
		params  func(p *openai.ChatCompletionNewParams)
		want    []string // in the content, in order
		calls   int      // client tool calls in the answer
	}{
		{
			name: "text in three rounds",
			respond: func(c *mockllm.Call) mockllm.Turn {
				switch len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array()) {
				case 0:
					return mockllm.Turn{Text: "Let me compute. ", ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
				case 1:
					return mockllm.Turn{Text: "That is 42; checking twice. ", ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"42/1"}`}}}
				}
				return mockllm.Turn{Text: "The answer is 42."}
			},
			want: []string{"Let me compute. ", "That is 42; checking twice. ", "The answer is 42."},
		},
		{
			name: "text before a mixed turn",
			respond: func(c *mockllm.Call) mockllm.Turn {
				if len(c.ToolResults) == 0 {
					return mockllm.Turn{Text: "First the sum. ", ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}}}
				}
				return mockllm.Turn{Text: "Now the weather.", ToolCalls: []mockllm.ToolCall{
					{Name: "calculator", Arguments: `{"expression":"2+2"}`}, {Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}
			},
			params: func(p *openai.ChatCompletionNewParams) { p.Tools = weather },
			want:   []string{"First the sum. ", "Now the weather."},
			calls:  1,
		},
		{
			name: "tool_choice required answers with the result after the round's text",
			respond: func(c *mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
			},
			params: func(p *openai.ChatCompletionNewParams) {
				p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
					Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "calculator"}}}
			},
			want: []string{"Computing. ", "42"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, _ := toolHarness(t, tc.respond, mockllm.Chunking{TextRunes: 3})
			p := userMsg("compute")
			if tc.params != nil {
				tc.params(&p)
			}
			acc, err, _ := h.streamChat(p, wiretest.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := h.client.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			streamed, whole := acc.Choices[0].Message.Content, resp.Choices[0].Message.Content
			if streamed != whole {
				t.Fatalf("streamed content %q, JSON content %q", streamed, whole)
			}
			rest := whole
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("content %q lacks %q (in order)", whole, w)
				}
				rest = rest[i+len(w):]
			}
			if len(acc.Choices[0].Message.ToolCalls) != tc.calls || len(resp.Choices[0].Message.ToolCalls) != tc.calls {
				t.Fatalf("client calls: streamed %d, JSON %d, want %d", len(acc.Choices[0].Message.ToolCalls), len(resp.Choices[0].Message.ToolCalls), tc.calls)
			}
		})
	}
}
