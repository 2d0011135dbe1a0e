package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// The parity matrix: every case sends one request as JSON and as a stream
// (with include_usage) and asserts that what an SDK accumulates from the
// stream is the JSON answer (docs/wire.md rule 21): per choice the role,
// content, refusal, tool calls, finish reason and logprobs, and the model,
// system_fingerprint and usage. Cases whose answer the mock cannot write
// (n > 1, logprobs, refusals) run against rawUpstream.

// parityCase is one request and the upstream that answers it.
type parityCase struct {
	name   string
	config string                           // gateway config ({{MOCK}} = the upstream)
	mock   func(*mockllm.Call) mockllm.Turn // the mock's script, or
	raw    func(body []byte) []rawTurn      // a raw upstream's answer, one turn per choice
	chunk  *mockllm.Chunking                // the mock's chunking
	delay  time.Duration                    // the mock's pause between stream events
	params func() openai.ChatCompletionNewParams
	// gatewayIDs: the tool loop names client calls (call_ and random bits),
	// so the two forms' ids differ and only their form is compared.
	gatewayIDs bool
	// cache: each form is asked twice (the second a cache hit), then once
	// in the other form from the first's entry, and all must agree.
	cache bool
	// wantErr: both forms fail; their error type, code and message must agree.
	wantErr bool
}

const parityServerTools = baseConfig + `
[[tools]]
name = "calculator"
kind = "builtin"
[[tools]]
name = "current_time"
kind = "builtin"
[tool_loop]
keepalive_interval = "50ms"
`

const parityFallback = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
retries = 0
[[models]]
name = "gpt-x"
provider = "up"
upstream = "up-model"
context_window = 100000
fallbacks = ["backup"]
[[models]]
name = "backup"
provider = "up"
upstream = "up-backup"
context_window = 100000
[[tools]]
name = "calculator"
kind = "builtin"
[middleware.fallback]
base_backoff = "1ms"
max_backoff = "5ms"
`

// parityAnthropic serves gpt-x through the Anthropic provider (the mock's
// Messages API), with the server tools.
const parityAnthropic = `
[server]
log_level = "warn"
[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{{MOCK}}"
api_key = "sk-ant"
retries = 0
[[models]]
name = "gpt-x"
provider = "claude"
upstream = "claude-x"
context_window = 100000
max_tokens = 300
[[tools]]
name = "calculator"
kind = "builtin"
[tool_loop]
keepalive_interval = "50ms"
`

// parityGuard redacts the answer: a code name, e-mail addresses and
// anything past 60 characters.
const parityGuard = parityServerTools + parityGuardrails

// parityGuardRelay is parityGuard without server tools: a client call's
// chunks come as the upstream sent them, not as the tool loop rebuilds
// them.
const parityGuardRelay = baseConfig + parityGuardrails

const parityGuardrails = `
[[guardrails]]
name = "codename"
stage = "response"
kind = "regex"
action = "redact"
patterns = ['(?i)project\s+falcon']
[[guardrails]]
name = "pii"
stage = "response"
kind = "pii"
action = "redact"
window = 16
[[guardrails]]
name = "short"
stage = "response"
kind = "max_length"
action = "redact"
max_length = 60
`

// parityBlock blocks an answer that names the code name.
const parityBlock = parityServerTools + `
[[guardrails]]
name = "codename"
stage = "response"
kind = "regex"
action = "block"
patterns = ['(?i)project\s+falcon']
`

// parityArgsBreak redacts a match that takes a JSON quote with it: in a
// tool call's arguments the redaction would break their JSON.
const parityArgsBreak = parityServerTools + `
[[guardrails]]
name = "quoted"
stage = "response"
kind = "regex"
action = "redact"
patterns = ['secret"']
`

// parityApproval gates delete_file behind a person's approval (its server
// is never called: the call is handed out).
const parityApproval = parityServerTools + `
[[tools]]
name = "delete_file"
kind = "http"
url = "http://127.0.0.1:9/never"
approval = "always"
parameters = '{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}'
`

func parityUsage(p, c int) *mockllm.Usage {
	return &mockllm.Usage{Prompt: p, Completion: c, Cached: p / 4}
}

// toolRounds counts the tool results in a request (chat tool messages, or
// the Messages API's tool_result blocks).
func toolRounds(body []byte) int {
	return len(gjson.GetBytes(body, `messages.#(role=="tool")#`).Array()) + strings.Count(string(body), `"type":"tool_result"`)
}

func withClientTools(p openai.ChatCompletionNewParams) openai.ChatCompletionNewParams {
	p.Tools = toolParams().Tools
	return p
}

func parityCases() []parityCase {
	base := func() openai.ChatCompletionNewParams { return userMsg("hello there") }
	calc := func(expr string) mockllm.ToolCall {
		return mockllm.ToolCall{Name: "calculator", Arguments: `{"expression":"` + expr + `"}`}
	}
	// serverRounds: rounds-1 rounds that write text and call the calculator
	// (and current_time in the first), then an answer.
	serverRounds := func(rounds int) func(*mockllm.Call) mockllm.Turn {
		return func(c *mockllm.Call) mockllm.Turn {
			n := toolRounds(c.Body)
			u := parityUsage(100+10*n, 7)
			switch {
			case n == 0 && rounds > 1:
				return mockllm.Turn{Text: "Let me compute. ", ToolCalls: []mockllm.ToolCall{calc("6*7"), {Name: "current_time", Arguments: `{}`}}, Usage: u}
			case n > 0 && n < rounds:
				return mockllm.Turn{Text: "One more. ", ToolCalls: []mockllm.ToolCall{calc("1+1")}, Usage: u}
			}
			return mockllm.Turn{Text: "The answer is 42 — ünïcødé.", Usage: u}
		}
	}
	lpText := func(texts ...string) func([]byte) []rawTurn {
		return func([]byte) []rawTurn {
			var ts []rawTurn
			for _, s := range texts {
				ts = append(ts, rawTurn{tokens: strings.SplitAfter(s, " "), logprobs: true, usage: [2]int{9, 5}})
			}
			return ts
		}
	}
	withLogprobs := func(p openai.ChatCompletionNewParams) openai.ChatCompletionNewParams {
		p.Logprobs = openai.Bool(true)
		p.TopLogprobs = openai.Int(2)
		return p
	}
	return []parityCase{
		{name: "plain", config: baseConfig, params: base,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Hello, wörld! A plain answer.", Usage: parityUsage(12, 8)}
			}},
		{name: "n2 logprobs", config: baseConfig,
			params: func() openai.ChatCompletionNewParams { p := withLogprobs(base()); p.N = openai.Int(2); return p },
			raw:    lpText("first choice text", "the second choice")},
		{name: "logprobs client tools offered", config: baseConfig,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(withClientTools(base())) },
			raw:    lpText("no tool needed here")},
		{name: "logprobs server tool rounds", config: parityServerTools,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{tokens: []string{"Let ", "me ", "see. "}, logprobs: true, usage: [2]int{20, 6},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{tokens: []string{"It ", "is ", "42."}, logprobs: true, usage: [2]int{30, 4}}}
			}},
		{name: "refusal", config: baseConfig, params: base,
			raw: func([]byte) []rawTurn {
				return []rawTurn{{refusal: []string{"I can't ", "help with ", "that."}, logprobs: true, usage: [2]int{9, 4}}}
			}},
		{name: "refusal client tools offered", config: baseConfig,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(withClientTools(base())) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{refusal: []string{"I can't ", "help with ", "that."}, logprobs: true, usage: [2]int{9, 4}}}
			}},
		{name: "refusal server tools", config: parityServerTools, params: base,
			raw: func([]byte) []rawTurn {
				return []rawTurn{{refusal: []string{"I can't ", "help."}, usage: [2]int{9, 4}}}
			}},
		{name: "client parallel calls", config: baseConfig, chunk: &mockllm.Chunking{ArgBytes: 3},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Looking up.", Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{ID: "call_a", Name: "lookup_city", Arguments: `{"name":"Zürich","country":"CH"}`},
					{ID: "call_b", Name: "local_time", Arguments: `{"tz":"Europe/Zurich"}`},
				}}
			}},
		{name: "server loop 1 round", config: parityServerTools, params: base, mock: serverRounds(1)},
		{name: "server loop 2 rounds", config: parityServerTools, params: base, mock: serverRounds(2)},
		{name: "server loop 3 rounds", config: parityServerTools, params: base, mock: serverRounds(3)},
		{name: "server and client call in one round", config: parityServerTools, gatewayIDs: true,
			chunk:  &mockllm.Chunking{ArgBytes: 4},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(c *mockllm.Call) mockllm.Turn {
				u := parityUsage(50+toolRounds(c.Body), 9)
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Checking both. ", Usage: u, ToolCalls: []mockllm.ToolCall{
						calc("2+3"), {Name: "lookup_city", Arguments: `{"name":"Bern"}`}, {Name: "local_time", Arguments: `{"tz":"CET"}`},
					}}
				}
				return mockllm.Turn{Text: "unexpected round", Usage: u}
			}},
		{name: "server round then client call", config: parityServerTools, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(c *mockllm.Call) mockllm.Turn {
				u := parityUsage(60+toolRounds(c.Body), 11)
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "First. ", Usage: u, ToolCalls: []mockllm.ToolCall{calc("2+3")}}
				}
				return mockllm.Turn{Text: "Now yours.", Usage: u, ToolCalls: []mockllm.ToolCall{{Name: "lookup_city", Arguments: `{"name":"Bern"}`}}}
			}},
		{name: "fallback before first byte", config: parityFallback, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if c.Model == "up-model" {
					return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "overloaded")}
				}
				return mockllm.Turn{Text: "backup answer", Usage: parityUsage(14, 3)}
			}},
		{name: "fallback in server loop", config: parityFallback, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if c.Model == "up-model" && toolRounds(c.Body) == 1 {
					return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "boom")}
				}
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "done by " + c.Model, Usage: parityUsage(30, 5)}
			}},
		{name: "cache hit plain", config: cacheConfig, cache: true,
			params: func() openai.ChatCompletionNewParams { return det("cache me") },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "cached answer ünïcødé 🎉 " + strings.Repeat("lorem ", 20), Usage: parityUsage(12, 30)}
			}},
		// current_time marked idempotent: an answer a volatile tool took
		// part in is never stored (TestCacheStoresNoAnswerOfAVolatileTool).
		{name: "cache hit server loop", config: strings.NewReplacer("[tool_loop]", "[middleware.cache]\nenabled = true\n[tool_loop]",
			"name = \"current_time\"\nkind = \"builtin\"", "name = \"current_time\"\nkind = \"builtin\"\nidempotent = true").Replace(parityServerTools), cache: true,
			params: func() openai.ChatCompletionNewParams { return det("cache me") },
			mock:   serverRounds(2)},
		{name: "cache hit length", config: cacheConfig, cache: true,
			params: func() openai.ChatCompletionNewParams { p := det("cache me"); p.MaxTokens = openai.Int(5); return p },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "cut off in the mid", FinishReason: "length", Usage: parityUsage(10, 5)}
			}},
		{name: "cache hit client calls", config: cacheConfig + "tool_calls = true\n", cache: true, chunk: &mockllm.Chunking{ArgBytes: 3},
			params: func() openai.ChatCompletionNewParams { return withClientTools(det("cache me")) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Looking up.", Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{ID: "call_a", Name: "lookup_city", Arguments: `{"name":"Zürich","country":"CH"}`},
					{ID: "call_b", Name: "local_time", Arguments: `{"tz":"Europe/Zurich"}`},
				}}
			}},
		{name: "json_object with server tools", config: parityServerTools,
			params: func() openai.ChatCompletionNewParams {
				p := base()
				p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
				return p
			},
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "{\"thinking\":true}", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: `{"answer":42}`, Usage: parityUsage(30, 5)}
			}},
		{name: "max_tokens length", config: baseConfig,
			params: func() openai.ChatCompletionNewParams { p := base(); p.MaxTokens = openai.Int(5); return p },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "cut off in the mid", FinishReason: "length", Usage: parityUsage(10, 5)}
			}},
		{name: "max_tokens length server loop", config: parityServerTools,
			params: func() openai.ChatCompletionNewParams { p := base(); p.MaxTokens = openai.Int(5); return p },
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "The answer is", FinishReason: "length", Usage: parityUsage(30, 5)}
			}},
		{name: "max_tokens length client call", config: baseConfig,
			params: func() openai.ChatCompletionNewParams {
				p := withClientTools(base())
				p.MaxTokens = openai.Int(5)
				return p
			},
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{ID: "call_cut", Name: "lookup_city", Arguments: `{"na`}}, FinishReason: "length", Usage: parityUsage(10, 5)}
			}},
		{name: "content_filter", config: baseConfig, params: base,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Part of an", FinishReason: "content_filter", Usage: parityUsage(10, 3)}
			}},
		{name: "content_filter server loop", config: parityServerTools, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "Part of", FinishReason: "content_filter", Usage: parityUsage(30, 2)}
			}},
		{name: "cache hit usage details", config: cacheConfig, cache: true,
			params: func() openai.ChatCompletionNewParams { return det("cache me") },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: []string{"cached ", "with ", "details"}, usage: [2]int{9, 4}}}
			}},
		{name: "whitespace before server call logprobs", config: parityServerTools,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{tokens: []string{"\n", " "}, logprobs: true, usage: [2]int{20, 6},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{tokens: []string{"It ", "is ", "42."}, logprobs: true, usage: [2]int{30, 4}}}
			}},
		{name: "refusal after server round", config: parityServerTools,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{tokens: []string{"Let ", "me ", "see. "}, logprobs: true, usage: [2]int{20, 6},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{refusal: []string{"I can't ", "say."}, logprobs: true, usage: [2]int{30, 4}}}
			}},
		{name: "logprobs server round then client call", config: parityServerTools, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(withClientTools(base())) },
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{tokens: []string{"Let ", "me ", "see. "}, logprobs: true, usage: [2]int{20, 6},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{tokens: []string{"Now ", "yours."}, logprobs: true, usage: [2]int{30, 4},
					calls: []rawCall{{"call_c1", "lookup_city", `{"name":"Bern"}`}, {"call_c2", "local_time", `{}`}}}}
			}},
		{name: "n2 client calls", config: baseConfig,
			params: func() openai.ChatCompletionNewParams { p := withClientTools(base()); p.N = openai.Int(2); return p },
			raw: func([]byte) []rawTurn {
				return []rawTurn{
					{tokens: []string{"one"}, usage: [2]int{9, 4}, calls: []rawCall{{"call_x1", "lookup_city", `{"name":"Bern"}`}}},
					{usage: [2]int{9, 4}, calls: []rawCall{{"call_y1", "local_time", `{"tz":"CET"}`}, {"call_y2", "lookup_city", `{}`}}},
				}
			}},
		{name: "whole and interleaved client calls", config: baseConfig, chunk: &mockllm.Chunking{ArgBytes: 2, InterleaveToolCalls: true},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{ID: "call_a", Name: "lookup_city", Arguments: `{"name":"Zürich"}`},
					{ID: "call_b", Name: "local_time", Arguments: `{"tz":"Europe/Zurich"}`},
				}}
			}},
		{name: "server call cut by length with client call", config: parityServerTools, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Both. ", FinishReason: "length", Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					calc("1+1"), {Name: "lookup_city", Arguments: `{"name":"Be`},
				}}
			}},
		{name: "empty answer after server round", config: parityServerTools, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing.", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Usage: parityUsage(30, 1)}
			}},
		{name: "anthropic plain", config: parityAnthropic, params: base,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Hi there, ünïcode 🌍", Usage: &mockllm.Usage{Prompt: 40, Completion: 9, Cached: 10, CacheWrite: 5}}
			}},
		{name: "anthropic thinking", config: parityAnthropic, params: base,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Thinking: "Let me think.", Text: "Thought it through.", Usage: &mockllm.Usage{Prompt: 40, Completion: 9}}
			}},
		{name: "anthropic client calls", config: parityAnthropic, gatewayIDs: true, chunk: &mockllm.Chunking{ArgBytes: 3},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Looking up.", Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{ID: "toolu_a", Name: "lookup_city", Arguments: `{"name":"Zürich"}`},
					{ID: "toolu_b", Name: "local_time", Arguments: `{"tz":"CET"}`},
				}}
			}},
		{name: "anthropic server loop", config: parityAnthropic, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				u := &mockllm.Usage{Prompt: 40 + toolRounds(c.Body), Completion: 9, Cached: 10, CacheWrite: 5}
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: u}
				}
				return mockllm.Turn{Text: "It is 42.", Usage: u}
			}},
		{name: "anthropic max_tokens", config: parityAnthropic,
			params: func() openai.ChatCompletionNewParams { p := base(); p.MaxTokens = openai.Int(5); return p },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "cut off in the mid", FinishReason: "length", Usage: parityUsage(10, 5)}
			}},
		{name: "anthropic refusal", config: parityAnthropic, params: base,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "I won't", FinishReason: "content_filter", Usage: parityUsage(10, 5)}
			}},
		{name: "usage cache write", config: baseConfig, params: base,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "written", Usage: &mockllm.Usage{Prompt: 40, Completion: 9, Cached: 10, CacheWrite: 5}}
			}},
		{name: "usage cache write server loop", config: parityServerTools, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				u := &mockllm.Usage{Prompt: 40 + toolRounds(c.Body), Completion: 9, Cached: 10, CacheWrite: 5}
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: u}
				}
				return mockllm.Turn{Text: "It is 42.", Usage: u}
			}},
		{name: "guardrail redact text", config: parityGuard, chunk: &mockllm.Chunking{TextRunes: 3}, params: base,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Project  Falcon mail bob@example.com now", Usage: parityUsage(10, 5)}
			}},
		{name: "guardrail max_length over rounds", config: parityGuard, chunk: &mockllm.Chunking{TextRunes: 5}, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing the thing you asked for, mail bob@example.com. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "It is 42, and that is the full and final answer to it all.", Usage: parityUsage(30, 5)}
			}},
		{name: "guardrail redact client call", config: parityGuard, gatewayIDs: true, chunk: &mockllm.Chunking{ArgBytes: 3},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Mail bob@example.com.", Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{Name: "lookup_city", Arguments: `{"name":"project falcon","mail":"bob@example.com"}`},
				}}
			}},
		{name: "guardrail redact refusal", config: parityGuard, params: base,
			raw: func([]byte) []rawTurn {
				return []rawTurn{{refusal: []string{"No, bob@exa", "mple.com, about ", "Project Falcon."}, usage: [2]int{9, 4}}}
			}},
		{name: "prompted client calls", config: promptedConfig, chunk: &mockllm.Chunking{TextRunes: 3}, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { p := base(); promptedClientTools(&p); return p },
			mock: func(c *mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: twoCallsReply, Usage: parityUsage(30, 20)}
			}},
		{name: "prompted server loop", config: promptedConfig, chunk: &mockllm.Chunking{TextRunes: 3},
			params: func() openai.ChatCompletionNewParams { p := base(); p.Model = "txt"; return p },
			mock: func(c *mockllm.Call) mockllm.Turn {
				if !strings.Contains(string(c.Body), "42") {
					return mockllm.Turn{Text: "Let me compute.\n```tool_calls\n[{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6*7\"}}]\n```", Usage: parityUsage(30, 20)}
				}
				return mockllm.Turn{Text: "It is 42.", Usage: parityUsage(40, 5)}
			}},
		{name: "reasoning plain", config: baseConfig, params: base,
			raw: func([]byte) []rawTurn {
				return []rawTurn{{reason: []string{"Hmm, ", "let me think."}, tokens: []string{"Done."}, usage: [2]int{9, 4}}}
			}},
		{name: "reasoning client tools offered", config: baseConfig,
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{reason: []string{"Hmm, ", "let me think."}, tokens: []string{"Calling."}, usage: [2]int{9, 4},
					calls: []rawCall{{"call_r1", "lookup_city", `{"name":"Bern"}`}}}}
			}},
		{name: "reasoning server rounds", config: parityServerTools, params: base,
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{reason: []string{"First ", "thought."}, tokens: []string{"Let ", "me ", "see. "}, usage: [2]int{20, 6},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{reason: []string{"Second ", "thought."}, tokens: []string{"It ", "is ", "42."}, usage: [2]int{30, 4}}}
			}},
		{name: "cache hit reasoning", config: cacheConfig, cache: true,
			params: func() openai.ChatCompletionNewParams { return det("cache me") },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{reason: []string{"Hmm, ", "let me think."}, tokens: []string{"Cached ", "answer."}, usage: [2]int{9, 4}}}
			}},
		{name: "anthropic thinking server loop", config: parityAnthropic, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				u := &mockllm.Usage{Prompt: 40 + toolRounds(c.Body), Completion: 9}
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Thinking: "Need a tool.", Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: u}
				}
				return mockllm.Turn{Thinking: "Got it.", Text: "It is 42.", Usage: u}
			}},
		{name: "server tool error result", config: parityServerTools, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Trying. ", ToolCalls: []mockllm.ToolCall{calc("6*/7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "The tool failed.", Usage: parityUsage(30, 5)}
			}},
		{name: "fallback exhausted", config: parityFallback, params: base, wantErr: true,
			mock: func(c *mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "overloaded "+c.Model)}
			}},
		{name: "no answer left", config: baseConfig, params: base, wantErr: true,
			mock: func(c *mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Fault: mockllm.ErrorAnswerFault("server_error", "the model is down")}
			}},
		{name: "error in fallback round of loop", config: parityFallback, params: base, wantErr: true,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Fault: mockllm.StatusFault(400, "invalid_request_error", "bad round from "+c.Model)}
			}},
		{name: "guardrail logprobs", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: []string{"Write ", "to ", "bob@", "example", ".com ", "about ", "Project ", "Falcon ", "soon."}, logprobs: true, usage: [2]int{9, 4}}}
			}},
		{name: "guardrail logprobs redact inside one token", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: []string{"Mail ", "me at bob@example.com today", " ok"}, logprobs: true, usage: [2]int{9, 4}}}
			}},
		{name: "guardrail logprobs redact across windows", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func([]byte) []rawTurn {
				// One-byte tokens: the held text is released in windows,
				// with the addresses' tokens on either side of a release.
				var toks []string
				for _, r := range "Hi a@b.io, c@d.io x carol@example.net." {
					toks = append(toks, string(r))
				}
				return []rawTurn{{tokens: toks, logprobs: true, usage: [2]int{9, 40}}}
			}},
		{name: "guardrail refusal logprobs", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{refusal: []string{"No, bob@exa", "mple.com, about ", "Project Falcon."}, logprobs: true, usage: [2]int{9, 4}}}
			}},
		{name: "guardrail refusal past max_length", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{refusal: wordTokens(20), logprobs: true, usage: [2]int{9, 20}}}
			}},
		{name: "guardrail logprobs no match", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: []string{"Nothing ", "to ", "hide ", "here, ", "it ", "is ", "all ", "fine."}, logprobs: true, usage: [2]int{9, 4}}}
			}},
		{name: "guardrail logprobs server rounds", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{tokens: []string{"Let ", "me ", "see. "}, logprobs: true, usage: [2]int{20, 6},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{tokens: []string{"It ", "is ", "42."}, logprobs: true, usage: [2]int{30, 4}}}
			}},
		{name: "guardrail logprobs redact before server call", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{tokens: []string{"Mail ", "bob@", "example", ".com. "}, logprobs: true, usage: [2]int{20, 6},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{tokens: []string{"It ", "is ", "42."}, logprobs: true, usage: [2]int{30, 4}}}
			}},
		{name: "guardrail logprobs past max_length", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: wordTokens(150), logprobs: true, usage: [2]int{9, 150}}}
			}},
		{name: "guardrail logprobs past max_length server rounds", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(base()) },
			raw: func(body []byte) []rawTurn {
				if toolRounds(body) == 0 {
					return []rawTurn{{tokens: wordTokens(40), logprobs: true, usage: [2]int{20, 40},
						calls: []rawCall{{"call_s1", "calculator", `{"expression":"6*7"}`}}}}
				}
				return []rawTurn{{tokens: []string{"It ", "is ", "42."}, logprobs: true, usage: [2]int{30, 4}}}
			}},
		{name: "guardrail n2 logprobs", config: parityGuard,
			params: func() openai.ChatCompletionNewParams { p := withLogprobs(base()); p.N = openai.Int(2); return p },
			raw: func([]byte) []rawTurn {
				return []rawTurn{
					{tokens: []string{"Mail ", "bob@", "example.com ", "about ", "it, ", "and ", "then ", "some ", "more ", "words."}, logprobs: true, usage: [2]int{9, 4}},
					{tokens: []string{"A ", "second ", "choice ", "that ", "runs ", "on ", "and ", "on ", "until ", "it ", "passes ", "sixty ", "characters."}, logprobs: true, usage: [2]int{9, 4}},
				}
			}},
		{name: "guardrail logprobs client call", config: parityGuard, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(withClientTools(base())) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: []string{"Looking ", "up ", "bob@", "example.com ", "now."}, logprobs: true, usage: [2]int{9, 4},
					calls: []rawCall{{"call_c1", "lookup_city", `{"name":"Bern"}`}}}}
			}},
		{name: "guardrail cache hit server loop", config: parityGuard + "[middleware.cache]\nenabled = true\n", cache: true, chunk: &mockllm.Chunking{TextRunes: 5},
			params: func() openai.ChatCompletionNewParams { return det("cache me") },
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing, mail bob@example.com. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "It is 42.", Usage: parityUsage(30, 5)}
			}},
		{name: "prompted client call logprobs", config: promptedConfig, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { p := withLogprobs(base()); promptedClientTools(&p); return p },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: []string{"Checking ", "now.\n", "```tool_calls\n", `[{"name": "lookup_city", `, `"arguments": {"name": "Bern"}}]`, "\n```"}, logprobs: true, usage: [2]int{9, 4}}}
			}},
		{name: "prompted server loop logprobs", config: promptedConfig,
			params: func() openai.ChatCompletionNewParams { p := withLogprobs(base()); p.Model = "txt"; return p },
			raw: func(body []byte) []rawTurn {
				if !strings.Contains(string(body), "42") {
					return []rawTurn{{tokens: []string{"Let ", "me ", "compute.\n", "```tool_calls\n", `[{"name": "calculator", "arguments": {"expression": "6*7"}}]`, "\n```"}, logprobs: true, usage: [2]int{9, 4}}}
				}
				return []rawTurn{{tokens: []string{"It ", "is ", "42."}, logprobs: true, usage: [2]int{19, 3}}}
			}},
		{name: "approval pending", config: parityApproval, gatewayIDs: true, params: base,
			mock: func(c *mockllm.Call) mockllm.Turn {
				u := parityUsage(30+toolRounds(c.Body), 6)
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing first. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: u}
				}
				return mockllm.Turn{Text: "Now deleting.", ToolCalls: []mockllm.ToolCall{{Name: "delete_file", Arguments: `{"path":"/tmp/x"}`}}, Usage: u}
			}},
		{name: "approval pending with client call", config: parityApproval, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(c *mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Both. ", Usage: parityUsage(30, 6), ToolCalls: []mockllm.ToolCall{
					{Name: "delete_file", Arguments: `{"path":"/tmp/x"}`}, {Name: "lookup_city", Arguments: `{"name":"Bern"}`}, calc("1+1"),
				}}
			}},
		{name: "guardrail block", config: parityBlock, params: base, wantErr: true, delay: 5 * time.Millisecond,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Some text first, then about Project Falcon and more.", Usage: parityUsage(10, 5)}
			}},
		{name: "guardrail block server loop", config: parityBlock, params: base, wantErr: true, delay: 5 * time.Millisecond,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "It is 42, says Project Falcon.", Usage: parityUsage(30, 5)}
			}},
		{name: "guardrail block refusal", config: parityBlock, params: base, wantErr: true,
			raw: func([]byte) []rawTurn {
				return []rawTurn{{refusal: []string{"I won't ", "discuss Project ", "Falcon."}, usage: [2]int{9, 4}}}
			}},
		{name: "guardrail redact interleaved client calls", config: parityGuard, gatewayIDs: true, chunk: &mockllm.Chunking{ArgBytes: 2, InterleaveToolCalls: true},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{ID: "call_a", Name: "lookup_city", Arguments: `{"name":"Zürich","mail":"bob@example.com"}`},
					{ID: "call_b", Name: "local_time", Arguments: `{"tz":"Project Falcon"}`},
				}}
			}},
		{name: "guardrail redact raw client calls with text", config: parityGuard, gatewayIDs: true,
			params: func() openai.ChatCompletionNewParams { return withLogprobs(withClientTools(base())) },
			raw: func([]byte) []rawTurn {
				return []rawTurn{{tokens: []string{"Asking ", "bob@", "example.com."}, logprobs: true, usage: [2]int{9, 4},
					calls: []rawCall{{"call_c1", "lookup_city", `{"name":"Bern","cc":"carol@example.net"}`}, {"call_c2", "local_time", `{}`}}}}
			}},
		{name: "guardrail redact relayed interleaved client calls", config: parityGuardRelay, chunk: &mockllm.Chunking{ArgBytes: 2, InterleaveToolCalls: true},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Mail bob@example.com.", Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{ID: "call_a", Name: "lookup_city", Arguments: `{"name":"Zürich","mail":"bob@example.com"}`},
					{ID: "call_b", Name: "local_time", Arguments: `{"tz":"Project Falcon"}`},
				}}
			}},
		{name: "guardrail redact relayed n2 client calls", config: parityGuardRelay,
			params: func() openai.ChatCompletionNewParams { p := withClientTools(base()); p.N = openai.Int(2); return p },
			raw: func([]byte) []rawTurn {
				return []rawTurn{
					{tokens: []string{"one"}, usage: [2]int{9, 4}, calls: []rawCall{{"call_x1", "lookup_city", `{"name":"bob@example.com"}`}}},
					{usage: [2]int{9, 4}, calls: []rawCall{{"call_y1", "local_time", `{"tz":"project falcon"}`}, {"call_y2", "lookup_city", `{}`}}},
				}
			}},
		{name: "guardrail server and client call in one round", config: parityGuard, gatewayIDs: true,
			chunk:  &mockllm.Chunking{ArgBytes: 4},
			params: func() openai.ChatCompletionNewParams { return withClientTools(base()) },
			mock: func(c *mockllm.Call) mockllm.Turn {
				u := parityUsage(50+toolRounds(c.Body), 9)
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Checking bob@example.com. ", Usage: u, ToolCalls: []mockllm.ToolCall{
						calc("2+3"), {Name: "lookup_city", Arguments: `{"name":"Bern","cc":"bob@example.com"}`}, {Name: "local_time", Arguments: `{"tz":"CET"}`},
					}}
				}
				return mockllm.Turn{Text: "unexpected round", Usage: u}
			}},
		{name: "guardrail block client call", config: parityBlock, params: func() openai.ChatCompletionNewParams { return withClientTools(base()) }, wantErr: true,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "Looking up.", Usage: parityUsage(40, 20), ToolCalls: []mockllm.ToolCall{
					{ID: "call_a", Name: "lookup_city", Arguments: `{"name":"Project Falcon"}`},
				}}
			}},
		{name: "guardrail redaction would break arguments", config: parityArgsBreak, params: func() openai.ChatCompletionNewParams { return withClientTools(base()) }, wantErr: true,
			raw: func([]byte) []rawTurn {
				return []rawTurn{{usage: [2]int{9, 4}, calls: []rawCall{{"call_c1", "lookup_city", `{"name":"secret"}`}}}}
			}},
		{name: "upstream error mid-stream", config: baseConfig, params: base, wantErr: true, delay: 15 * time.Millisecond,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "partial answer that fails", Fault: mockllm.ErrorEventFault(3, "server_error", "the model crashed")}
			}},
		{name: "upstream error in server loop", config: parityServerTools, params: base, wantErr: true, delay: 15 * time.Millisecond,
			mock: func(c *mockllm.Call) mockllm.Turn {
				if toolRounds(c.Body) == 0 {
					return mockllm.Turn{Text: "Computing. ", ToolCalls: []mockllm.ToolCall{calc("6*7")}, Usage: parityUsage(20, 5)}
				}
				return mockllm.Turn{Text: "partial answer that fails", Fault: mockllm.ErrorEventFault(3, "server_error", "the model crashed")}
			}},
		{name: "upstream 429 no fallback", config: baseConfig, params: base, wantErr: true,
			mock: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Fault: mockllm.StatusFault(429, "rate_limit_exceeded", "slow down")}
			}},
	}
}

func TestStreamJSONParityMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range parityCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runParityCase(t, tc)
		})
	}
}

func parityHarness(t *testing.T, tc parityCase) *harness {
	t.Helper()
	if tc.raw != nil {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			turns := tc.raw(b)
			if gjson.GetBytes(b, "stream").Bool() {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, parityRawStream(turns, gjson.GetBytes(b, "stream_options.include_usage").Bool()))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, rawAnswer(turns))
		}))
		t.Cleanup(up.Close)
		return newHarness(t, strings.ReplaceAll(tc.config, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	}
	opts := mockllm.Options{Respond: tc.mock, ChunkDelay: tc.delay}
	if tc.chunk != nil {
		opts.Chunking = *tc.chunk
	}
	return newHarness(t, tc.config, opts)
}

func runParityCase(t *testing.T, tc parityCase) {
	if tc.wantErr {
		h := parityHarness(t, tc)
		js, jsStatus := parityError(t, h, tc.params(), false)
		st, stStatus := parityError(t, h, tc.params(), true)
		if testing.Verbose() {
			t.Logf("json (%d) %s; stream (%d) %s", jsStatus, js, stStatus, st)
		}
		if js != st || (stStatus != 200 && stStatus != jsStatus) {
			t.Fatalf("errors differ:\n json   (%d) %s\n stream (%d) %s", jsStatus, js, stStatus, st)
		}
		return
	}
	if !tc.cache {
		h := parityHarness(t, tc)
		js := parityJSON(t, h, tc.params())
		st := parityStream(t, h, tc.params())
		parityCompare(t, tc, "json", js, "stream", st)
		return
	}
	for _, streamFirst := range []bool{false, true} {
		h := parityHarness(t, tc)
		ask := func(stream bool) parityAnswer {
			if stream {
				return parityStream(t, h, tc.params())
			}
			return parityJSON(t, h, tc.params())
		}
		fresh := ask(streamFirst)
		again := ask(streamFirst)
		other := ask(!streamFirst)
		first := map[bool]string{false: "json", true: "stream"}[streamFirst]
		second := map[bool]string{false: "json", true: "stream"}[!streamFirst]
		if fresh.cache != "miss" || again.cache != "hit" || other.cache != "hit" {
			t.Fatalf("%s first: x-gateway-cache %q, %q, %q; want miss, hit, hit", first, fresh.cache, again.cache, other.cache)
		}
		parityCompare(t, tc, first+" fresh", fresh, first+" hit", again)
		parityCompare(t, tc, first+" fresh", fresh, second+" hit", other)
	}
}

// parityAnswer is what the matrix compares of a completion.
type parityAnswer struct {
	Model       string
	Fingerprint string
	ServiceTier string
	Choices     []parityChoice
	Usage       parityUsageRec
	UsageRaw    map[string]any // every usage member, details included
	cache       string
}

type parityChoice struct {
	Index           int64
	Role            string
	Content         string
	Refusal         string
	FinishReason    string
	ToolCalls       []parityCall
	Reasoning       string // reasoning_content
	Logprobs        string // the content items, JSON
	RefusalLogprobs string
}

type parityCall struct{ ID, Type, Name, Arguments string }

type parityUsageRec struct {
	Prompt, Completion, Total, Cached, Reasoning int64
	HasUsage                                     bool
}

func normalizeCompletion(c openai.ChatCompletion) parityAnswer {
	//lint:ignore SA1019 the SDK deprecates the field; the member is still on the wire, in both forms
	a := parityAnswer{Model: c.Model, Fingerprint: c.SystemFingerprint, ServiceTier: string(c.ServiceTier)}
	if c.JSON.Usage.Valid() || c.Usage.TotalTokens != 0 {
		a.Usage = parityUsageRec{
			Prompt: c.Usage.PromptTokens, Completion: c.Usage.CompletionTokens, Total: c.Usage.TotalTokens,
			Cached: c.Usage.PromptTokensDetails.CachedTokens, Reasoning: c.Usage.CompletionTokensDetails.ReasoningTokens,
			HasUsage: true,
		}
		_ = json.Unmarshal([]byte(c.Usage.RawJSON()), &a.UsageRaw)
	}
	for _, ch := range c.Choices {
		pc := parityChoice{
			Index: ch.Index, Role: string(ch.Message.Role), Content: ch.Message.Content, Refusal: ch.Message.Refusal,
			FinishReason: ch.FinishReason, Reasoning: gjson.Get(ch.Message.RawJSON(), "reasoning_content").Str,
		}
		for _, tc := range ch.Message.ToolCalls {
			pc.ToolCalls = append(pc.ToolCalls, parityCall{tc.ID, string(tc.Type), tc.Function.Name, tc.Function.Arguments})
		}
		if len(ch.Logprobs.Content) > 0 {
			b, _ := json.Marshal(lpItems(ch.Logprobs.Content))
			pc.Logprobs = string(b)
		}
		if len(ch.Logprobs.Refusal) > 0 {
			b, _ := json.Marshal(lpItems(ch.Logprobs.Refusal))
			pc.RefusalLogprobs = string(b)
		}
		a.Choices = append(a.Choices, pc)
	}
	return a
}

type lpItem struct {
	Token   string
	Logprob float64
	Bytes   []int64
	Top     []string
}

func lpItems(in []openai.ChatCompletionTokenLogprob) []lpItem {
	out := make([]lpItem, 0, len(in))
	for _, l := range in {
		it := lpItem{Token: l.Token, Logprob: l.Logprob, Bytes: l.Bytes}
		for _, tl := range l.TopLogprobs {
			it.Top = append(it.Top, fmt.Sprintf("%s:%g:%v", tl.Token, tl.Logprob, tl.Bytes))
		}
		out = append(out, it)
	}
	return out
}

func parityJSON(t *testing.T, h *harness, p openai.ChatCompletionNewParams) parityAnswer {
	t.Helper()
	var hr *http.Response
	resp, err := h.client.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&hr))
	if err != nil {
		t.Fatalf("json: %v", err)
	}
	a := normalizeCompletion(*resp)
	a.cache = hr.Header.Get("x-gateway-cache")
	return a
}

func parityStream(t *testing.T, h *harness, p openai.ChatCompletionNewParams) parityAnswer {
	t.Helper()
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	var hr *http.Response
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), p, option.WithResponseInto(&hr))
	var acc openai.ChatCompletionAccumulator
	var usage string
	reasoning := map[int64]string{}
	for stream.Next() {
		gjson.Get(stream.Current().RawJSON(), "choices").ForEach(func(_, ch gjson.Result) bool {
			reasoning[ch.Get("index").Int()] += ch.Get("delta.reasoning_content").Str
			return true
		})
		if !acc.AddChunk(stream.Current()) {
			t.Errorf("accumulator refused chunk %s", stream.Current().RawJSON())
		}
		if u := gjson.Get(stream.Current().RawJSON(), "usage"); u.IsObject() {
			usage = u.Raw
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	_ = stream.Close()
	raw, _ := h.lastRaw()
	if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: true}); err != nil {
		t.Fatalf("stream breaks the wire rules: %v\n%s", err, raw)
	}
	a := normalizeCompletion(acc.ChatCompletion)
	a.UsageRaw = nil
	for i := range a.Choices {
		a.Choices[i].Reasoning = reasoning[a.Choices[i].Index]
	}
	if usage != "" {
		_ = json.Unmarshal([]byte(usage), &a.UsageRaw)
	}
	a.cache = hr.Header.Get("x-gateway-cache")
	return a
}

// parityError sends p raw and returns its error (type, code, message) and
// the HTTP status: a JSON answer's envelope, or a stream's HTTP error or its
// error event.
func parityError(t *testing.T, h *harness, p openai.ChatCompletionNewParams, stream bool) (string, int) {
	t.Helper()
	body, _ := json.Marshal(p)
	if stream {
		// (The params marshal themselves: fields beside them in a
		// struct would be dropped.)
		body, _ = sjson.SetRawBytes(body, "stream", []byte("true"))
		body, _ = sjson.SetRawBytes(body, "stream_options", []byte(`{"include_usage":true}`))
	}
	status, _, raw := h.post("/chat/completions", string(body), nil)
	e := gjson.GetBytes(raw, "error")
	if stream && status == 200 {
		var last bool
		e, last = streamError(raw)
		if !last {
			t.Fatalf("stream does not end with an error event:\n%s", raw)
		}
	} else if status == 200 {
		t.Fatalf("json answer is no error:\n%s", raw)
	}
	return fmt.Sprintf("type=%s code=%s message=%q", e.Get("type").Str, e.Get("code").Str, e.Get("message").Str), status
}

func parityCompare(t *testing.T, tc parityCase, an string, a parityAnswer, bn string, b parityAnswer) {
	t.Helper()
	if len(a.Choices) == 0 {
		t.Fatalf("%s: no choices", an)
	}
	if tc.gatewayIDs {
		for _, x := range []*parityAnswer{&a, &b} {
			seen := map[string]bool{}
			for i := range x.Choices {
				for j, c := range x.Choices[i].ToolCalls {
					if !strings.HasPrefix(c.ID, "call_") || len(c.ID) < 20 || seen[c.ID] {
						t.Errorf("tool call id %q is not a fresh gateway id", c.ID)
					}
					seen[c.ID] = true
					x.Choices[i].ToolCalls[j].ID = "call_(gateway)"
				}
			}
		}
	}
	a.cache, b.cache = "", ""
	if testing.Verbose() {
		aj, _ := json.Marshal(a)
		t.Logf("%s: %s", an, aj)
	}
	if !reflect.DeepEqual(a, b) {
		aj, _ := json.MarshalIndent(a, "", " ")
		bj, _ := json.MarshalIndent(b, "", " ")
		t.Fatalf("%s and %s differ:\n%s: %s\n%s: %s", an, bn, an, aj, bn, bj)
	}
}

// rawTurn is one choice of a raw upstream's answer: text tokens (or refusal
// tokens), each its own delta with its own logprob, then tool calls whose
// arguments come in 3-byte fragments.
type rawTurn struct {
	reason   []string // reasoning_content deltas, before the text
	tokens   []string
	refusal  []string
	logprobs bool
	calls    []rawCall
	finish   string
	usage    [2]int
}

type rawCall struct{ id, name, args string }

func rawLogprob(tok string) string {
	b, _ := json.Marshal(tok)
	ints := []int{}
	for _, c := range []byte(tok) {
		ints = append(ints, int(c))
	}
	bs, _ := json.Marshal(ints)
	lp := -0.125 * float64(len(tok))
	return fmt.Sprintf(`{"token":%s,"logprob":%g,"bytes":%s,"top_logprobs":[{"token":%s,"logprob":%g,"bytes":%s},{"token":"x","logprob":-3.5,"bytes":[120]}]}`, b, lp, bs, b, lp, bs)
}

func (r rawTurn) finishReason() string {
	switch {
	case r.finish != "":
		return r.finish
	case len(r.calls) > 0:
		return "tool_calls"
	}
	return "stop"
}

const rawHead = `{"id":"chatcmpl-raw","object":"chat.completion.chunk","created":1700000000,"model":"up-model","system_fingerprint":"fp_raw","service_tier":"default","choices":[`

func parityRawStream(turns []rawTurn, usage bool) string {
	var sb strings.Builder
	ev := func(choice string) {
		sb.WriteString("data: " + rawHead + choice + "]")
		if usage {
			sb.WriteString(`,"usage":null`)
		}
		sb.WriteString("}\n\n")
	}
	for i, r := range turns {
		ev(fmt.Sprintf(`{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`, i))
		for _, tok := range r.reason {
			b, _ := json.Marshal(tok)
			ev(fmt.Sprintf(`{"index":%d,"delta":{"reasoning_content":%s},"logprobs":null,"finish_reason":null}`, i, b))
		}
		for _, tok := range r.tokens {
			b, _ := json.Marshal(tok)
			lp := "null"
			if r.logprobs {
				lp = `{"content":[` + rawLogprob(tok) + `],"refusal":null}`
			}
			ev(fmt.Sprintf(`{"index":%d,"delta":{"content":%s},"logprobs":%s,"finish_reason":null}`, i, b, lp))
		}
		for _, tok := range r.refusal {
			b, _ := json.Marshal(tok)
			lp := "null"
			if r.logprobs {
				lp = `{"content":null,"refusal":[` + rawLogprob(tok) + `]}`
			}
			ev(fmt.Sprintf(`{"index":%d,"delta":{"refusal":%s},"logprobs":%s,"finish_reason":null}`, i, b, lp))
		}
		for k, c := range r.calls {
			name, _ := json.Marshal(c.name)
			ev(fmt.Sprintf(`{"index":%d,"delta":{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%s,"arguments":""}}]},"logprobs":null,"finish_reason":null}`, i, k, c.id, name))
			for s := c.args; s != ""; {
				n := min(3, len(s))
				frag, _ := json.Marshal(s[:n])
				s = s[n:]
				ev(fmt.Sprintf(`{"index":%d,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]},"logprobs":null,"finish_reason":null}`, i, k, frag))
			}
		}
		ev(fmt.Sprintf(`{"index":%d,"delta":{},"logprobs":null,"finish_reason":%q}`, i, r.finishReason()))
	}
	if usage {
		p, c := rawUsage(turns)
		sb.WriteString("data: " + rawHead + fmt.Sprintf(`],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":1},"completion_tokens_details":{"reasoning_tokens":1,"audio_tokens":0,"accepted_prediction_tokens":2,"rejected_prediction_tokens":1}}}`, p, c, p+c) + "\n\n")
	}
	sb.WriteString("data: [DONE]\n\n")
	return sb.String()
}

// wordTokens returns n tokens of 8 bytes each ("word000 ", "word001 "…).
func wordTokens(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("word%03d ", i)
	}
	return out
}

func rawUsage(turns []rawTurn) (p, c int) {
	for _, r := range turns {
		p, c = r.usage[0], c+r.usage[1]
	}
	return p, c
}

func rawAnswer(turns []rawTurn) string {
	var choices []string
	for i, r := range turns {
		content, refusal := "null", "null"
		if len(r.tokens) > 0 {
			b, _ := json.Marshal(strings.Join(r.tokens, ""))
			content = string(b)
		}
		if len(r.refusal) > 0 {
			b, _ := json.Marshal(strings.Join(r.refusal, ""))
			refusal = string(b)
		}
		msg := fmt.Sprintf(`{"role":"assistant","content":%s,"refusal":%s`, content, refusal)
		if len(r.reason) > 0 {
			b, _ := json.Marshal(strings.Join(r.reason, ""))
			msg += `,"reasoning_content":` + string(b)
		}
		if len(r.calls) > 0 {
			var cs []string
			for _, c := range r.calls {
				args, _ := json.Marshal(c.args)
				cs = append(cs, fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}`, c.id, c.name, args))
			}
			msg += `,"tool_calls":[` + strings.Join(cs, ",") + `]`
		}
		msg += "}"
		lp := "null"
		if r.logprobs {
			var items []string
			for _, tok := range r.tokens {
				items = append(items, rawLogprob(tok))
			}
			var ritems []string
			for _, tok := range r.refusal {
				ritems = append(ritems, rawLogprob(tok))
			}
			lc, lr := "null", "null"
			if len(items) > 0 {
				lc = "[" + strings.Join(items, ",") + "]"
			}
			if len(ritems) > 0 {
				lr = "[" + strings.Join(ritems, ",") + "]"
			}
			lp = `{"content":` + lc + `,"refusal":` + lr + `}`
		}
		choices = append(choices, fmt.Sprintf(`{"index":%d,"message":%s,"logprobs":%s,"finish_reason":%q}`, i, msg, lp, r.finishReason()))
	}
	p, c := rawUsage(turns)
	return `{"id":"chatcmpl-raw","object":"chat.completion","created":1700000000,"model":"up-model","system_fingerprint":"fp_raw","service_tier":"default","choices":[` +
		strings.Join(choices, ",") +
		fmt.Sprintf(`],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":1},"completion_tokens_details":{"reasoning_tokens":1,"audio_tokens":0,"accepted_prediction_tokens":2,"rejected_prediction_tokens":1}}}`, p, c, p+c)
}

// TestResponsesStreamJSONParityMatrix runs the chat matrix's cases through
// /v1/responses: the response.completed (or .incomplete) object a stream
// ends with and the JSON answer carry the same status, output items (ids
// aside: each response mints its own) and usage.
func TestResponsesStreamJSONParityMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range parityCases() {
		p := tc.params()
		if p.N.Valid() && p.N.Value > 1 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := parityHarness(t, tc)
			rp := responsesParams(p)
			if tc.wantErr {
				js, jsStatus := responsesError(t, h, rp, false)
				st, stStatus := responsesError(t, h, rp, true)
				if testing.Verbose() {
					t.Logf("json (%d) %+v; stream (%d) %+v", jsStatus, js, stStatus, st)
				}
				if stStatus == 200 && js.code != "rate_limit_exceeded" {
					// response.failed's codes are the ResponseError enum,
					// which has no invalid_request_error: every error but
					// a rate limit is server_error there.
					js.code = "server_error"
				}
				if js != st || (stStatus != 200 && stStatus != jsStatus) {
					t.Fatalf("errors differ:\n json   (%d) %s\n stream (%d) %s", jsStatus, js, stStatus, st)
				}
				return
			}
			r, err := h.client.Responses.New(context.Background(), rp)
			if err != nil {
				t.Fatalf("json: %v", err)
			}
			js := normalizeResponse(t, r.RawJSON(), tc.gatewayIDs)
			final, _ := h.streamResponse(rp)
			st := normalizeResponse(t, final.RawJSON(), tc.gatewayIDs)
			if js != st {
				t.Fatalf("json and stream differ:\n json:   %s\n stream: %s", js, st)
			}
			if testing.Verbose() {
				t.Logf("%s", js)
			}
		})
	}
}

// responsesParams is the Responses form of a chat matrix request.
func responsesParams(p openai.ChatCompletionNewParams) responses.ResponseNewParams {
	rp := responses.ResponseNewParams{
		Model: p.Model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello there")},
	}
	if p.Temperature.Valid() {
		rp.Temperature = openai.Float(p.Temperature.Value)
	}
	if p.Logprobs.Valid() && p.Logprobs.Value {
		rp.Include = []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs}
		rp.TopLogprobs = openai.Int(p.TopLogprobs.Value)
	}
	if p.MaxTokens.Valid() {
		rp.MaxOutputTokens = openai.Int(16)
	}
	if p.ResponseFormat.OfJSONObject != nil {
		rp.Text = responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}}
	}
	for _, tl := range p.Tools {
		f := tl.GetFunction()
		if f == nil {
			continue
		}
		rp.Tools = append(rp.Tools, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
			Name: f.Name, Parameters: map[string]any{"type": "object"}, Strict: openai.Bool(false),
		}})
	}
	return rp
}

// normalizeResponse keeps what both forms must agree on: status,
// incomplete_details, error, model, usage and the output items without
// their ids (and without call ids the gateway mints, and current_time's
// reading of the clock).
func normalizeResponse(t *testing.T, raw string, gatewayIDs bool) string {
	t.Helper()
	var r map[string]any
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("response: %v\n%s", err, raw)
	}
	out, _ := r["output"].([]any)
	for _, it := range out {
		m, _ := it.(map[string]any)
		delete(m, "id")
		if gatewayIDs || m["type"] == "mcp_call" {
			delete(m, "call_id")
		}
		if m["name"] == "current_time" {
			// The clock's reading: the two forms' requests may fall on
			// either side of a second.
			delete(m, "output")
		}
	}
	keep := map[string]any{}
	for _, k := range []string{"status", "incomplete_details", "error", "model", "usage", "output"} {
		keep[k] = r[k]
	}
	b, _ := json.Marshal(keep)
	return string(b)
}

// A request that offers client tools streams through the tool loop, which
// writes its own usage (summed over rounds), and answers JSON on the fast
// path with the upstream's usage as it is. The loop's usage kept only the
// counts it sums, so the stream lost OpenAI's audio and prediction details
// that the JSON answer showed.
func TestLoopStreamKeepsUsageDetails(t *testing.T) {
	t.Parallel()
	turns := []rawTurn{{tokens: []string{"no ", "call"}, usage: [2]int{9, 5}}}
	h := fixedUpstreamHarness(t, parityRawStream(turns, true), rawAnswer(turns))
	p := withClientTools(userMsg("hi"))
	js := parityJSON(t, h, p)
	st := parityStream(t, h, p)
	for _, a := range []parityAnswer{js, st} {
		d, _ := a.UsageRaw["completion_tokens_details"].(map[string]any)
		if d["accepted_prediction_tokens"] != 2.0 || d["rejected_prediction_tokens"] != 1.0 {
			t.Errorf("usage %v", a.UsageRaw)
		}
	}
	parityCompare(t, parityCase{}, "json", js, "stream", st)
}

// responsesError sends rp raw and returns its error (code and message) and
// the HTTP status: a JSON answer's envelope, or a stream's HTTP error or
// the error of its response.failed event.
func responsesError(t *testing.T, h *harness, rp responses.ResponseNewParams, stream bool) (respError, int) {
	t.Helper()
	body, _ := json.Marshal(rp)
	if stream {
		body, _ = sjson.SetRawBytes(body, "stream", []byte("true"))
	}
	status, _, raw := h.post("/responses", string(body), nil)
	e := gjson.GetBytes(raw, "error")
	if stream && status == 200 {
		e = gjson.Result{}
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && gjson.Get(d, "type").Str == "response.failed" {
				e = gjson.Get(d, "response.error")
			}
		}
		if !e.Exists() {
			t.Fatalf("stream does not fail:\n%s", raw)
		}
	} else if status == 200 {
		t.Fatalf("json answer is no error:\n%s", raw)
	}
	return respError{e.Get("code").Str, e.Get("message").Str}, status
}

type respError struct{ code, message string }

// A response guardrail holds a stream's text back in windows and releases
// it in chunks of its own: the held chunks' logprobs were dropped, and the
// released text carried the first held chunk's logprobs again, so a stream
// showed one token's logprobs (repeated) where the JSON answer showed
// every token's. The released chunks now carry the logprobs of the text
// they release (the three tokens of the redacted address as one item,
// logprobs.go in package guardrails).
func TestGuardrailStreamKeepsLogprobs(t *testing.T) {
	t.Parallel()
	h := parityHarness(t, parityCase{config: parityGuard, raw: func([]byte) []rawTurn {
		return []rawTurn{{tokens: []string{"Write ", "to ", "bob@", "example", ".com ", "or ", "call ", "me, ", "ok?"}, logprobs: true, usage: [2]int{9, 4}}}
	}})
	p := userMsg("hi")
	p.Logprobs = openai.Bool(true)
	js := parityJSON(t, h, p)
	st := parityStream(t, h, p)
	if n := strings.Count(js.Choices[0].Logprobs, `"Token"`); n != 7 {
		t.Fatalf("JSON has %d logprobs: %s", n, js.Choices[0].Logprobs)
	}
	parityCompare(t, parityCase{}, "json", js, "stream", st)
}

// A response guardrail holds a Responses stream's text and judges it
// before each server call the loop reports. When that judgement blocked,
// the calls it had taken were dropped: the stream failed with no mcp_call
// although the tool ran, where without the guardrail (and in the tool
// loop's own failures) a tool that ran is reported before
// response.failed. Found by review. The JSON answer is the error alone,
// the same as the stream's.
func TestGuardrailBlockAtServerCallKeepsCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, parityBlock, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if toolRounds(c.Body) == 0 {
			return mockllm.Turn{Text: "About Project Falcon. ", Usage: parityUsage(20, 5),
				ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
		}
		return mockllm.Turn{Text: "It is 42.", Usage: parityUsage(30, 5)}
	}})
	rp := responsesParams(userMsg("hello there"))
	final, sum := h.streamResponse(rp)
	if sum.Terminal != "response.failed" {
		t.Fatalf("terminal %s; events %v", sum.Terminal, sum.Events)
	}
	var calls []string
	for _, it := range final.Output {
		if it.Type == "mcp_call" {
			calls = append(calls, it.Name+" "+gjson.Get(it.AsMcpCall().Output, "data.result").Raw)
		}
	}
	if len(calls) != 1 || calls[0] != "calculator 42" {
		t.Fatalf("mcp_call items %q; events %v", calls, sum.Events)
	}
	if e := final.Error; string(e.Code) != "server_error" || !strings.Contains(e.Message, `"codename" blocked`) {
		t.Fatalf("error %+v", e)
	}
	js, status := responsesError(t, h, rp, false)
	if status != http.StatusBadRequest || js.code != "content_blocked" || js.message != final.Error.Message {
		t.Fatalf("json (%d) %+v; stream %+v", status, js, final.Error)
	}
}
