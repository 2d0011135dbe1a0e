package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// anthropicConfig puts Claude models behind the gateway through the native
// provider; the mock answers POST /v1/messages in Anthropic's form.
const anthropicConfig = `
[server]
log_level = "warn"
[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{{MOCK}}"
api_key = "sk-ant-upstream-secret"
retries = 2
anthropic_beta = ["token-efficient-tools-2025-02-19", "interleaved-thinking-2025-05-14"]
[[models]]
name = "claude-small"
provider = "claude"
upstream = "claude-haiku"
context_window = 1000
max_tokens = 321
fallbacks = ["claude-big"]
[[models]]
name = "claude-big"
provider = "claude"
upstream = "claude-opus"
context_window = 200000
[[models]]
name = "claude-flaky"
provider = "claude"
upstream = "claude-flaky"
[[models]]
name = "claude-think"
provider = "claude"
upstream = "claude-think"
fallbacks = ["gpt-fallback"]
[[providers]]
name = "oai"
kind = "openai"
base_url = "{{MOCK}}"
api_key = "sk-oai"
retries = 0
[[models]]
name = "gpt-fallback"
provider = "oai"
upstream = "gpt-mock"
[[tools]]
name = "calculator"
kind = "builtin"
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}'
[tool_loop]
keepalive_interval = "100ms"
`

const claudeText = "Hi there, ünïcode 🌍"

// claudeRespond scripts the Anthropic mock: the last user text picks the
// answer; the server-tool loop counts its rounds by the tool results sent.
func claudeRespond(c *mockllm.Call) mockllm.Turn {
	switch {
	case c.Model == "claude-flaky" && c.N == 1:
		return mockllm.Turn{Fault: &mockllm.Fault{Status: 529, RetryAfter: "0"}}
	case c.Model == "claude-think" && strings.Count(string(c.Body), `"tool_result"`) > 0:
		return mockllm.Turn{Fault: &mockllm.Fault{Status: 529, RetryAfter: "0"}} // a loop's second round falls back
	case c.Model == "gpt-mock":
		return mockllm.Turn{Text: "Final from GPT: " + strings.Join(c.ToolResults, " | ")}
	case strings.Contains(c.LastText, "weather") || strings.Contains(c.LastText, "Oslo"):
		return mockllm.Turn{Text: "Checking both.", ToolCalls: []mockllm.ToolCall{
			{Name: "get_weather", Arguments: `{"city":"Köln","note":"naïve 🌧 \"quoted\""}`},
			{Name: "get_weather", Arguments: `{"city":"Zürich"}`},
		}}
	case strings.Contains(c.LastText, "compute") || strings.Count(string(c.Body), `"tool_result"`) > 0:
		round := strings.Count(string(c.Body), `"tool_result"`)
		u := &mockllm.Usage{Prompt: 100 * (round + 1), Completion: 10, Cached: 40, CacheWrite: 5}
		thinking := "" // a signed thinking block each round, when thinking is on
		if gjson.GetBytes(c.Body, "thinking.type").Str == "enabled" {
			thinking = "Round " + strconv.Itoa(round) + " thinks."
		}
		switch round {
		case 0:
			return mockllm.Turn{Thinking: thinking, ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: u}
		case 1:
			return mockllm.Turn{Thinking: thinking, ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"2+3"}`}}, Usage: u}
		default:
			return mockllm.Turn{Thinking: thinking, Text: "Final: " + strings.Join(c.ToolResults, " | "), Usage: u}
		}
	}
	return mockllm.Turn{Text: claudeText, Thinking: "The user greets me.", Usage: &mockllm.Usage{Prompt: 50, Completion: 5, Cached: 20, CacheWrite: 10}}
}

func anthropicHarness(t *testing.T) *harness {
	t.Helper()
	return newHarness(t, anthropicConfig, mockllm.Options{Respond: claudeRespond,
		ContextWindow: map[string]int{"claude-haiku": 300},
		Chunking:      mockllm.Chunking{ArgBytes: 3, TextRunes: 2, SplitWrites: true}})
}

func claudeMsg(model, text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are terse."), openai.UserMessage(text)}}
}

// messagesRequests returns the bodies the mock received on /v1/messages.
func messagesRequests(h *harness) []mockllm.Recorded {
	var out []mockllm.Recorded
	for _, r := range h.mock.Requests() {
		if r.Path == "/v1/messages" {
			out = append(out, r)
		}
	}
	return out
}

func TestAnthropicText(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	schema := wiretest.LoadSchema(t)
	// usage: prompt = 20 cached + 10 written + 20 uncached input.
	checkUsage := func(u openai.CompletionUsage) {
		t.Helper()
		if u.PromptTokens != 50 || u.CompletionTokens != 5 || u.TotalTokens != 55 || u.PromptTokensDetails.CachedTokens != 20 {
			t.Errorf("usage %+v", u)
		}
	}
	p := claudeMsg("claude-small", "hello")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: true}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != claudeText || acc.Choices[0].FinishReason != "stop" || sum.Model != "claude-small" {
		t.Fatalf("stream: %+v model %q", acc.Choices[0], sum.Model)
	}
	checkUsage(acc.Usage)
	var reasoning string
	for _, c := range sum.Chunks {
		reasoning += gjson.GetBytes(c, "choices.0.delta.reasoning_content").Str
	}
	if reasoning != "The user greets me." {
		t.Errorf("reasoning_content %q", reasoning)
	}

	resp, err := h.client.Chat.Completions.New(context.Background(), claudeMsg("claude-small", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := h.lastRaw()
	if err := schema.Completion(raw); err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != claudeText || resp.Model != "claude-small" || !strings.HasPrefix(resp.ID, "msg_") {
		t.Fatalf("json: %s", raw)
	}
	checkUsage(resp.Usage)

	// What went upstream: Anthropic's headers, not ours, and a body the
	// official SDK reads as a MessageNewParams.
	reqs := messagesRequests(h)
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	r := reqs[1]
	if r.Header["X-Api-Key"] != "sk-ant-upstream-secret" || r.Header["Authorization"] != "" || r.Header["Anthropic-Version"] != "2023-06-01" ||
		r.Header["Anthropic-Beta"] != "token-efficient-tools-2025-02-19,interleaved-thinking-2025-05-14" {
		t.Errorf("headers %v", r.Header)
	}
	var mp sdk.MessageNewParams
	if err := json.Unmarshal(r.Body, &mp); err != nil {
		t.Fatal(err)
	}
	if mp.Model != "claude-haiku" || mp.MaxTokens != 321 || len(mp.System) != 1 || mp.System[0].Text != "You are terse." ||
		mp.System[0].CacheControl.Type != "ephemeral" || mp.Messages[0].Content[0].OfText.CacheControl.Type != "ephemeral" {
		t.Errorf("request %s", r.Body)
	}
}

// TestAnthropicThinkingBothForms: a thinking block is the message's
// reasoning_content in the JSON answer as in the stream, through the tool
// loop (the calculator is offered) and the relay (tool_choice "none").
func TestAnthropicThinkingBothForms(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	schema := wiretest.LoadSchema(t)
	for _, tc := range []struct{ name, choice string }{{"tool loop", ""}, {"relay", "none"}} {
		p := claudeMsg("claude-small", "hello")
		if tc.choice != "" {
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(tc.choice)}
		}
		_, sum, err := h.streamChat(p, wiretest.Options{}, schema)
		if err != nil {
			t.Fatal(err)
		}
		var streamed string
		for _, c := range sum.Chunks {
			streamed += gjson.GetBytes(c, "choices.0.delta.reasoning_content").Str
		}
		body, _ := json.Marshal(p)
		status, _, raw := h.post("/chat/completions", string(body), nil)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.name, status, raw)
		}
		if err := schema.Completion(raw); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		m := gjson.GetBytes(raw, "choices.0.message")
		if streamed != "The user greets me." || m.Get("reasoning_content").Str != streamed || m.Get("content").Str != claudeText {
			t.Errorf("%s: streamed reasoning %q, json %s", tc.name, streamed, raw)
		}
	}
}

func TestAnthropicParallelToolCalls(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	schema := wiretest.LoadSchema(t)
	weather := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})
	want := []string{`{"city":"Köln","note":"naïve 🌧 \"quoted\""}`, `{"city":"Zürich"}`}
	check := func(form string, m openai.ChatCompletionMessage, finish string) {
		t.Helper()
		if finish != "tool_calls" || m.Content != "Checking both." || len(m.ToolCalls) != 2 {
			t.Fatalf("%s: finish %q %+v", form, finish, m)
		}
		for i, tc := range m.ToolCalls {
			if tc.Function.Name != "get_weather" || tc.Function.Arguments != want[i] || tc.ID == "" {
				t.Errorf("%s call %d: %s %q", form, i, tc.Function.Name, tc.Function.Arguments)
			}
		}
	}
	p := claudeMsg("claude-small", "weather in Köln and Zürich?")
	p.Tools = []openai.ChatCompletionToolUnionParam{weather}
	acc, _, err := h.streamChat(p, wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	check("stream", acc.Choices[0].Message, acc.Choices[0].FinishReason)
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	check("json", resp.Choices[0].Message, resp.Choices[0].FinishReason)

	// The client answers both calls: the follow-up reaches Anthropic as one
	// user message holding both tool_result blocks (the mock checks the
	// pairing and the alternation).
	p.Messages = append(p.Messages, resp.Choices[0].Message.ToParam(),
		openai.ToolMessage(`{"temp":12}`, resp.Choices[0].Message.ToolCalls[0].ID),
		openai.ToolMessage(`{"temp":9}`, resp.Choices[0].Message.ToolCalls[1].ID),
		openai.UserMessage("thanks"))
	if _, err := h.client.Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	reqs := messagesRequests(h)
	last := gjson.GetBytes(reqs[len(reqs)-1].Body, "messages")
	if n := len(last.Array()); n != 3 || last.Get("2.content.#").Int() != 3 ||
		last.Get("2.content.0.type").Str != "tool_result" || last.Get("2.content.1.type").Str != "tool_result" || last.Get("2.content.2.text").Str != "thanks" {
		t.Errorf("follow-up messages %s", last.Raw)
	}
}

// A two-round server-tool loop on Claude: each round's request carries its
// cache breakpoint on the newest message (it moves forward), never more
// than four, and the client sees cached_tokens summed over the rounds.
func TestAnthropicServerToolLoop(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	schema := wiretest.LoadSchema(t)
	check := func(form string, u openai.CompletionUsage) {
		t.Helper()
		// Rounds of 100, 200 and 300 prompt tokens, 40 of them cached each time.
		if u.PromptTokens != 600 || u.CompletionTokens != 30 || u.PromptTokensDetails.CachedTokens != 120 {
			t.Errorf("%s usage %+v", form, u)
		}
	}
	p := claudeMsg("claude-small", "compute 6*7 then 2+3")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	acc, _, err := h.streamChat(p, wiretest.Options{WantUsage: true}, schema, option.WithHeader("x-gateway-tool-trace", "1"))
	if err != nil {
		t.Fatal(err)
	}
	msg := acc.Choices[0].Message
	if len(msg.ToolCalls) != 0 || !strings.HasPrefix(msg.Content, "Final: ") || !strings.Contains(msg.Content, `"result":5`) {
		t.Fatalf("client saw %+v", msg)
	}
	check("stream", acc.Usage)

	reqs := messagesRequests(h)
	if len(reqs) != 3 {
		t.Fatalf("%d rounds", len(reqs))
	}
	prev := -1
	for i, r := range reqs {
		msgs := gjson.GetBytes(r.Body, "messages").Array()
		at := -1
		for j, m := range msgs {
			m.Get("content").ForEach(func(_, b gjson.Result) bool {
				if b.Get("cache_control").Exists() {
					at = j
				}
				return true
			})
		}
		if at != len(msgs)-1 || at <= prev {
			t.Errorf("round %d: breakpoint on message %d of %d (previous %d): %s", i, at, len(msgs), prev, r.Body)
		}
		prev = at
		if !gjson.GetBytes(r.Body, "tools.0.cache_control").Exists() || !gjson.GetBytes(r.Body, "system.0.cache_control").Exists() {
			t.Errorf("round %d: tools and system breakpoints missing: %s", i, r.Body)
		}
		if i == 1 && !strings.Contains(string(r.Body), `\"result\":42`) {
			t.Errorf("round 2 lacks the first result: %s", r.Body)
		}
	}

	resp, err := h.client.Chat.Completions.New(context.Background(), claudeMsg("claude-small", "compute 6*7 then 2+3"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != msg.Content {
		t.Errorf("json %q, stream %q", resp.Choices[0].Message.Content, msg.Content)
	}
	check("json", resp.Usage)
	// Cache writes (5 a round) are summed too, beside the cached reads.
	if raw, _ := h.lastRaw(); gjson.GetBytes(raw, "usage.prompt_tokens_details.cache_write_tokens").Int() != 15 {
		t.Errorf("cache writes: %s", gjson.GetBytes(raw, "usage").Raw)
	}
}

// TestAnthropicThinkingAcrossLoopRounds: with thinking on, each round of
// the server-side tool loop sends the assistant turn of the round before
// back starting with its signed thinking block, as Anthropic requires (the
// mock refuses the turn otherwise), and so keeps thinking on; the client's
// answer, streamed or not, shows the reasoning but never the signature nor
// the gateway's member that carried it.
func TestAnthropicThinkingAcrossLoopRounds(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{false, true} {
		body := `{"model":"claude-big","reasoning_effort":"medium","stream":` + strconv.FormatBool(stream) +
			`,"messages":[{"role":"user","content":"compute 6*7 then 2+3"}]}`
		status, _, raw := h.post("/chat/completions", body, nil)
		if status != http.StatusOK || strings.Contains(string(raw), "event: error") || !strings.Contains(string(raw), `"finish_reason":"stop"`) {
			t.Fatalf("stream %v: %d %s", stream, status, raw)
		}
		if !stream {
			if err := schema.Completion(raw); err != nil {
				t.Fatal(err)
			}
			if m := gjson.GetBytes(raw, "choices.0.message"); !strings.HasPrefix(m.Get("content").Str, "Final: ") ||
				m.Get("reasoning_content").Str != "Round 0 thinks.Round 1 thinks.Round 2 thinks." {
				t.Errorf("json answer %s", raw)
			}
		}
		for _, leak := range []string{"c2lnbmF0dXJl", "signature", "x_gateway_thinking", "redacted_thinking"} {
			if strings.Contains(string(raw), leak) {
				t.Errorf("stream %v: the client's answer holds %q: %s", stream, leak, raw)
			}
		}
		reqs := messagesRequests(h)
		reqs = reqs[len(reqs)-3:]
		for i, r := range reqs {
			if got := gjson.GetBytes(r.Body, "thinking.type").Str; got != "enabled" {
				t.Errorf("stream %v, round %d: thinking %q: %s", stream, i+1, got, r.Body)
			}
			if i == 0 {
				continue
			}
			msgs := gjson.GetBytes(r.Body, "messages").Array()
			last := msgs[len(msgs)-2] // the assistant turn before the tool results
			want := `{"type":"thinking","thinking":"Round ` + strconv.Itoa(i-1) + ` thinks.","signature":"c2lnbmF0dXJl"}`
			if first := last.Get("content.0").Raw; last.Get("role").Str != "assistant" || first != want ||
				last.Get("content.1.type").Str != "tool_use" {
				t.Errorf("stream %v, round %d: last assistant turn %s", stream, i+1, last.Raw)
			}
			if strings.Contains(string(r.Body), "x_gateway_thinking") {
				t.Errorf("stream %v, round %d: the member reached Anthropic: %s", stream, i+1, r.Body)
			}
		}
	}
	// The Responses API runs the same loop: its rounds keep thinking, and
	// neither its answer nor the response it stores shows the blocks.
	for _, stream := range []bool{false, true} {
		body := `{"model":"claude-big","reasoning":{"effort":"medium"},"stream":` + strconv.FormatBool(stream) +
			`,"input":"compute 6*7 then 2+3"}`
		status, _, raw := h.post("/responses", body, nil)
		if status != http.StatusOK || !strings.Contains(string(raw), "Final: ") {
			t.Fatalf("responses, stream %v: %d %s", stream, status, raw)
		}
		reqs := messagesRequests(h)
		if r := reqs[len(reqs)-1]; gjson.GetBytes(r.Body, "thinking.type").Str != "enabled" {
			t.Errorf("responses, stream %v: the last round went without thinking: %s", stream, r.Body)
		}
		var stored []byte
		if !stream {
			id := gjson.GetBytes(raw, "id").Str
			for _, path := range []string{"/responses/" + id, "/responses/" + id + "/input_items"} {
				resp, err := http.Get(h.base + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
				}
				stored = append(stored, b...)
			}
		}
		for _, leak := range []string{"c2lnbmF0dXJl", "signature", "x_gateway_thinking", "redacted_thinking"} {
			if strings.Contains(string(raw), leak) || strings.Contains(string(stored), leak) {
				t.Errorf("responses, stream %v: the answer holds %q: %s %s", stream, leak, raw, stored)
			}
		}
	}
}

// TestAnthropicThinkingNeverReachesOpenAI: a loop round that falls back
// from Claude to an OpenAI-kind model goes there without the member that
// carries Claude's signed thinking.
func TestAnthropicThinkingNeverReachesOpenAI(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	for _, stream := range []bool{false, true} {
		body := `{"model":"claude-think","reasoning_effort":"medium","stream":` + strconv.FormatBool(stream) +
			`,"messages":[{"role":"user","content":"compute 6*7"}]}`
		status, _, raw := h.post("/chat/completions", body, nil)
		if status != http.StatusOK || strings.Contains(string(raw), "event: error") || strings.Contains(string(raw), "c2lnbmF0dXJl") {
			t.Fatalf("stream %v: %d %s", stream, status, raw)
		}
		var sent []byte
		for _, r := range h.mock.Requests() {
			if r.Model == "gpt-mock" {
				sent = r.Body
			}
		}
		if sent == nil || !strings.Contains(string(sent), `"tool_calls"`) {
			t.Fatalf("stream %v: no fallback round reached the OpenAI model: %s", stream, sent)
		}
		if strings.Contains(string(sent), "x_gateway_thinking") || strings.Contains(string(sent), "c2lnbmF0dXJl") {
			t.Errorf("stream %v: the OpenAI model got Claude's thinking: %s", stream, sent)
		}
	}
}

// TestAnthropicThinkingWithForcedToolChoice: Anthropic refuses thinking
// with a tool_choice that forces a call (the mock refuses it too), so a
// request with reasoning_effort and a forced choice reaches it without
// thinking and works: a named client tool, and the tool loop's own forced
// rounds (tool_choice "required" and a named server tool). With "auto",
// thinking is sent.
func TestAnthropicThinkingWithForcedToolChoice(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	const weather = `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	tests := []struct {
		name, text, extra, wantChoice string
		thinking                      bool
	}{
		{"named client tool", "weather in Köln?", weather + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`, `{"type":"tool","name":"get_weather"}`, false},
		{"required, server tool", "compute 6*7", `,"tool_choice":"required"`, `{"type":"any"}`, false},
		{"named server tool", "compute 6*7", `,"tool_choice":{"type":"function","function":{"name":"calculator"}}`, `{"type":"tool","name":"calculator"}`, false},
		{"auto keeps thinking", "hello", `,"tool_choice":"auto"`, `{"type":"auto"}`, true},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			body := `{"model":"claude-big","reasoning_effort":"medium","stream":` + strconv.FormatBool(stream) +
				`,"messages":[{"role":"user","content":"` + tc.text + `"}]` + tc.extra + `}`
			status, _, raw := h.post("/chat/completions", body, nil)
			if status != http.StatusOK || strings.Contains(string(raw), "event: error") {
				t.Errorf("%s (stream %v): %d %s", tc.name, stream, status, raw)
				continue
			}
			reqs := messagesRequests(h) // one model call each: a forced server call's result is the answer
			sent := reqs[len(reqs)-1].Body
			if got := gjson.GetBytes(sent, "tool_choice").Raw; got != tc.wantChoice || gjson.GetBytes(sent, "thinking").Exists() != tc.thinking {
				t.Errorf("%s (stream %v): sent tool_choice %s, thinking %s", tc.name, stream, got, gjson.GetBytes(sent, "thinking").Raw)
			}
		}
	}
}

func TestAnthropicOverloadedRetried(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	resp, err := h.client.Chat.Completions.New(context.Background(), claudeMsg("claude-flaky", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	_, hdr := h.lastRaw()
	if resp.Choices[0].Message.Content != claudeText || h.mock.Calls("claude-flaky") != 2 || hdr.Get("X-Gateway-Attempts") != "2" {
		t.Fatalf("content %q, calls %d, attempts %q", resp.Choices[0].Message.Content, h.mock.Calls("claude-flaky"), hdr.Get("X-Gateway-Attempts"))
	}
}

// "prompt is too long" from Claude is context_length_exceeded: the request
// moves to the fallback with the larger window, stream and JSON alike.
func TestAnthropicPromptTooLongFallsBack(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	long := "hello " + strings.Repeat("lorem ipsum ", 150)
	for _, stream := range []bool{false, true} {
		var content string
		if stream {
			acc, _, err := h.streamChat(claudeMsg("claude-small", long), wiretest.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			content = acc.Choices[0].Message.Content
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), claudeMsg("claude-small", long))
			if err != nil {
				t.Fatal(err)
			}
			content = resp.Choices[0].Message.Content
		}
		_, hdr := h.lastRaw()
		if content != claudeText || hdr.Get("X-Gateway-Model") != "claude-big" {
			t.Errorf("stream %v: content %q model %q", stream, content, hdr.Get("X-Gateway-Model"))
		}
	}
	if h.mock.Calls("claude-haiku") != 2 || h.mock.Calls("claude-opus") != 2 {
		t.Errorf("haiku %d (no retry of a too-long prompt), opus %d", h.mock.Calls("claude-haiku"), h.mock.Calls("claude-opus"))
	}
}

// Anthropic's own refusals: an error event before any content is retried,
// one after content ends the stream with the error event; a 401 keeps its
// status but never its message.
func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	schema := wiretest.LoadSchema(t)
	h := newHarness(t, anthropicConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		switch {
		case strings.Contains(c.LastText, "early") && c.N == 1:
			return mockllm.Turn{Text: claudeText, Fault: mockllm.ErrorEventFault(1, "", "Overloaded")}
		case strings.Contains(c.LastText, "late"):
			return mockllm.Turn{Text: "abcdefgh", Fault: mockllm.ErrorEventFault(6, "", "Overloaded")}
		case strings.Contains(c.LastText, "auth"):
			return mockllm.Turn{Fault: &mockllm.Fault{Status: 401, Message: "invalid x-api-key sk-ant-upstream-secret"}}
		}
		return mockllm.Turn{Text: claudeText}
	}})
	acc, _, err := h.streamChat(claudeMsg("claude-big", "early"), wiretest.Options{}, schema)
	if err != nil || acc.Choices[0].Message.Content != claudeText || h.mock.Calls("claude-opus") != 2 {
		t.Fatalf("early error: %v %q calls %d", err, acc.Choices[0].Message.Content, h.mock.Calls("claude-opus"))
	}
	_, sum, err := h.streamChat(claudeMsg("claude-big", "late"), wiretest.Options{WantError: true}, schema)
	if err == nil || !strings.Contains(sum.Content, "ab") || gjson.GetBytes(sum.Error, "error.type").Str != "server_error" {
		t.Fatalf("late error: %v content %q error %s", err, sum.Content, sum.Error)
	}
	status, _, body := h.post("/chat/completions", `{"model":"claude-big","messages":[{"role":"user","content":"auth"}]}`, nil)
	if status != http.StatusUnauthorized || strings.Contains(string(body), "sk-ant") || gjson.GetBytes(body, "error.code").Str != "upstream_auth" {
		t.Fatalf("auth: %d %s", status, body)
	}
}

// The Node openai client through the gateway to Claude: text, parallel
// client tool calls accumulated by its stream helper, and the server-tool
// loop's summed cached tokens.
func TestAnthropicNodeClient(t *testing.T) {
	skipWithoutNode(t)
	t.Parallel()
	h := anthropicHarness(t)
	out := runNode(t, "anthropic.mjs", "GATEWAY_BASE_URL="+h.base, "GATEWAY_MODEL=claude-small")
	for _, want := range []string{"text: ok", "tools: ok", "loop: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// A policy's max_tokens cap bounds a Claude answer's thinking too: the
// budget fits under the cap (half of it, or Anthropic's minimum of 1024
// when half is less), where max_tokens used to
// grow past it (to the budget plus the cap), so that reasoning_effort
// bypassed the cap.
func TestAnthropicPolicyCapBoundsThinking(t *testing.T) {
	t.Parallel()
	h := newHarness(t, anthropicConfig+`
[[keys]]
name = "capped"
tenant = "capped"
key = "sk-capped"
[[policies]]
tenant = "capped"
max_tokens = 2000
`, mockllm.Options{Respond: claudeRespond})
	auth := map[string]string{"Authorization": "Bearer sk-capped"}
	for _, body := range []string{
		`{"model":"claude-big","reasoning_effort":"high","messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"claude-big","reasoning_effort":"high","max_tokens":9000,"messages":[{"role":"user","content":"hello"}]}`,
	} {
		status, _, raw := h.post("/chat/completions", body, auth)
		if status != http.StatusOK {
			t.Fatalf("%d %s", status, raw)
		}
		reqs := messagesRequests(h)
		sent := reqs[len(reqs)-1].Body
		if mt, b := gjson.GetBytes(sent, "max_tokens").Int(), gjson.GetBytes(sent, "thinking.budget_tokens").Int(); mt != 2000 || b != 1024 {
			t.Errorf("%s: sent max_tokens %d, budget %d", body, mt, b)
		}
	}
}

// An Anthropic error that names a message by index counts the translated
// request's messages (no system message, runs of one role merged): the
// client sees the index of its own message.
func TestAnthropicErrorNamesClientMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, anthropicConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Fault: &mockllm.Fault{Status: 400, Message: "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"}}
	}})
	body := `{"model":"claude-big","tool_choice":"none","messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"user","content":"b"},
	 {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{}"}}]},
	 {"role":"tool","tool_call_id":"c1","content":"r"}]}`
	status, _, raw := h.post("/chat/completions", body, nil)
	if msg := gjson.GetBytes(raw, "error.message").Str; status != http.StatusBadRequest || !strings.HasPrefix(msg, "messages.3.content.0.tool_use.id:") {
		t.Fatalf("%d %s", status, raw)
	}
}

// A stop sequence of whitespace only, which Anthropic refuses, is applied
// by the gateway to a Claude answer, streamed and not: the content ends
// where it begins, the finish is "stop", and the upstream is not sent it.
func TestAnthropicWhitespaceStop(t *testing.T) {
	t.Parallel()
	h := newHarness(t, anthropicConfig, mockllm.Options{
		Respond:  func(*mockllm.Call) mockllm.Turn { return mockllm.Turn{Text: "first line\nsecond line"} },
		Chunking: mockllm.Chunking{TextRunes: 3, SplitWrites: true}})
	p := claudeMsg("claude-big", "two lines")
	p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"\n", "END"}}
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	acc, _, err := h.streamChat(p, wiretest.Options{}, wiretest.LoadSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	for form, c := range map[string]openai.ChatCompletionChoice{"json": resp.Choices[0], "stream": acc.Choices[0]} {
		if c.Message.Content != "first line" || c.FinishReason != "stop" {
			t.Errorf("%s: content %q finish %q", form, c.Message.Content, c.FinishReason)
		}
	}
	for _, r := range messagesRequests(h) {
		if got := gjson.GetBytes(r.Body, "stop_sequences").Raw; got != `["END"]` {
			t.Errorf("upstream stop_sequences %s", got)
		}
	}
}

// A request Anthropic cannot take is refused naming what the client sent:
// a chat request its own message's index, a Responses request its own
// fields (include, input), not the chat request the gateway built from it.
func TestAnthropicRefusalsNameTheClientsFields(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	for _, c := range []struct{ path, body, param string }{
		{"/chat/completions", `{"model":"claude-big","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,AAAA"}}]}]}`,
			"messages[1].content[0].type"},
		{"/responses", `{"model":"claude-big","include":["message.output_text.logprobs"],"input":"hi"}`, "include"},
		{"/responses", `{"model":"claude-big","instructions":"s","input":[{"role":"user","content":[{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,AAAA"}]}]}`, "input"},
	} {
		status, _, raw := h.post(c.path, c.body, nil)
		if p := gjson.GetBytes(raw, "error.param").Str; status != http.StatusBadRequest || p != c.param {
			t.Errorf("%s %s: %d %s, want param %q", c.path, c.body, status, raw, c.param)
		}
		if c.path == "/responses" && strings.Contains(gjson.GetBytes(raw, "error.message").Str, "messages[") {
			t.Errorf("%s: the message names the chat request: %s", c.body, raw)
		}
	}
}
