package gateway

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// requiredResponder answers like a model under tool_choice "required" with a
// server and a client tool: the server tool first, then (with its result)
// the client's tool. It records the tool_choice of every call.
type requiredResponder struct {
	mu      sync.Mutex
	choices []string
}

func (r *requiredResponder) respond(c *mockllm.Call) mockllm.Turn {
	r.mu.Lock()
	r.choices = append(r.choices, gjson.GetBytes(c.Body, "tool_choice").Raw)
	r.mu.Unlock()
	switch {
	case c.LastRole == "user":
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
	case strings.Contains(strings.Join(c.ToolResults, ""), "temp_c"):
		return mockllm.Turn{Text: "6*7=42 and Oslo is cold"}
	default:
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}
	}
}

// TestRequiredChoiceServerToolThenClientTool: a client that offers its own
// tool and asks for tool_choice "required" gets a call of its own tool, even
// when the model first meets the requirement with a server tool. The server
// round does not end the answer (its results are no answer to a client that
// required a call); the next round is asked with the client's "required"
// again. The Vercel AI SDK throws ToolChoiceViolationError on a step under a
// forced tool choice without a tool call; openai-go and the openai npm
// package accept either answer, and get the client call too.
func TestRequiredChoiceServerToolThenClientTool(t *testing.T) {
	t.Parallel()
	r := &requiredResponder{}
	h, _ := toolHarness(t, r.respond, mockllm.Chunking{})

	client := openai.NewClient(option.WithBaseURL(h.base), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-x",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is 6*7 and the weather in Oslo?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
	}
	check := func(form string, msg openai.ChatCompletionMessage, finish string) {
		t.Helper()
		if finish != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
			t.Errorf("%s: finish %q, tool calls %+v, content %q; want one get_weather call", form, finish, msg.ToolCalls, msg.Content)
		}
	}
	resp, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	check("openai-go JSON", resp.Choices[0].Message, resp.Choices[0].FinishReason)
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("openai-go stream", acc.Choices[0].Message, acc.Choices[0].FinishReason)
	r.mu.Lock()
	choices := r.choices
	r.mu.Unlock()
	if len(choices) != 4 || choices[1] != `"required"` || choices[3] != `"required"` {
		t.Errorf("upstream tool_choice per call %q, want \"required\" in all four (two per request)", choices)
	}

	skipWithoutNode(t)
	if _, err := os.Stat("../test/node/node_modules/ai"); err != nil {
		t.Skip("the Vercel AI SDK is missing from test/node/node_modules: run npm ci in test/node (.ci/run does)")
	}
	if out := runNode(t, "aisdk.mjs", "GATEWAY_BASE_URL="+h.base, "GATEWAY_MODEL=gpt-x"); strings.Count(out, ": ok") != 5 {
		t.Fatalf("node output: %s", out)
	}
}
