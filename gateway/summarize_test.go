package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// summarizeConfig: gpt-x has a 1000-token window; when clearing tool results
// is not enough, the oldest turns are summarised by "summarizer".
const summarizeConfig = `
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
context_window = 1000
[[models]]
name = "summarizer"
provider = "up"
upstream = "up-sum"
context_window = 100000
[[tools]]
name = "calculator"
kind = "builtin"
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}'
[middleware.context_edit]
last_resort = "summarize"
summary_model = "summarizer"
`

// longHistory is a conversation of about 2000 tokens: eight long turns, a
// tool call and its result in the middle, and a short latest question.
func longHistory() []openai.ChatCompletionMessageParamUnion {
	para := func(n int) string {
		return fmt.Sprintf("Turn %d: ", n) + strings.Repeat(fmt.Sprintf("the fox %d crossed the river near the old mill; ", n), 18)
	}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse.")}
	for i := 0; i < 8; i++ {
		msgs = append(msgs, openai.UserMessage(para(2*i)))
		if i == 3 {
			call := openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: "call_old", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "calculator", Arguments: `{"expression":"1+1"}`},
				}}},
			}}
			msgs = append(msgs, call, openai.ToolMessage(`{"status":"ok","data":2}`, "call_old"))
		}
		msgs = append(msgs, openai.AssistantMessage(para(2*i+1)))
	}
	return append(msgs, openai.UserMessage("And what is 6*7?"))
}

// summarizeResponder: the summarizer answers a fixed summary (counting its
// calls); gpt-x calls the calculator once, then answers.
func summarizeResponder(summaries *atomic.Int64, failSummary bool) func(*mockllm.Call) mockllm.Turn {
	return func(c *mockllm.Call) mockllm.Turn {
		if c.Model == "up-sum" {
			summaries.Add(1)
			if failSummary {
				return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "summarizer down")}
			}
			return mockllm.Turn{Text: "SUMMARY: foxes crossed rivers; the calculator said 2."}
		}
		if c.LastRole == "user" {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
		}
		return mockllm.Turn{Text: "42."}
	}
}

// Every upstream round of gpt-x got the summary in place of the old turns,
// kept the system message and the latest question, and a valid pairing (the
// mock rejects a broken one); one summary call served both rounds and the
// repeated request.
func TestSummarizeWhenEditingIsNotEnough(t *testing.T) {
	t.Parallel()
	var summaries atomic.Int64
	h := newHarness(t, summarizeConfig, mockllm.Options{Respond: summarizeResponder(&summaries, false),
		ContextWindow: map[string]int{"up-model": 1000}})
	params := openai.ChatCompletionNewParams{Model: "gpt-x", Messages: longHistory()}
	resp, err := h.client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "42." {
		t.Fatalf("answer %q", resp.Choices[0].Message.Content)
	}
	_, hdr := h.lastRaw()
	if !strings.Contains(hdr.Get("X-Gateway-Context-Edits"), "summarized=1") {
		t.Fatalf("x-gateway-context-edits %q", hdr.Get("X-Gateway-Context-Edits"))
	}
	// The streamed form of the same conversation: same summary, from the store.
	schema := wiretest.LoadSchema(t)
	acc, _, err := h.streamChat(params, wiretest.Options{}, schema)
	if err != nil || acc.Choices[0].Message.Content != "42." {
		t.Fatalf("stream: %v %q", err, acc.Choices[0].Message.Content)
	}
	if n := summaries.Load(); n != 1 {
		t.Fatalf("%d summary calls for one conversation", n)
	}
	rounds := 0
	for _, r := range h.mock.Requests() {
		if r.Model != "up-model" {
			continue
		}
		rounds++
		msgs := gjson.GetBytes(r.Body, "messages").Array()
		if msgs[0].Get("role").Str != "system" || !strings.HasPrefix(msgs[1].Get("content").Str, "Summary of the earlier conversation") ||
			!strings.Contains(msgs[1].Get("content").Str, "SUMMARY: foxes") {
			t.Fatalf("round %d starts %s / %s", rounds, msgs[0].Raw, msgs[1].Raw)
		}
		if strings.Contains(string(r.Body), "Turn 0:") || !strings.Contains(string(r.Body), "And what is 6*7?") {
			t.Fatalf("round %d kept the oldest turn or lost the question", rounds)
		}
	}
	if rounds != 4 { // two rounds (tool call, answer), JSON and stream
		t.Fatalf("%d upstream rounds", rounds)
	}
}

// Without a summary (the summarizer fails), summarize falls back to
// summary_fallback: drop_turns answers, error refuses with
// context_length_exceeded.
func TestSummarizeFallback(t *testing.T) {
	t.Parallel()
	for _, fallback := range []string{"drop_turns", "error"} {
		t.Run(fallback, func(t *testing.T) {
			t.Parallel()
			var summaries atomic.Int64
			h := newHarness(t, summarizeConfig+"summary_fallback = \""+fallback+"\"\n",
				mockllm.Options{Respond: summarizeResponder(&summaries, true), ContextWindow: map[string]int{"up-model": 1000}})
			resp, err := h.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-x", Messages: longHistory()})
			if summaries.Load() == 0 {
				t.Fatal("the summarizer was never asked")
			}
			switch fallback {
			case "drop_turns":
				if err != nil || resp.Choices[0].Message.Content != "42." {
					t.Fatalf("drop_turns fallback: %v", err)
				}
				for _, r := range h.mock.Requests() {
					if r.Model == "up-model" && (strings.Contains(string(r.Body), "Turn 0:") || strings.Contains(string(r.Body), "Summary of")) {
						t.Fatal("turns were neither dropped nor left unsummarised")
					}
				}
			case "error":
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
					t.Fatalf("error fallback: %v", err)
				}
			}
		})
	}
}

// A stored summary read back is no model call: it takes nothing from the
// tenant's requests_per_minute on the summary model (the conversation's
// later requests kept working), and a summary call the limit refuses
// answers the limit's 429 (retry later), not a context_length_exceeded 400
// that tells the client its conversation is too long.
func TestStoredSummaryTakesNoRequest(t *testing.T) {
	t.Parallel()
	var summaries atomic.Int64
	cfg := strings.Replace(summarizeConfig, "[middleware.context_edit]", `[[limits]]
tenant = "*"
model = "summarizer"
requests_per_minute = 1
[middleware.context_edit]`, 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: summarizeResponder(&summaries, false),
		ContextWindow: map[string]int{"up-model": 1000}})
	params := openai.ChatCompletionNewParams{Model: "gpt-x", Messages: longHistory()}
	for i := range 3 {
		resp, err := h.client.Chat.Completions.New(context.Background(), params, option.WithMaxRetries(0))
		if err != nil || resp.Choices[0].Message.Content != "42." {
			t.Fatalf("request %d of the conversation: %v", i+1, err)
		}
	}
	if n := summaries.Load(); n != 1 {
		t.Fatalf("%d summary calls for one conversation", n)
	}
	other := append([]openai.ChatCompletionMessageParamUnion{openai.UserMessage("Another conversation. " + strings.Repeat("owls fly at night; ", 30))},
		longHistory()[1:]...)
	_, err := h.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-x", Messages: other}, option.WithMaxRetries(0))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("a summary the limit refuses: %v, want the limit's 429", err)
	}
	if n := summaries.Load(); n != 1 {
		t.Fatalf("%d summary calls: the refused one was made", n)
	}
}

// A summary is its tenant's: another tenant with the same conversation gets
// one made for it (its own summary call), and a tenant whose policy refuses
// the summary model gets none, not even one stored for another tenant.
func TestSummaryIsPerTenant(t *testing.T) {
	t.Parallel()
	var summaries atomic.Int64
	cfg := strings.Replace(summarizeConfig, "[middleware.context_edit]", `[[keys]]
tenant = "acme"
key = "sk-client"
[[keys]]
tenant = "globex"
key = "sk-other"
[[keys]]
tenant = "initech"
key = "sk-third"
[[policies]]
tenant = "initech"
models = ["gpt-x"]
[middleware.context_edit]`, 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: summarizeResponder(&summaries, false),
		ContextWindow: map[string]int{"up-model": 1000}})
	params := openai.ChatCompletionNewParams{Model: "gpt-x", Messages: longHistory()}
	for _, key := range []string{"sk-client", "sk-other"} {
		resp, err := h.client.Chat.Completions.New(context.Background(), params, option.WithAPIKey(key))
		if err != nil || resp.Choices[0].Message.Content != "42." {
			t.Fatalf("%s: %v", key, err)
		}
	}
	if n := summaries.Load(); n != 2 {
		t.Fatalf("%d summary calls for two tenants' conversations, want 2 (one each)", n)
	}
	before := len(h.mock.Requests())
	_, err := h.client.Chat.Completions.New(context.Background(), params, option.WithAPIKey("sk-third"))
	if err == nil {
		t.Fatal("a tenant refused the summary model was answered (summary_fallback is error)")
	}
	for _, r := range h.mock.Requests()[before:] {
		if strings.Contains(string(r.Body), "SUMMARY: foxes") {
			t.Fatalf("a tenant refused the summary model got another tenant's summary: %s", r.Body)
		}
	}
	if n := summaries.Load(); n != 2 {
		t.Fatalf("%d summary calls: the refused tenant's was made", n)
	}
}

// A summary too long to fit is kept briefly, marked unfit: the
// conversation's next request within that time goes to summary_fallback
// without asking the summary model again (contextedit's
// TestUnfitSummaryIsKeptBriefly follows it past that, never to a day of
// 400s). The summary request carries no tools: the server tools the
// calculator offers every model are for the conversation, not for its
// summary.
func TestUnfitSummaryIsNotAskedForAgainAtOnce(t *testing.T) {
	t.Parallel()
	var summaries atomic.Int64
	h := newHarness(t, summarizeConfig, mockllm.Options{ContextWindow: map[string]int{"up-model": 1000},
		Respond: func(c *mockllm.Call) mockllm.Turn {
			if c.Model == "up-sum" {
				summaries.Add(1)
				return mockllm.Turn{Text: strings.Repeat("the summary goes on and on ", 400)}
			}
			return mockllm.Turn{Text: "42."}
		}})
	params := openai.ChatCompletionNewParams{Model: "gpt-x", Messages: longHistory()}
	for i := 0; i < 2; i++ {
		_, err := h.client.Chat.Completions.New(context.Background(), params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.Code != "context_length_exceeded" {
			t.Fatalf("request %d, a summary that does not fit: %v, want context_length_exceeded", i, err)
		}
	}
	if n := summaries.Load(); n != 1 {
		t.Fatalf("%d summary calls, want 1: the unfit summary was asked for again at once", n)
	}
	for _, r := range h.mock.Requests() {
		if r.Model == "up-sum" && gjson.GetBytes(r.Body, "tools").Exists() {
			t.Fatalf("the summary request offered tools: %s", gjson.GetBytes(r.Body, "tools").Raw)
		}
	}
}
