package main

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/mockllm"
)

func TestResponder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		replyBytes int
		model      string
		status     int
		retry      string
		textPrefix string
		textLen    int
	}{
		{name: "fail-429", model: "fail-429", status: 429, retry: "1"},
		{name: "fail-500", model: "fail-500", status: 500},
		{name: "fail with junk is a normal model", model: "fail-abc", textPrefix: "Hello from the demo model."},
		{name: "demo", model: "gpt-x", textPrefix: "Hello from the demo model."},
		{name: "fixed reply", model: "gpt-x", replyBytes: 1000, textLen: 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			turn := responder(tc.replyBytes)(&mockllm.Call{Model: tc.model, LastRole: "user", LastText: "hi"})
			if tc.status != 0 {
				if turn.Fault == nil || turn.Fault.Status != tc.status || turn.Fault.RetryAfter != tc.retry {
					t.Fatalf("fault %+v", turn.Fault)
				}
				return
			}
			if turn.Fault != nil || !strings.HasPrefix(turn.Text, tc.textPrefix) || (tc.textLen > 0 && len(turn.Text) != tc.textLen) {
				t.Fatalf("turn %+v", turn)
			}
		})
	}
}

// tools-N counts the results of both forms: chat's tool messages and the
// Messages API's tool_result blocks (it looped to max_iterations on an
// Anthropic provider).
func TestToolResultsBothForms(t *testing.T) {
	t.Parallel()
	chat := `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[]},{"role":"tool","content":"1"},{"role":"tool","content":"2"}]}`
	msgs := `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use"}]},{"role":"user","content":[{"type":"tool_result","content":"1"},{"type":"tool_result","content":"2"}]}]}`
	for _, b := range []string{chat, msgs} {
		if n := toolResults([]byte(b)); n != 2 {
			t.Errorf("%s: %d results, want 2", b, n)
		}
	}
}
