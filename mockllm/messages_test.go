package mockllm

import (
	"context"
	"errors"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/tidwall/gjson"
)

// sdkClient is the official Anthropic client pointed at a mock.
func sdkClient(addr string) sdk.Client {
	return sdk.NewClient(option.WithBaseURL("http://"+addr+"/"), option.WithAPIKey("sk-ant-test"), option.WithMaxRetries(0))
}

// The mock's Messages answers are read by the official SDK, stream and
// JSON alike: a text block, thinking, and tool_use blocks whose input
// arrives in fragments cut inside strings and (with SplitWrites) inside
// multi-byte characters on the wire.
func TestMessagesAnswersReadBySDK(t *testing.T) {
	t.Parallel()
	turn := Turn{Thinking: "Let me think", Text: "Héllo wörld 🌍",
		ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city":"Köln 🌧","unit":"c"}`}, {ID: "toolu_x", Name: "now"}},
		Usage:     &Usage{Prompt: 100, Completion: 7, Cached: 60, CacheWrite: 30}}
	_, addr := start(t, Options{Respond: func(*Call) Turn { return turn }, Chunking: Chunking{ArgBytes: 3, SplitWrites: true}})
	c := sdkClient(addr)
	params := sdk.MessageNewParams{Model: "claude-test", MaxTokens: 100,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}}
	check := func(t *testing.T, m *sdk.Message) {
		t.Helper()
		if len(m.Content) != 4 || m.Content[0].Thinking != "Let me think" || m.Content[1].Text != "Héllo wörld 🌍" ||
			m.Content[2].Name != "get_weather" || string(m.Content[2].Input) != `{"city":"Köln 🌧","unit":"c"}` ||
			m.Content[3].ID != "toolu_x" || string(m.Content[3].Input) != "{}" {
			t.Errorf("content %+v", m.Content)
		}
		if m.StopReason != "tool_use" || m.Usage.InputTokens != 10 || m.Usage.CacheReadInputTokens != 60 ||
			m.Usage.CacheCreationInputTokens != 30 || m.Usage.OutputTokens != 7 {
			t.Errorf("stop %q usage %+v", m.StopReason, m.Usage)
		}
	}
	t.Run("stream", func(t *testing.T) {
		s := c.Messages.NewStreaming(context.Background(), params)
		var m sdk.Message
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		check(t, &m)
	})
	t.Run("json", func(t *testing.T) {
		m, err := c.Messages.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		check(t, m)
	})
}

func TestMessagesErrors(t *testing.T) {
	t.Parallel()
	s, addr := start(t, Options{ContextWindow: map[string]int{"small": 10}, Respond: func(c *Call) Turn {
		switch c.Model {
		case "busy":
			return Turn{Fault: &Fault{Status: 529, RetryAfter: "1"}}
		case "midway":
			return Turn{Text: "abcdefgh", Fault: ErrorEventFault(4, "", "Overloaded")}
		}
		return Turn{Text: "ok"}
	}})
	c := sdkClient(addr)
	user := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock(strings.Repeat("long prompt ", 20)))}
	_, err := c.Messages.New(context.Background(), sdk.MessageNewParams{Model: "small", MaxTokens: 10, Messages: user})
	var ae *sdk.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.RawJSON(), "prompt is too long") {
		t.Errorf("context window: %v", err)
	}
	_, err = c.Messages.New(context.Background(), sdk.MessageNewParams{Model: "busy", MaxTokens: 10, Messages: user})
	if !errors.As(err, &ae) || ae.StatusCode != 529 || gjson.Get(ae.RawJSON(), "error.type").Str != "overloaded_error" {
		t.Errorf("overloaded: %v", err)
	}
	st := c.Messages.NewStreaming(context.Background(), sdk.MessageNewParams{Model: "midway", MaxTokens: 10, Messages: user})
	n := 0
	for st.Next() {
		n++
	}
	// Four events before the error: message_start, content_block_start,
	// ping (which the SDK does not surface) and one delta.
	if st.Err() == nil || n != 3 || !strings.Contains(st.Err().Error(), "Overloaded") {
		t.Errorf("error event after %d events: %v", n, st.Err())
	}
	if s.Calls("midway") != 1 {
		t.Errorf("calls %d", s.Calls("midway"))
	}
}

// The mock refuses what Anthropic refuses, in Anthropic's envelope.
func TestMessagesValidation(t *testing.T) {
	t.Parallel()
	_, addr := start(t, Options{})
	cc := `,"cache_control":{"type":"ephemeral"}`
	tests := []struct{ name, body, want string }{
		{"max_tokens", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"first role", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":"x"}]}`, "roles must alternate"},
		{"repeated role", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}`, "roles must alternate"},
		{"system role", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "roles must alternate"},
		{"unanswered tool_use", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"y"}]}`, "without tool_result"},
		{"last tool_use", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "without tool_result"},
		{"stray tool_result", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9"}]}]}`, "unexpected tool_use_id"},
		{"result after text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","tool_use_id":"t1"}]}]}`, "must come first"},
		{"empty text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "non-empty"},
		{"five markers", `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"` + cc + `}],"tools":[{"name":"a","input_schema":{"type":"object"}` + cc + `}],"messages":[{"role":"user","content":[{"type":"text","text":"a"` + cc + `},{"type":"text","text":"b"` + cc + `},{"type":"text","text":"c"` + cc + `}]}]}`, "maximum of 4 blocks"},
		{"tool without schema", `{"model":"m","max_tokens":5,"tools":[{"name":"a"}],"messages":[{"role":"user","content":"x"}]}`, "input_schema"},
		{"thinking with a forced call", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024},"tools":[{"name":"a","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice forces tool use"},
		{"thinking, tool turn without its block", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`, "must start with a thinking block"},
		{"thinking, forged signature", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"forged"},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`, "Invalid `signature`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := do(t, addr, "POST", "/v1/messages", tc.body, "anthropic-version", "2023-06-01")
			if r.status != 400 || gjson.GetBytes(r.body, "type").Str != "error" ||
				gjson.GetBytes(r.body, "error.type").Str != "invalid_request_error" || !strings.Contains(gjson.GetBytes(r.body, "error.message").Str, tc.want) {
				t.Errorf("%d %s", r.status, r.body)
			}
		})
	}
	r := do(t, addr, "POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`)
	if r.status != 400 || !strings.Contains(string(r.body), "anthropic-version") {
		t.Errorf("no version header: %d %s", r.status, r.body)
	}
}

// A user turn of tool results alone is the chat form's tool messages to the
// responders (LastRole "tool"), so the demo answers with the results in
// Messages mode as in chat; a turn with text after its results is the
// user's.
func TestMessagesToolResultsAreToolTurn(t *testing.T) {
	t.Parallel()
	calls := make(chan *Call, 2)
	_, addr := start(t, Options{Respond: func(c *Call) Turn { calls <- c; return Turn{Text: "ok"} }})
	c := sdkClient(addr)
	use := sdk.NewAssistantMessage(sdk.NewToolUseBlock("toolu_1", map[string]any{}, "calc"))
	for _, tc := range []struct {
		name string
		last sdk.MessageParam
		want string
	}{
		{"results alone", sdk.NewUserMessage(sdk.NewToolResultBlock("toolu_1", "14", false)), "tool"},
		{"results and text", sdk.NewUserMessage(sdk.NewToolResultBlock("toolu_1", "14", false), sdk.NewTextBlock("and?")), "user"},
	} {
		_, err := c.Messages.New(context.Background(), sdk.MessageNewParams{Model: "m", MaxTokens: 10,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi")), use, tc.last}})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-calls; got.LastRole != tc.want || len(got.ToolResults) != 1 || got.ToolResults[0] != "14" {
			t.Errorf("%s: LastRole %q, results %q", tc.name, got.LastRole, got.ToolResults)
		}
	}
}
