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
