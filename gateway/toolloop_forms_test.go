package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
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
			acc, _, err := h.streamChat(p, wiretest.Options{}, nil)
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

// attemptsConfig: one retry per model call, with a backoff short enough for
// a test, and the calculator as the only server tool.
const attemptsConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
retries = 1
[[models]]
name = "gpt-x"
provider = "up"
upstream = "up-model"
[[tools]]
name = "calculator"
kind = "builtin"
[middleware.fallback]
base_backoff = "1ms"
max_backoff = "2ms"
breaker_failures = 100
`

// x-gateway-attempts has one meaning in both forms: the upstream attempts
// of the first model call (its retries and fallbacks). A streamed answer
// sends its headers before the later rounds exist, so the JSON answer must
// not count them either; every round's attempts are in the x_gateway trace,
// the same in both forms.
func TestToolLoopAttemptsHeaderAgrees(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{} // form and round → calls so far
	h := newHarness(t, attemptsConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		round := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array())
		mu.Lock()
		key := fmt.Sprint(c.Stream, round)
		seen[key]++
		n := seen[key]
		mu.Unlock()
		if round < 2 && n == 1 { // the first two rounds each fail once, then succeed
			return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")}
		}
		if round < 2 {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}}}
		}
		return mockllm.Turn{Text: "done"}
	}})
	trace := option.WithHeader("x-gateway-tool-trace", "1")
	wantRounds := `[{"model":"gpt-x","attempts":2},{"model":"gpt-x","attempts":2},{"model":"gpt-x","attempts":1}]`

	_, sum, err := h.streamChat(userMsg("add"), wiretest.Options{}, nil, trace)
	if err != nil {
		t.Fatal(err)
	}
	_, streamHdr := h.lastRaw()
	streamRounds := gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway.rounds").Raw

	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("add"), trace); err != nil {
		t.Fatal(err)
	}
	raw, jsonHdr := h.lastRaw()
	jsonRounds := gjson.GetBytes(raw, "x_gateway.rounds").Raw

	if s, j := streamHdr.Get("X-Gateway-Attempts"), jsonHdr.Get("X-Gateway-Attempts"); s != "2" || j != "2" {
		t.Fatalf("x-gateway-attempts: stream %q, JSON %q; want 2 (the first model call's) in both", s, j)
	}
	if streamRounds != wantRounds || jsonRounds != wantRounds {
		t.Fatalf("x_gateway.rounds:\n stream %s\n JSON   %s\n want   %s", streamRounds, jsonRounds, wantRounds)
	}
}

// A round the upstream cut with "length" in the middle of a tool call's
// arguments ends the answer with "length" in both forms. The loop's stream
// used to say "tool_calls" for a cut client call while the JSON answer,
// relayed, said "length"; a cut server call was run on its cut arguments
// and the model called again.
func TestToolLoopCutCallKeepsLength(t *testing.T) {
	t.Parallel()
	weather := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object"}})}
	for _, tc := range []struct {
		name  string
		cfg   string
		call  string
		shown int // client calls in the answer
	}{
		{name: "client call, no server tools", cfg: baseConfig, call: "get_weather", shown: 1},
		{name: "client call, server tools offered", cfg: toolConfig, call: "get_weather", shown: 1},
		{name: "server call", cfg: toolConfig, call: "calculator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, strings.ReplaceAll(tc.cfg, "{{HTTP}}", "http://127.0.0.1:1/"), mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: tc.call, Arguments: `{"ci`}}, FinishReason: "length"}
			}})
			p := userMsg("weather in Oslo?")
			p.Tools = weather
			resp, err := h.client.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			acc, sum, err := h.streamChat(p, wiretest.Options{}, wiretest.LoadSchema(t))
			if err != nil {
				t.Fatal(err)
			}
			whole := resp.Choices[0]
			if whole.FinishReason != "length" || sum.FinishReason != "length" || acc.Choices[0].FinishReason != "length" {
				t.Fatalf("finish_reason: JSON %q, stream %q (accumulated %q); want length", whole.FinishReason, sum.FinishReason, acc.Choices[0].FinishReason)
			}
			if len(whole.Message.ToolCalls) != tc.shown || len(sum.ToolCalls) != tc.shown {
				t.Fatalf("client calls: JSON %d, stream %d; want %d", len(whole.Message.ToolCalls), len(sum.ToolCalls), tc.shown)
			}
			if tc.shown > 0 && (whole.Message.ToolCalls[0].Function.Arguments != `{"ci` || sum.ToolCalls[0].Arguments != `{"ci`) {
				t.Fatalf("arguments: JSON %q, stream %q; want the cut %q", whole.Message.ToolCalls[0].Function.Arguments, sum.ToolCalls[0].Arguments, `{"ci`)
			}
			if n := len(h.mock.Requests()); n != 2 {
				t.Fatalf("%d model calls, want one per request: a cut round ends the answer", n)
			}
		})
	}
}
