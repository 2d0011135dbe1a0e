package gateway

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// loopLimitsConfig has two builtin tools and an agent tool whose model falls
// back to a second expert; {{LIMITS}} is replaced by each test's limits.
const loopLimitsConfig = baseConfig + `
[[models]]
name = "expert"
provider = "up"
upstream = "up-expert"
fallbacks = ["expert2"]
[[models]]
name = "expert2"
provider = "up"
upstream = "up-expert2"
{{LIMITS}}
`

const calcLimited = `
[[tools]]
name = "calculator"
kind = "builtin"
max_calls = 2
`

// limitRun is what one request of a limits test saw.
type limitRun struct {
	content string
	xg      gjson.Result   // x_gateway
	results []string       // the tool results every model call received, in order
	calls   map[string]int // upstream requests by upstream model
}

// runBoth sends the same request as JSON and as a stream (through the SDK
// accumulator and the wire checker) and returns both runs; each starts with
// the mock's recorded requests cleared.
func runBoth(t *testing.T, h *harness, prompt string) map[string]limitRun {
	t.Helper()
	out := map[string]limitRun{}
	trace := option.WithHeader("x-gateway-tool-trace", "1")
	for _, stream := range []bool{false, true} {
		h.mock.ResetRecords()
		var run limitRun
		if stream {
			acc, sum, err := h.streamChat(userMsg(prompt), wiretest.Options{}, wiretest.LoadSchema(t), trace)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			run.content = acc.Choices[0].Message.Content
			run.xg = gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway")
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), userMsg(prompt), trace)
			if err != nil {
				t.Fatalf("json: %v", err)
			}
			raw, _ := h.lastRaw()
			if err := wiretest.LoadSchema(t).Completion(raw); err != nil {
				t.Fatal(err)
			}
			run.content = resp.Choices[0].Message.Content
			run.xg = gjson.GetBytes(raw, "x_gateway")
		}
		run.calls = map[string]int{}
		for _, m := range []string{"up-model", "up-expert", "up-expert2"} {
			run.calls[m] = h.mock.Calls(m)
		}
		reqs := h.mock.Requests()
		if last := reqs[len(reqs)-1]; last.Model == "up-model" {
			for _, r := range gjson.GetBytes(last.Body, `messages.#(role=="tool")#.content`).Array() {
				run.results = append(run.results, r.Str)
			}
		}
		out[map[bool]string{false: "json", true: "stream"}[stream]] = run
	}
	return out
}

// finalAnswer answers the forced final round (tool_choice none) with the
// tool results it got, and otherwise lets calls decide.
func finalAnswer(calls func(c *mockllm.Call, results int) []mockllm.ToolCall) func(*mockllm.Call) mockllm.Turn {
	return func(c *mockllm.Call) mockllm.Turn {
		if c.Model != "up-model" {
			return mockllm.Turn{Text: "expert says: " + c.LastText}
		}
		if gjson.GetBytes(c.Body, "tool_choice").Str == "none" {
			return mockllm.Turn{Text: "final answer"}
		}
		return mockllm.Turn{ToolCalls: calls(c, len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array()))}
	}
}

// checkLimitEnd checks what every limit test expects of the loop's end: the
// limit named in x_gateway.stop_reason, a final round with tool_choice none
// answered, and the budget log line.
func checkLimitEnd(t *testing.T, h *harness, run limitRun, reason string) {
	t.Helper()
	if run.content != "final answer" {
		t.Errorf("content %q, want the final round's answer", run.content)
	}
	if got := run.xg.Get("stop_reason").Str; got != reason {
		t.Errorf("stop_reason %q, want %q (x_gateway %s)", got, reason, run.xg.Raw)
	}
	if !strings.Contains(h.logs.String(), `"reason":"`+reason+`"`) || !strings.Contains(h.logs.String(), "tool loop budget reached") {
		t.Errorf("no budget log line with reason %s:\n%s", reason, h.logs.String())
	}
}

func count(results []string, sub string) int {
	n := 0
	for _, r := range results {
		if strings.Contains(r, sub) {
			n++
		}
	}
	return n
}

// A tool with max_calls = 2 called three times in one turn runs twice; the
// third call gets a limit_reached result naming tools.max_calls and is not
// run. As no server tool can run any more, the next round is the final one.
func TestToolLoopPerToolMaxCalls(t *testing.T) {
	t.Parallel()
	h := newLoggedHarness(t, strings.Replace(loopLimitsConfig, "{{LIMITS}}", calcLimited, 1), mockllm.Options{
		Respond: finalAnswer(func(c *mockllm.Call, results int) []mockllm.ToolCall {
			return []mockllm.ToolCall{
				{Name: "calculator", Arguments: `{"expression":"1+1"}`},
				{Name: "calculator", Arguments: `{"expression":"2+2"}`},
				{Name: "calculator", Arguments: `{"expression":"3+3"}`},
			}
		}),
	})
	for name, run := range runBoth(t, h, "add three times") {
		t.Run(name, func(t *testing.T) {
			if len(run.results) != 3 || !strings.Contains(run.results[0], `"result":2`) || !strings.Contains(run.results[1], `"result":4`) {
				t.Fatalf("the first two calls did not run: %q", run.results)
			}
			if r := run.results[2]; !strings.Contains(r, `"type":"limit_reached"`) || !strings.Contains(r, "tools.max_calls") || strings.Contains(r, `"result"`) {
				t.Fatalf("third call: %s", r)
			}
			if st := run.xg.Get("tool_calls.2.status").Str; st != "error" {
				t.Errorf("trace status of the refused call %q", st)
			}
			checkLimitEnd(t, h, run, "max_calls")
			if n := run.calls["up-model"]; n != 2 {
				t.Errorf("model calls %d, want 2", n)
			}
		})
	}
	if !strings.Contains(h.logs.String(), `"limit":"max_calls"`) {
		t.Errorf("no log line for the refused call:\n%s", h.logs.String())
	}
}

// tool_loop.max_tool_calls counts every server call of the request, across
// rounds: with 3, the second round's second call is refused, and the loop
// ends with a final round.
func TestToolLoopMaxToolCalls(t *testing.T) {
	t.Parallel()
	h := newLoggedHarness(t, strings.Replace(loopLimitsConfig, "{{LIMITS}}", `
[[tools]]
name = "calculator"
kind = "builtin"
[[tools]]
name = "current_time"
kind = "builtin"
[tool_loop]
max_tool_calls = 3
`, 1), mockllm.Options{
		Respond: finalAnswer(func(c *mockllm.Call, results int) []mockllm.ToolCall {
			if results == 0 {
				return []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}, {Name: "calculator", Arguments: `{"expression":"2+2"}`}}
			}
			return []mockllm.ToolCall{{Name: "current_time", Arguments: `{}`}, {Name: "calculator", Arguments: `{"expression":"3+3"}`}}
		}),
	})
	for name, run := range runBoth(t, h, "keep going") {
		t.Run(name, func(t *testing.T) {
			if len(run.results) != 4 || count(run.results[:3], `"status":"ok"`) != 3 {
				t.Fatalf("the first three calls did not all run: %q", run.results)
			}
			if r := run.results[3]; !strings.Contains(r, `"type":"limit_reached"`) || !strings.Contains(r, "tool_loop.max_tool_calls") {
				t.Fatalf("fourth call: %s", r)
			}
			checkLimitEnd(t, h, run, "max_tool_calls")
			if n := run.calls["up-model"]; n != 3 {
				t.Errorf("model calls %d, want 3", n)
			}
		})
	}
	if !strings.Contains(h.logs.String(), `"limit":"max_tool_calls"`) {
		t.Errorf("no log line for the refused call:\n%s", h.logs.String())
	}
}

// tool_loop.max_model_calls counts the agent tool's model calls too, once
// each although each falls back to a second expert (two upstream
// requests). With 4: the first round, two agent calls, and the final round;
// a third agent call is refused, leaving the last call to the answer.
func TestToolLoopMaxModelCalls(t *testing.T) {
	t.Parallel()
	h := newLoggedHarness(t, strings.Replace(loopLimitsConfig, "{{LIMITS}}", `
[[tools]]
name = "ask_expert"
kind = "agent"
model = "expert"
[tool_loop]
max_model_calls = 4
`, 1), mockllm.Options{
		Respond: func(c *mockllm.Call) mockllm.Turn {
			if c.Model == "up-expert" {
				return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "primary expert down")}
			}
			return finalAnswer(func(c *mockllm.Call, results int) []mockllm.ToolCall {
				return []mockllm.ToolCall{
					{Name: "ask_expert", Arguments: `{"instruction":"a"}`},
					{Name: "ask_expert", Arguments: `{"instruction":"b"}`},
					{Name: "ask_expert", Arguments: `{"instruction":"c"}`},
				}
			})(c)
		},
	})
	for name, run := range runBoth(t, h, "ask around") {
		t.Run(name, func(t *testing.T) {
			if len(run.results) != 3 || count(run.results, "expert says") != 2 {
				t.Fatalf("want two expert answers (each call counted once, its fallback included): %q", run.results)
			}
			if count(run.results, `"type":"limit_reached"`) != 1 || count(run.results, "tool_loop.max_model_calls") != 1 {
				t.Fatalf("want one refused agent call: %q", run.results)
			}
			checkLimitEnd(t, h, run, "max_model_calls")
			if n := run.xg.Get("iterations").Int(); n != 2 {
				t.Errorf("loop rounds %d, want 2", n)
			}
			// 2 rounds + 2 agent calls = 4 model calls; each agent call
			// took 2 upstream requests (the primary, then its fallback).
			if c := run.calls; c["up-model"] != 2 || c["up-expert"] != 2 || c["up-expert2"] != 2 {
				t.Errorf("upstream calls %v; want 2 each", c)
			}
		})
	}
}

// The limits are configured: negative and too small values fail at start
// with the key's name.
func TestToolLoopLimitsConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, toml, key string }{
		{"model calls", "[tool_loop]\nmax_model_calls = 1", "tool_loop.max_model_calls"},
		{"tool calls", "[tool_loop]\nmax_tool_calls = -1", "tool_loop.max_tool_calls"},
		{"per tool", "[[tools]]\nname = \"calculator\"\nkind = \"builtin\"\nmax_calls = -2", "tools[0].max_calls"},
		{"system on a builtin", "[[tools]]\nname = \"calculator\"\nkind = \"builtin\"\nsystem = \"x\"", "tools[0].system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(strings.Replace(loopLimitsConfig, "{{LIMITS}}", tc.toml, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("err %v, want one naming %s", err, tc.key)
			}
		})
	}
}

// A summary written by context editing inside a round is a model call of
// the request: with max_model_calls = 3, round 1 and its summary leave one
// call, so round 2 is the final one.
func TestToolLoopMaxModelCallsCountsSummaries(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			t.Parallel()
			var summaries atomic.Int64
			h := newHarness(t, summarizeConfig+"[tool_loop]\nmax_model_calls = 3\n", mockllm.Options{
				Respond: summarizeResponder(&summaries, false), ContextWindow: map[string]int{"up-model": 1000}})
			params := openai.ChatCompletionNewParams{Model: "gpt-x", Messages: longHistory()}
			trace := option.WithHeader("x-gateway-tool-trace", "1")
			var xg gjson.Result
			if stream {
				_, sum, err := h.streamChat(params, wiretest.Options{}, wiretest.LoadSchema(t), trace)
				if err != nil {
					t.Fatal(err)
				}
				xg = gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway")
			} else {
				if _, err := h.client.Chat.Completions.New(context.Background(), params, trace); err != nil {
					t.Fatal(err)
				}
				raw, _ := h.lastRaw()
				xg = gjson.GetBytes(raw, "x_gateway")
			}
			if got := xg.Get("stop_reason").Str; got != "max_model_calls" {
				t.Errorf("stop_reason %q, want max_model_calls (x_gateway %s)", got, xg.Raw)
			}
			reqs := h.mock.Requests()
			if summaries.Load() != 1 || len(reqs) != 3 || gjson.GetBytes(reqs[len(reqs)-1].Body, "tool_choice").Str != "none" {
				t.Errorf("%d summaries, %d upstream calls; want 1 and 3, the last with tool_choice none", summaries.Load(), len(reqs))
			}
		})
	}
}

// "tools": null is no client tools: the loop's limits end it as they do
// without it (a null read as a tool list of one nameless client tool made
// the loop wait for client calls and skip its forced final round).
func TestToolsNullKeepsTheLoopsLimits(t *testing.T) {
	t.Parallel()
	calls := map[string]int{}
	for _, tools := range []string{``, `"tools":null,`} {
		h := newHarness(t, strings.Replace(loopLimitsConfig, "{{LIMITS}}", `
[[tools]]
name = "calculator"
kind = "builtin"
[tool_loop]
max_tool_calls = 3
`, 1), mockllm.Options{
			Respond: finalAnswer(func(c *mockllm.Call, results int) []mockllm.ToolCall {
				return []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}, {Name: "calculator", Arguments: `{"expression":"2+2"}`}}
			}),
		})
		status, _, raw := h.post("/chat/completions", `{"model":"gpt-x",`+tools+`"messages":[{"role":"user","content":"go"}]}`, nil)
		if status != 200 || gjson.GetBytes(raw, "choices.0.message.content").Str != "final answer" {
			t.Fatalf("%q: %d %s", tools, status, raw)
		}
		calls[tools] = h.mock.Calls("up-model")
	}
	if calls[``] != calls[`"tools":null,`] {
		t.Fatalf("upstream calls %v: null tools changed the loop", calls)
	}
}
