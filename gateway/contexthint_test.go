package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// The loop passes each round's usage.prompt_tokens to context editing
// (pipeline.Request.PromptHint): when the upstream reports a prompt over the
// trigger (2000), the next round clears older results although the
// gateway's own count of the transcript is far under it.
func TestContextEditPromptHint(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "a short page about the quick brown fox and the lazy dog")
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name    string
		prompt  int
		cleared string
	}{
		{name: "upstream count under the trigger", prompt: 100, cleared: "..."},
		{name: "upstream count over the trigger", prompt: 3000, cleared: "xx."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, strings.ReplaceAll(editLoopConfig, "{{HTTP}}", srv.URL), mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
				u := &mockllm.Usage{Prompt: tc.prompt, Completion: 1}
				if n := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array()); n < 3 {
					return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "fetch_page", Arguments: `{"page":1}`}}, Usage: u}
				}
				return mockllm.Turn{Text: "done", Usage: u}
			}})
			p := userMsg("short pages")
			p.Model = "gpt-edit"
			if _, err := h.client.Chat.Completions.New(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			bodies := chatBodies(h, "up-model")
			got := ""
			for _, c := range toolContents(bodies[len(bodies)-1]) {
				if c == placeholder {
					got += "x"
				} else {
					got += "."
				}
			}
			if got != tc.cleared {
				t.Fatalf("last round clears %q, want %q", got, tc.cleared)
			}
		})
	}
}
