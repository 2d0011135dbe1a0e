package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// selectConfig: gpt-x offers two server tools; "picker" selects tools when
// a request offers more than 5, and current_time is always included. (40
// tools alone do not fit base's 1000-token window of gpt-x: 8000 here.)
var selectConfig = strings.Replace(baseConfig, "context_window = 1000", "context_window = 8000", 1) + `
[[models]]
name = "picker"
provider = "up"
upstream = "up-picker"
[[tools]]
name = "calculator"
kind = "builtin"
description = "Evaluates arithmetic"
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}'
[[tools]]
name = "current_time"
kind = "builtin"
[middleware.tool_select]
model = "picker"
max_tools = 5
always_include = ["current_time"]
`

// selectTokens is the selector's usage: it must never reach the client's.
var selectTokens = &mockllm.Usage{Prompt: 7000, Completion: 7}

// manyTools are the client's 38 tools (tool_00 ... tool_37): with the two
// server tools, 40.
func manyTools(n int) []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for i := 0; i < n; i++ {
		out = append(out, openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:        fmt.Sprintf("tool_%02d", i),
			Description: openai.String(fmt.Sprintf("Does thing number %d", i)),
			Parameters:  openai.FunctionParameters{"type": "object", "properties": map[string]any{}},
		}))
	}
	return out
}

// selectModel scripts the selector's turn with pick, and gpt-x: round 1
// calls the calculator (a server tool), round 2 calls the client's tool_17,
// and after the client's result it answers. Every round's usage is fixed.
func selectModel(pick func() mockllm.Turn) func(*mockllm.Call) mockllm.Turn {
	return func(c *mockllm.Call) mockllm.Turn {
		if _, ok := c.ToolSelection(); ok {
			t := pick()
			t.Usage = selectTokens
			return t
		}
		u := &mockllm.Usage{Prompt: 100, Completion: 10}
		switch results := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array()); {
		case strings.Contains(strings.Join(c.ToolResults, ""), `"thing"`): // the client's result
			return mockllm.Turn{Text: "done: " + strings.Join(c.ToolResults, " "), Usage: u}
		case results == 0 && c.Offers("calculator"):
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: u}
		case results == 1 && c.Offers("tool_17"):
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "tool_17", Arguments: `{}`}}, Usage: u}
		}
		return mockllm.Turn{Text: "done", Usage: u}
	}
}

// offered returns the tool names of an upstream request, sorted.
func offered(body []byte) []string {
	var names []string
	gjson.GetBytes(body, "tools").ForEach(func(_, t gjson.Result) bool {
		names = append(names, t.Get("function.name").Str)
		return true
	})
	slices.Sort(names)
	return names
}

// upstreamTools returns the sorted tool names of every gpt-x request the
// mock received, and the number of selector calls.
func upstreamTools(h *harness) (rounds [][]string, selections int) {
	for _, r := range h.mock.Requests() {
		switch r.Model {
		case "up-model":
			rounds = append(rounds, offered(r.Body))
		case "up-picker":
			selections++
		}
	}
	return rounds, selections
}

// chat sends p, streamed or not, through the openai-go client (streams
// through the stream checker and the schema) and returns the message, the
// usage, the response headers and x_gateway.
func selectChat(t *testing.T, h *harness, p openai.ChatCompletionNewParams, stream bool, opts ...option.RequestOption) (openai.ChatCompletionMessage, openai.CompletionUsage, http.Header, gjson.Result) {
	t.Helper()
	schema := wiretest.LoadSchema(t)
	if stream {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: true}, schema, opts...)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		_, hdr := h.lastRaw()
		return acc.Choices[0].Message, acc.Usage, hdr, gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway")
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	resp, err := h.client.Chat.Completions.New(context.Background(), p, opts...)
	if err != nil {
		t.Fatalf("json: %v", err)
	}
	raw, hdr := h.lastRaw()
	if err := schema.Completion(raw); err != nil {
		t.Fatal(err)
	}
	return resp.Choices[0].Message, resp.Usage, hdr, gjson.GetBytes(raw, "x_gateway")
}

// fortyTools is the request of most tests: 38 client tools (and the two
// server tools) for a turn that calls the calculator, then tool_17.
func fortyTools() openai.ChatCompletionNewParams {
	p := userMsg("compute 6*7 and then do thing 17")
	p.Tools = manyTools(38)
	return p
}

// clientCall sends fortyTools traced, checks that the client got gpt-x's
// call of tool_17, and returns what the client and the mock saw.
func clientCall(t *testing.T, h *harness, stream bool) (usage openai.CompletionUsage, hdr http.Header, xg gjson.Result, rounds [][]string, selections int) {
	t.Helper()
	h.mock.ResetRecords()
	msg, usage, hdr, xg := selectChat(t, h, fortyTools(), stream, option.WithHeader("x-gateway-tool-trace", "1"))
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "tool_17" {
		t.Fatalf("stream=%v: client saw %+v", stream, msg)
	}
	rounds, selections = upstreamTools(h)
	return usage, hdr, xg, rounds, selections
}

// 40 tools, the selector picks 3 (two client tools and a server tool): every
// round upstream offers exactly those 3 and always_include, streamed and
// not. The selector's tokens are in x_gateway, not in usage; the second
// request with the same tools and user turn reuses the selection.
func TestToolSelectPicksForEveryRound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, selectConfig, mockllm.Options{Respond: selectModel(func() mockllm.Turn {
		return mockllm.SelectTools("tool_17", "no_such_tool", "calculator", "tool_03")
	})})
	want := []string{"calculator", "current_time", "tool_03", "tool_17"}
	for i, stream := range []bool{true, false} {
		usage, hdr, xg, rounds, selections := clientCall(t, h, stream)
		if len(rounds) != 2 {
			t.Fatalf("stream=%v: %d upstream rounds", stream, len(rounds))
		}
		for r, got := range rounds {
			if !slices.Equal(got, want) {
				t.Errorf("stream=%v: round %d offered %v, want %v", stream, r+1, got, want)
			}
		}
		if got := hdr.Get("X-Gateway-Tools-Selected"); got != "4/40" {
			t.Errorf("stream=%v: x-gateway-tools-selected %q", stream, got)
		}
		if usage.PromptTokens != 200 || usage.CompletionTokens != 20 {
			t.Errorf("stream=%v: the client's usage %+v holds more than its two rounds", stream, usage)
		}
		sel := xg.Get("tool_select")
		wantOutcome, wantSelections := "selected", 1
		if i > 0 { // the same tools and user turn: the selection is reused
			wantOutcome, wantSelections = "cached", 0
		}
		if selections != wantSelections || sel.Get("outcome").Str != wantOutcome || sel.Get("offered").Int() != 40 || sel.Get("kept").Int() != 4 {
			t.Errorf("stream=%v: %d selector calls, x_gateway.tool_select %s", stream, selections, sel.Raw)
		}
		if i == 0 && (sel.Get("usage.prompt_tokens").Int() != 7000 || sel.Get("usage.completion_tokens").Int() != 7) {
			t.Errorf("x_gateway.tool_select.usage %s", sel.Get("usage").Raw)
		}
	}
}

// The selector's request lists all 40 tools, with descriptions, and the
// latest user turn.
func TestToolSelectRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, selectConfig, mockllm.Options{Respond: selectModel(func() mockllm.Turn { return mockllm.SelectTools("tool_01") })})
	p := openai.ChatCompletionNewParams{Model: "gpt-x", Tools: manyTools(38), Messages: []openai.ChatCompletionMessageParamUnion{
		openai.UserMessage("an older question"), openai.AssistantMessage("an older answer"), openai.UserMessage("the latest question"),
	}}
	selectChat(t, h, p, false)
	for _, r := range h.mock.Requests() {
		if r.Model != "up-picker" {
			continue
		}
		c := &mockllm.Call{Body: r.Body}
		names, ok := c.ToolSelection()
		sys := gjson.GetBytes(r.Body, "messages.0.content").Str
		if !ok || len(names) != 40 || !strings.Contains(sys, "- tool_05: Does thing number 5\n") || !strings.Contains(sys, "- calculator: Evaluates arithmetic\n") {
			t.Fatalf("selector saw %d names, system %q", len(names), sys)
		}
		if u := gjson.GetBytes(r.Body, "messages.1.content").Str; u != "the latest question" || strings.Contains(string(r.Body), "older") {
			t.Fatalf("selector's user message %q", u)
		}
		return
	}
	t.Fatal("no selector call")
}

// A tool the history already calls and the tool tool_choice names stay
// offered whatever the selector picks: the upstream would refuse a history
// that calls an absent tool.
func TestToolSelectKeepsHistoryAndToolChoice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, selectConfig, mockllm.Options{Respond: selectModel(func() mockllm.Turn { return mockllm.SelectTools("tool_03") })})
	call := openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
		ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
			ID: "call_old", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "tool_30", Arguments: `{}`},
		}}},
	}}
	p := openai.ChatCompletionNewParams{Model: "gpt-x", Tools: manyTools(38), Messages: []openai.ChatCompletionMessageParamUnion{
		openai.UserMessage("earlier"), call, openai.ToolMessage("old result", "call_old"), openai.UserMessage("now do thing 3"),
	}}
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
		Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "tool_31"},
	}}
	want := []string{"current_time", "tool_03", "tool_30", "tool_31"}
	for _, stream := range []bool{false, true} {
		h.mock.ResetRecords()
		_, _, hdr, _ := selectChat(t, h, p, stream)
		rounds, _ := upstreamTools(h)
		if len(rounds) == 0 {
			t.Fatalf("stream=%v: no upstream round", stream)
		}
		for r, got := range rounds {
			if !slices.Equal(got, want) {
				t.Errorf("stream=%v: round %d offered %v, want %v", stream, r+1, got, want)
			}
		}
		if got := hdr.Get("X-Gateway-Tools-Selected"); got != "4/40" {
			t.Errorf("stream=%v: x-gateway-tools-selected %q", stream, got)
		}
	}
}

// A selector that fails, answers garbage, names only unknown tools or is
// refused by max_model_calls offers every tool (fail open): the request is
// answered, the header says 40/40, x_gateway and the metric name the outcome.
func TestToolSelectFailsOpen(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		extra   string
		pick    mockllm.Turn
		outcome string
	}{
		{name: "status 500", pick: mockllm.Turn{Fault: mockllm.StatusFault(500, "", "selector down")}, outcome: "error"},
		{name: "garbage", pick: mockllm.Turn{Text: "I would pick tool_03 and tool_17."}, outcome: "malformed"},
		{name: "unknown names", pick: mockllm.SelectTools("nope", "tool_99"), outcome: "malformed"},
		{name: "too few", extra: "min_tools = 2\n", pick: mockllm.SelectTools("tool_03"), outcome: "malformed"},
		{name: "max_model_calls", extra: "[tool_loop]\nmax_model_calls = 2\n", pick: mockllm.SelectTools("tool_03"), outcome: "refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, selectConfig+tc.extra, mockllm.Options{Respond: selectModel(func() mockllm.Turn { return tc.pick })})
			for _, stream := range []bool{false, true} {
				_, hdr, xg, rounds, _ := clientCall(t, h, stream)
				for r, got := range rounds {
					if len(got) != 40 {
						t.Errorf("stream=%v: round %d offered %d tools, want all 40", stream, r+1, len(got))
					}
				}
				if got := hdr.Get("X-Gateway-Tools-Selected"); got != "40/40" {
					t.Errorf("stream=%v: x-gateway-tools-selected %q", stream, got)
				}
				if got := xg.Get("tool_select.outcome").Str; got != tc.outcome {
					t.Errorf("stream=%v: x_gateway.tool_select %s, want outcome %s", stream, xg.Get("tool_select").Raw, tc.outcome)
				}
			}
			if n := selectMetric(h, tc.outcome); n < 2 {
				t.Errorf("gateway_tool_select_total{outcome=%q} = %v, want at least this test's 2", tc.outcome, n)
			}
		})
	}
}

// selectMetric reads gateway_tool_select_total{outcome} from /metrics (the
// registry is the process's: other tests only add to it).
func selectMetric(h *harness, outcome string) float64 {
	for _, m := range h.metrics()["gateway_tool_select_total"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "outcome" && l.GetValue() == outcome {
				return m.Counter.GetValue()
			}
		}
	}
	return 0
}

// The selector's call counts against tool_loop.max_model_calls: with 3, it
// takes one, so the loop gets its first round and a forced final one.
func TestToolSelectCountsAsModelCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, selectConfig+"[tool_loop]\nmax_model_calls = 3\n", mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if _, ok := c.ToolSelection(); ok {
			return mockllm.SelectTools("calculator")
		}
		if c.LastRole == "tool" && gjson.GetBytes(c.Body, "tool_choice").Str == "none" {
			return mockllm.Turn{Text: "final"}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}}}
	}})
	p := userMsg("keep computing")
	p.Tools = manyTools(38)
	msg, _, _, xg := selectChat(t, h, p, false, option.WithHeader("x-gateway-tool-trace", "1"))
	rounds, selections := upstreamTools(h)
	if msg.Content != "final" || len(rounds) != 2 || selections != 1 || xg.Get("stop_reason").Str != "max_model_calls" {
		t.Fatalf("content %q, %d rounds, %d selections, x_gateway %s", msg.Content, len(rounds), selections, xg.Raw)
	}
}

// Without server tools a JSON request takes the loop's fast path: its
// client tools are selected all the same.
func TestToolSelectClientOnlyFastPath(t *testing.T) {
	t.Parallel()
	cfg := baseConfig + `
[[models]]
name = "picker"
provider = "up"
upstream = "up-picker"
[middleware.tool_select]
model = "picker"
max_tools = 5
always_include = ["tool_00"]
`
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if _, ok := c.ToolSelection(); ok {
			return mockllm.SelectTools("tool_09", "tool_08")
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "tool_09", Arguments: `{}`}}}
	}})
	p := userMsg("do thing 9")
	p.Tools = manyTools(10)
	for _, stream := range []bool{false, true} {
		h.mock.ResetRecords()
		msg, _, hdr, _ := selectChat(t, h, p, stream)
		rounds, _ := upstreamTools(h)
		if len(rounds) != 1 || !slices.Equal(rounds[0], []string{"tool_00", "tool_08", "tool_09"}) {
			t.Fatalf("stream=%v: upstream offered %v", stream, rounds)
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "tool_09" || hdr.Get("X-Gateway-Tools-Selected") != "3/10" {
			t.Fatalf("stream=%v: client saw %+v, header %q", stream, msg, hdr.Get("X-Gateway-Tools-Selected"))
		}
	}
	// Five tools or fewer: no selection at all.
	h.mock.ResetRecords()
	p.Tools = manyTools(5)
	_, _, hdr, _ := selectChat(t, h, p, false)
	if rounds, selections := upstreamTools(h); selections != 0 || len(rounds[0]) != 5 || hdr.Get("X-Gateway-Tools-Selected") != "" {
		t.Fatalf("%d selections, %v offered, header %q", selections, rounds, hdr.Get("X-Gateway-Tools-Selected"))
	}
}

// The request's span carries the selection as an event with the selector's
// tokens, and the selector's call has a client span of its own.
func TestToolSelectTraced(t *testing.T) {
	t.Parallel()
	rc, otlpURL := newOTLPReceiver(t)
	h := newHarness(t, selectConfig+"[tracing]\nenabled = true\nendpoint = \""+otlpURL+"\"\n", mockllm.Options{Respond: selectModel(func() mockllm.Turn {
		return mockllm.SelectTools("tool_17", "calculator")
	})})
	selectChat(t, h, fortyTools(), false)
	spans := rc.wait(t, 5) // the request, the selector's call, two rounds and the calculator
	var event bool
	var selector bool
	for _, s := range spans {
		selector = selector || s.Name == "chat up-picker"
		for _, e := range s.Events {
			if e.Name != "gateway.tool_select" {
				continue
			}
			at := map[string]string{}
			counts := map[string]int64{}
			for _, a := range e.Attributes {
				at[a.Key] = a.Value.GetStringValue()
				counts[a.Key] = a.Value.GetIntValue()
			}
			// Token counts are numbers, as on the chat spans (a tracing
			// probe found them strings).
			event = at["gateway.tool_select.outcome"] == "selected" && at["gateway.tool_select.selected"] == "3/40" &&
				counts["gen_ai.usage.input_tokens"] == 7000 && counts["gen_ai.usage.output_tokens"] == 7
			if !event {
				t.Errorf("event attributes %v", at)
			}
		}
	}
	if !event || !selector {
		t.Fatalf("selection event %v, selector span %v", event, selector)
	}
}

// With the response cache in Redis, a selection made by one gateway serves
// another: the second asks no selector and offers the same tools.
func TestToolSelectSharedThroughRedis(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	cfg := selectConfig + "[middleware.cache]\nstore = \"redis\"\n[redis]\naddr = \"" + rs.Addr() + "\"\n"
	respond := selectModel(func() mockllm.Turn { return mockllm.SelectTools("tool_17", "calculator") })
	p := fortyTools()
	want := []string{"calculator", "current_time", "tool_17"}
	for i, wantSelections := range []int{1, 0} {
		h := newHarness(t, cfg, mockllm.Options{Respond: respond})
		selectChat(t, h, p, i == 1)
		rounds, selections := upstreamTools(h)
		if selections != wantSelections || len(rounds) != 2 || !slices.Equal(rounds[0], want) || !slices.Equal(rounds[1], want) {
			t.Fatalf("gateway %d: %d selector calls, rounds offered %v", i+1, selections, rounds)
		}
	}
}

// The README's example runs as written on the shipped config's demo model:
// its config block appended to config.toml, its request gets 2/6 tools.
func TestToolSelectReadmeExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile("../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(readme), "### LLM tool selection\n")
	_, block, _ := strings.Cut(sec, "```toml\n")
	block, _, _ = strings.Cut(block, "```")
	_, body, _ := strings.Cut(sec, "-d '")
	body, _, _ = strings.Cut(body, "'\n")
	if block == "" || !gjson.Valid(body) {
		t.Fatalf("README example not found: config %q, body %q", block, body)
	}
	cfg, err := config.Parse(append(append(shipped, '\n'), block...))
	if err != nil {
		t.Fatalf("the README's config block on the shipped config: %v", err)
	}
	h := &harness{t: t}
	h.srv = h.start(cfg)
	status, hdr, resp := h.post("/chat/completions", body, map[string]string{"x-gateway-tool-trace": "1"})
	sel := gjson.GetBytes(resp, "x_gateway.tool_select")
	if status != 200 || hdr.Get("X-Gateway-Tools-Selected") != "2/6" || sel.Get("outcome").Str != "selected" || sel.Get("kept").Int() != 2 {
		t.Fatalf("status %d, x-gateway-tools-selected %q, x_gateway.tool_select %s", status, hdr.Get("X-Gateway-Tools-Selected"), sel.Raw)
	}
}

// The openai npm package's runTools() with 38 client functions: each of its
// two requests (the second carries tool_17's result) offers upstream only
// the selected tools, and the second reuses the first's selection.
func TestToolSelectNodeRunTools(t *testing.T) {
	t.Parallel()
	skipWithoutNode(t)
	h := newHarness(t, selectConfig, mockllm.Options{Respond: selectModel(func() mockllm.Turn {
		return mockllm.SelectTools("tool_17", "calculator", "tool_03")
	})})
	if out := runNode(t, "toolselect.mjs", "GATEWAY_BASE_URL="+h.base); !strings.Contains(out, "runTools: ok") {
		t.Fatalf("node output: %s", out)
	}
	rounds, selections := upstreamTools(h)
	want := []string{"calculator", "current_time", "tool_03", "tool_17"}
	if selections != 1 || len(rounds) != 3 {
		t.Fatalf("%d selector calls, %d rounds", selections, len(rounds))
	}
	for r, got := range rounds {
		if !slices.Equal(got, want) {
			t.Errorf("round %d offered %v, want %v", r+1, got, want)
		}
	}
}

// /v1/responses runs on the chat pipeline: its function tools are selected
// like chat's (streamed and not), and its function call reaches the client.
func TestToolSelectResponses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, selectConfig, mockllm.Options{Respond: selectModel(func() mockllm.Turn {
		return mockllm.SelectTools("tool_17", "calculator", "tool_03")
	})})
	var tools []responses.ToolUnionParam
	for i := 0; i < 38; i++ {
		tools = append(tools, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
			Name:        fmt.Sprintf("tool_%02d", i),
			Description: openai.String(fmt.Sprintf("Does thing number %d", i)),
			Parameters:  map[string]any{"type": "object", "properties": map[string]any{}},
		}})
	}
	params := responses.ResponseNewParams{
		Model: "gpt-x",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("compute 6*7 and then do thing 17")},
		Tools: tools,
	}
	want := []string{"calculator", "current_time", "tool_03", "tool_17"}
	for _, stream := range []bool{false, true} {
		h.mock.ResetRecords()
		r := h.respond(params, stream)
		var calls []string
		for _, it := range r.Output {
			if it.Type == "function_call" {
				calls = append(calls, it.AsFunctionCall().Name)
			}
		}
		rounds, _ := upstreamTools(h)
		if !slices.Equal(calls, []string{"tool_17"}) || len(rounds) != 2 {
			t.Fatalf("stream=%v: calls %v, %d rounds", stream, calls, len(rounds))
		}
		for i, got := range rounds {
			if !slices.Equal(got, want) {
				t.Errorf("stream=%v: round %d offered %v, want %v", stream, i+1, got, want)
			}
		}
	}
}
