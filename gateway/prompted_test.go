package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// promptedConfig adds "txt", a model without function calling that the
// gateway prompts, and a server tool it may use.
const promptedConfig = baseConfig + `
[[models]]
name = "txt"
provider = "up"
upstream = "txt-model"
tool_calling = "prompted"
[[tools]]
name = "calculator"
kind = "builtin"
models = ["txt"]
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}'
[tool_loop]
max_consecutive_errors = 2
`

// textOnly wraps a text protocol script into a model that refuses anything
// tool-shaped with 400, as models without function calling do.
func textOnly(script func(c *mockllm.Call) string) func(*mockllm.Call) mockllm.Turn {
	return func(c *mockllm.Call) mockllm.Turn {
		b := gjson.ParseBytes(c.Body)
		if b.Get("tools").Exists() || b.Get("tool_choice").Exists() || b.Get("parallel_tool_calls").Exists() ||
			strings.Contains(b.Get("messages.#.role").Raw, `"tool"`) || b.Get("messages.#.tool_calls").Raw != "[]" {
			return mockllm.Turn{Fault: mockllm.StatusFault(400, "invalid_request_error", "tools are not supported by this model")}
		}
		return mockllm.Turn{Text: script(c)}
	}
}

const twoCallsReply = "Checking both — un instant.\n```tool_calls\n" +
	`[{"name": "lookup_city", "arguments": {"name": "Zürich – Ω 🎉", "limit": 3}}, {"name": "local_time", "arguments": {"tz": "Europe/Москва"}}]` +
	"\n```"

func promptedClientTools(p *openai.ChatCompletionNewParams) {
	p.Model = "txt"
	p.Tools = []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup_city", Description: openai.String("Find a city")}),
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "local_time"}),
	}
}

// TestPromptedClientCallsAreNative: two parallel calls written as a text
// block, split across many chunks, reach the openai-go accumulator as
// native tool calls, streamed and not; the upstream never sees tools.
func TestPromptedClientCallsAreNative(t *testing.T) {
	t.Parallel()
	h := newHarness(t, promptedConfig, mockllm.Options{
		Respond:  textOnly(func(*mockllm.Call) string { return twoCallsReply }),
		Chunking: mockllm.Chunking{TextRunes: 3, SplitWrites: true},
	})
	schema := wiretest.LoadSchema(t)
	want := [][2]string{{"lookup_city", `{"name":"Zürich – Ω 🎉","limit":3}`}, {"local_time", `{"tz":"Europe/Москва"}`}}
	check := func(form string, msg openai.ChatCompletionMessage, finish string) {
		t.Helper()
		if finish != "tool_calls" || len(msg.ToolCalls) != 2 {
			t.Fatalf("%s: finish %q calls %+v", form, finish, msg.ToolCalls)
		}
		if msg.Content != "Checking both — un instant.\n" {
			t.Errorf("%s: content %q", form, msg.Content)
		}
		for i, w := range want {
			c := msg.ToolCalls[i]
			if c.Function.Name != w[0] || c.Function.Arguments != w[1] || !strings.HasPrefix(c.ID, "call_") {
				t.Errorf("%s: call %d = %+v", form, i, c)
			}
		}
	}
	p := userMsg("weather and time?")
	promptedClientTools(&p)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: true}, schema)
	if err != nil {
		t.Fatal(err)
	}
	check("stream", acc.Choices[0].Message, acc.Choices[0].FinishReason)
	if sum.FinishReason != "tool_calls" || acc.Usage.TotalTokens == 0 {
		t.Errorf("summary finish %q usage %+v", sum.FinishReason, acc.Usage)
	}

	p = userMsg("weather and time?")
	promptedClientTools(&p)
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	check("json", resp.Choices[0].Message, resp.Choices[0].FinishReason)
	raw, _ := h.lastRaw()
	if err := schema.Completion(raw); err != nil {
		t.Fatalf("completion: %v\n%s", err, raw)
	}
	up := h.mock.Requests()[0].Body
	if sys := gjson.GetBytes(up, "messages.0"); sys.Get("role").Str != "system" || !strings.Contains(sys.Get("content").Str, `{"name":"lookup_city","description":"Find a city"`) ||
		!strings.Contains(sys.Get("content").Str, "```tool_calls") {
		t.Errorf("upstream system message %s", sys.Raw)
	}
}

// TestPromptedTextAnswer: a reply without a block is a plain answer, and
// text that only looks like a fence start is shown.
func TestPromptedTextAnswer(t *testing.T) {
	t.Parallel()
	const answer = "No tool needed: ``x`` and ```go\nfmt.Println()\n```"
	h := newHarness(t, promptedConfig, mockllm.Options{
		Respond:  textOnly(func(*mockllm.Call) string { return answer }),
		Chunking: mockllm.Chunking{TextRunes: 2},
	})
	schema := wiretest.LoadSchema(t)
	p := userMsg("hello")
	promptedClientTools(&p)
	acc, sum, err := h.streamChat(p, wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != answer || sum.FinishReason != "stop" || len(acc.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("content %q finish %q", acc.Choices[0].Message.Content, sum.FinishReason)
	}
}

// TestPromptedServerToolLoop: the model calls the gateway's calculator in
// text; the loop runs it, renders the call and its result into the next
// round's transcript, and the model answers from it.
func TestPromptedServerToolLoop(t *testing.T) {
	t.Parallel()
	h := newHarness(t, promptedConfig, mockllm.Options{
		Respond: textOnly(func(c *mockllm.Call) string {
			if strings.HasPrefix(c.LastText, "Tool results:") {
				return "The answer is " + strings.TrimSpace(c.LastText[strings.LastIndex(c.LastText, "\n"):])
			}
			return "```tool_calls\n{\"name\":\"calculator\",\"arguments\":{\"expression\":\"6*7\"}}\n```"
		}),
		Chunking: mockllm.Chunking{TextRunes: 4},
	})
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{true, false} {
		p := userMsg("what is 6*7?")
		p.Model = "txt"
		content := h.message(p, stream, schema).Content
		if !strings.Contains(content, "The answer is") || !strings.Contains(content, "42") {
			t.Errorf("stream %v: content %q", stream, content)
		}
	}
	reqs := h.mock.Requests()
	second := gjson.GetBytes(reqs[1].Body, "messages")
	n := len(second.Array())
	asst, res := second.Get(itoa(n-2)), second.Get(itoa(n-1))
	if asst.Get("role").Str != "assistant" || !strings.Contains(asst.Get("content").Str, "```tool_calls\n[{\"name\": \"calculator\", \"arguments\": {\"expression\":\"6*7\"}}]\n```") {
		t.Errorf("rendered call %s", asst.Raw)
	}
	if res.Get("role").Str != "user" || !strings.HasPrefix(res.Get("content").Str, "Tool results:\n\n### calculator (call_") {
		t.Errorf("rendered result %s", res.Raw)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestPromptedHistoryRendered: a follow-up carrying the client's own calls
// and results reaches the upstream as a consistent text transcript.
func TestPromptedHistoryRendered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, promptedConfig, mockllm.Options{Respond: textOnly(func(*mockllm.Call) string { return "It is sunny." })})
	body := `{"model":"txt","messages":[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup_city","arguments":"{\"name\":\"Oslo\"}"}},{"id":"c2","type":"function","function":{"name":"local_time","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"sunny"},
		{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"noon"}]}],
		"tools":[{"type":"function","function":{"name":"lookup_city"}},{"type":"function","function":{"name":"local_time"}}]}`
	status, _, out := h.post("/chat/completions", body, nil)
	if status != 200 || gjson.GetBytes(out, "choices.0.message.content").Str != "It is sunny." {
		t.Fatalf("%d %s", status, out)
	}
	msgs := gjson.GetBytes(h.mock.Requests()[0].Body, "messages").Array()
	if len(msgs) != 4 {
		t.Fatalf("upstream messages %v", msgs)
	}
	if !strings.HasPrefix(msgs[0].Get("content").Str, "Be brief.\n\nYou can call tools.") {
		t.Errorf("system %q", msgs[0].Get("content").Str)
	}
	wantCall := "```tool_calls\n[{\"name\": \"lookup_city\", \"arguments\": {\"name\":\"Oslo\"}}, {\"name\": \"local_time\", \"arguments\": {}}]\n```"
	if msgs[2].Get("content").Str != wantCall {
		t.Errorf("assistant %q", msgs[2].Get("content").Str)
	}
	if msgs[3].Get("content").Str != "Tool results:\n\n### lookup_city (c1)\nsunny\n\n### local_time (c2)\nnoon" {
		t.Errorf("results %q", msgs[3].Get("content").Str)
	}
}

// TestPromptedMalformedBlockRecovers: a malformed block goes back to the
// model as an error result naming the problem; its corrected block
// becomes the calls, and the stream never breaks. Past
// max_consecutive_errors the text is the answer. The text a stream showed
// before a malformed block stays shown, and the JSON answer has it too.
func TestPromptedMalformedBlockRecovers(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		h := newHarness(t, promptedConfig, mockllm.Options{
			Respond: textOnly(func(c *mockllm.Call) string {
				if strings.Contains(c.LastText, "could not be used") {
					return "```tool_calls\n[{\"name\":\"local_time\",\"arguments\":{\"tz\":\"UTC\"}}]\n```"
				}
				return "Sure.\n```tool_calls\n[{\"name\":\"local_time\",\"arguments\":{\"tz\":\"UTC\"}\n```"
			}),
			Chunking: mockllm.Chunking{TextRunes: 5},
		})
		schema := wiretest.LoadSchema(t)
		p := userMsg("time?")
		promptedClientTools(&p)
		msg := h.message(p, stream, schema)
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Arguments != `{"tz":"UTC"}` || msg.Content != "Sure.\n" {
			t.Fatalf("stream %v: content %q, calls %s", stream, msg.Content, msg.JSON.ToolCalls.Raw())
		}
		reqs := h.mock.Requests()
		if len(reqs) != 2 {
			t.Fatalf("stream %v: %d upstream calls", stream, len(reqs))
		}
		last := gjson.GetBytes(reqs[1].Body, "messages.@reverse.0.content").Str
		if !strings.Contains(last, "not valid JSON") {
			t.Errorf("stream %v: error result %q", stream, last)
		}
	}

	// Always malformed: two re-asks (max_consecutive_errors = 2), then the text.
	const bad = "Hmm.\n```tool_calls\n{oops}\n```"
	h := newHarness(t, promptedConfig, mockllm.Options{Respond: textOnly(func(*mockllm.Call) string { return bad })})
	schema := wiretest.LoadSchema(t)
	p := userMsg("time?")
	promptedClientTools(&p)
	acc, sum, err := h.streamChat(p, wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(h.mock.Requests()); n != 3 || sum.FinishReason != "stop" || !strings.HasSuffix(acc.Choices[0].Message.Content, bad) {
		t.Errorf("%d calls, finish %q, content %q", n, sum.FinishReason, acc.Choices[0].Message.Content)
	}
	if msg := h.message(p, false, schema); msg.Content != acc.Choices[0].Message.Content {
		t.Errorf("JSON content %q, streamed %q", msg.Content, acc.Choices[0].Message.Content)
	}
}

// TestPromptedToolChoiceEnforced: tool_choice "required" re-asks once
// after a plain answer, and fails after a second one.
func TestPromptedToolChoiceEnforced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, promptedConfig, mockllm.Options{Respond: textOnly(func(c *mockllm.Call) string {
		if strings.Contains(c.LastText, "You must call") && strings.Contains(c.LastText, "local_time") {
			return "```tool_calls\n[{\"name\":\"local_time\",\"arguments\":{}}]\n```"
		}
		return "I'd rather just chat."
	})})
	schema := wiretest.LoadSchema(t)
	p := userMsg("time?")
	promptedClientTools(&p)
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "local_time"}}}
	acc, _, err := h.streamChat(p, wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if m := acc.Choices[0].Message; len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "local_time" || m.Content != "" {
		t.Errorf("named: %+v", m)
	}
	if !strings.Contains(gjson.GetBytes(h.mock.Requests()[0].Body, "messages.0.content").Str, `You must call the tool "local_time"`) {
		t.Error("the prompt does not ask for the named tool")
	}

	p = userMsg("time?")
	promptedClientTools(&p)
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	_, err = h.client.Chat.Completions.New(context.Background(), p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || apiErr.Code != "tool_choice_unmet" {
		t.Fatalf("required, never called: %v", err)
	}
	raw, _ := h.lastRaw()
	if err := schema.ErrorBody(raw); err != nil {
		t.Fatal(err)
	}

	// A named function that is not among the tools is the client's
	// mistake: a 400 naming tool_choice, before any model call (no reply
	// could meet it; it was a 502 after two).
	calls := len(h.mock.Requests())
	p = userMsg("time?")
	promptedClientTools(&p)
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "no_such_tool"}}}
	_, err = h.client.Chat.Completions.New(context.Background(), p)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "tool_choice" {
		t.Fatalf("unknown named tool: %v", err)
	}
	if n := len(h.mock.Requests()); n != calls {
		t.Fatalf("the model was called %d times for it", n-calls)
	}
}

// TestPromptedJSONSchemaFormat: prompted_format = "json_schema" asks for
// structured output and reads calls and answers from it.
func TestPromptedJSONSchemaFormat(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(promptedConfig, `tool_calling = "prompted"`, "tool_calling = \"prompted\"\nprompted_format = \"json_schema\"", 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: textOnly(func(c *mockllm.Call) string {
		if !gjson.GetBytes(c.Body, "response_format.json_schema.schema").IsObject() {
			return "no schema asked for"
		}
		if c.LastText == "answer" {
			return `{"thought":"easy","answer":"Plain answer ✓"}`
		}
		return `{"thought":"need tools","calls":[{"name":"lookup_city","arguments":{"name":"Köln"}}]}`
	}), Chunking: mockllm.Chunking{TextRunes: 3}})
	schema := wiretest.LoadSchema(t)
	p := userMsg("city")
	promptedClientTools(&p)
	acc, sum, err := h.streamChat(p, wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if m := acc.Choices[0].Message; sum.FinishReason != "tool_calls" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"name":"Köln"}` {
		t.Errorf("calls: %+v", m)
	}
	p = userMsg("answer")
	promptedClientTools(&p)
	acc, _, err = h.streamChat(p, wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "Plain answer ✓" {
		t.Errorf("answer %q", acc.Choices[0].Message.Content)
	}
}

// promptedNodeResponder is nodeResponder in the text protocol: the
// calculator (a server tool) first, then the client's get_weather, then an
// answer with both results.
func promptedNodeResponder(c *mockllm.Call) string {
	switch {
	case !strings.HasPrefix(c.LastText, "Tool results:"):
		return "```tool_calls\n[{\"name\":\"calculator\",\"arguments\":{\"expression\":\"6*7\"}}]\n```"
	case strings.Contains(c.LastText, "temp_c"):
		return "6*7=42 and Oslo: " + c.LastText
	default:
		return "Now the weather.\n```tool_calls\n[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}]\n```"
	}
}

// TestPromptedNodeSDK runs test/node/toolloop.mjs against the prompted
// model: the openai npm package's stream() helper and runTools() see
// native calls of a model that only writes text.
func TestPromptedNodeSDK(t *testing.T) {
	t.Parallel()
	skipWithoutNode(t)
	h := newHarness(t, promptedConfig, mockllm.Options{Respond: textOnly(promptedNodeResponder), Chunking: mockllm.Chunking{TextRunes: 3}})
	out := runNode(t, "toolloop.mjs", "GATEWAY_BASE_URL="+h.base, "GATEWAY_MODEL=txt")
	if !strings.Contains(out, "stream: ok") || !strings.Contains(out, "runTools: ok") {
		t.Fatalf("node output: %s", out)
	}
}

// TestPromptedDemoModel is the README example: the demo model prompted
// for tools in text calls the builtin calculator, and the loop runs it.
func TestPromptedDemoModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
[[providers]]
name = "demo"
kind = "mock"
[[models]]
name = "demo-text"
provider = "demo"
tool_calling = "prompted"
[[tools]]
name = "calculator"
kind = "builtin"
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"]}'
`, mockllm.Options{})
	p := userMsg("what is 2 + 3*4?")
	p.Model = "demo-text"
	acc, _, err := h.streamChat(p, wiretest.Options{}, wiretest.LoadSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	if c := acc.Choices[0].Message.Content; !strings.Contains(c, "Let me use a tool.\n") || !strings.Contains(c, `\"result\":14`) && !strings.Contains(c, `"result":14`) {
		t.Errorf("content %q", c)
	}
}

// message sends p streamed (through streamChat's checks) or not and
// returns the answer's message.
func (h *harness) message(p openai.ChatCompletionNewParams, stream bool, schema *wiretest.Schema) openai.ChatCompletionMessage {
	h.t.Helper()
	if stream {
		acc, _, err := h.streamChat(p, wiretest.Options{}, schema)
		if err != nil {
			h.t.Fatal(err)
		}
		return acc.Choices[0].Message
	}
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Choices[0].Message
}

// A prompted model that writes a call block in the loop's forced final
// round (tool_choice "none", the tools no longer described) ends its answer
// as a native model's does: the call is not run, it is not shown as text,
// and finish_reason is "length", in JSON and stream alike.
func TestPromptedFinalRoundCallsEndWithLength(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(promptedConfig, "[tool_loop]", "[tool_loop]\nmax_iterations = 2", 1)
	h := newHarness(t, cfg, mockllm.Options{
		Respond: textOnly(func(c *mockllm.Call) string {
			return "Once more.\n```tool_calls\n{\"name\":\"calculator\",\"arguments\":{\"expression\":\"1+1\"}}\n```"
		}),
		Chunking: mockllm.Chunking{TextRunes: 5},
	})
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{false, true} {
		p := userMsg("loop forever")
		p.Model = "txt"
		var finish, content string
		var calls int
		if stream {
			acc, _, err := h.streamChat(p, wiretest.Options{}, schema)
			if err != nil {
				t.Fatal(err)
			}
			c := acc.Choices[0]
			finish, content, calls = c.FinishReason, c.Message.Content, len(c.Message.ToolCalls)
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			c := resp.Choices[0]
			finish, content, calls = c.FinishReason, c.Message.Content, len(c.Message.ToolCalls)
		}
		if finish != "length" || calls != 0 || strings.Contains(content, "tool_calls") || strings.Contains(content, "calculator") {
			t.Errorf("stream %v: finish %q calls %d content %q, want the block dropped and length", stream, finish, calls, content)
		}
	}
}

// A prompted model's re-asks (a malformed block sent back to it) are model
// calls: counted against tool_loop.max_model_calls, never taking the call
// kept for the final answer, and listed on their round in x_gateway. Four
// upstream calls were made for a limit of 2 (one plus three re-asks), and
// the trace showed one.
func TestPromptedReasksCountAsModelCalls(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(promptedConfig, "max_consecutive_errors = 2", "max_consecutive_errors = 3\nmax_model_calls = 3", 1)
	const malformed = "Pre.\n```tool_calls\n[{\"name\":\"calculator\"\n```"
	h := newHarness(t, cfg, mockllm.Options{Respond: textOnly(func(*mockllm.Call) string { return malformed })})
	p := userMsg("compute")
	p.Model = "txt"
	trace := option.WithHeader("x-gateway-tool-trace", "1")
	for _, stream := range []bool{false, true} {
		h.mock.ResetRecords()
		var content string
		var xg gjson.Result
		if stream {
			acc, sum, err := h.streamChat(p, wiretest.Options{}, wiretest.LoadSchema(t), trace)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			content, xg = acc.Choices[0].Message.Content, gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway")
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), p, trace)
			if err != nil {
				t.Fatalf("json: %v", err)
			}
			raw, _ := h.lastRaw()
			content, xg = resp.Choices[0].Message.Content, gjson.GetBytes(raw, "x_gateway")
		}
		// The round's call, one re-ask (which leaves the last call), and
		// the reply taken as the answer.
		if n := h.mock.Calls("txt-model"); n != 2 {
			t.Errorf("stream %v: %d upstream calls, want 2 (max_model_calls 3, one kept)", stream, n)
		}
		if !strings.Contains(content, "Pre.") {
			t.Errorf("stream %v: content %q", stream, content)
		}
		if r := xg.Get("rounds"); r.Get("#").Int() != 1 || r.Get("0.reasks").Int() != 1 {
			t.Errorf("stream %v: rounds %s", stream, r.Raw)
		}
	}
}

// TestPromptedAnthropicKeepsCacheBreakpoints: a prompted model on an
// Anthropic provider gets the prompt cache's breakpoints on the body the
// upstream receives: the system block that holds the tool prompt (the
// tools' descriptions, the largest stable prefix), and in a later loop
// round the message of rendered results. A probe found neither: the
// breakpoints were placed on the tools and tool messages the prompted
// rewrite replaces.
func TestPromptedAnthropicKeepsCacheBreakpoints(t *testing.T) {
	t.Parallel()
	h := newHarness(t, anthropicConfig+`
[[models]]
name = "claude-txt"
provider = "claude"
upstream = "claude-old"
tool_calling = "prompted"
`, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if strings.HasPrefix(c.LastText, "Tool results:") {
			return mockllm.Turn{Text: "The answer is 42."}
		}
		return mockllm.Turn{Text: "```tool_calls\n{\"name\":\"calculator\",\"arguments\":{\"expression\":\"6*7\"}}\n```"}
	}})
	p := claudeMsg("claude-txt", "what is 6*7?")
	if got := h.message(p, false, nil).Content; got != "The answer is 42." {
		t.Fatalf("content %q", got)
	}
	reqs := messagesRequests(h)
	if len(reqs) != 2 {
		t.Fatalf("%d upstream calls, want 2", len(reqs))
	}
	sys := gjson.GetBytes(reqs[0].Body, "system")
	last := sys.Get(itoa(len(sys.Array()) - 1))
	if !strings.Contains(last.Get("text").Str, "You can call tools") || !last.Get("cache_control").IsObject() {
		t.Errorf("first round's system blocks %s: the tool prompt's block has no cache_control", sys.Raw)
	}
	msgs := gjson.GetBytes(reqs[1].Body, "messages")
	lastMsg := msgs.Get(itoa(len(msgs.Array()) - 1))
	if !strings.Contains(lastMsg.Raw, "Tool results:") || !strings.Contains(lastMsg.Raw, `"cache_control"`) {
		t.Errorf("second round's last message %s has no cache_control", lastMsg.Raw)
	}
}
