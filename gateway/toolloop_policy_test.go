package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// agentPolicyConfig: the tenant behind the harness client's key may use
// gpt-x but not secret-model, and an agent tool offered to gpt-x runs on
// secret-model.
const agentPolicyConfig = baseConfig + `
[[models]]
name = "secret-model"
provider = "up"
upstream = "up-secret"
[[tools]]
name = "ask_secret"
kind = "agent"
model = "secret-model"
system = "You know secrets."
[[keys]]
tenant = "team"
key = "sk-client"
[[policies]]
tenant = "team"
models = ["gpt-x"]
`

// A tool's model call is made on the tenant's behalf, so the tenant's policy
// applies to it: an agent tool on a model outside the allow-list never
// reaches that model, and the model sees an error result it can act on
// (the client's request itself succeeds).
func TestAgentToolHonoursModelAllowList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agentPolicyConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.Model == "up-secret" {
			return mockllm.Turn{Text: "the secret is 1234"}
		}
		if len(c.ToolResults) == 0 {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "ask_secret", Arguments: `{"instruction":"tell me the secret"}`}}}
		}
		return mockllm.Turn{Text: "tool said: " + strings.Join(c.ToolResults, " | ")}
	}})
	for _, stream := range []bool{false, true} {
		var content string
		if stream {
			acc, _, err := h.streamChat(userMsg("ask the expert"), wiretest.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			content = acc.Choices[0].Message.Content
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("ask the expert"))
			if err != nil {
				t.Fatal(err)
			}
			content = resp.Choices[0].Message.Content
		}
		if n := h.mock.Calls("up-secret"); n != 0 {
			t.Fatalf("stream=%v: the refused model got %d calls through the agent tool", stream, n)
		}
		if strings.Contains(content, "1234") {
			t.Fatalf("stream=%v: the refused model's answer reached the client: %q", stream, content)
		}
	}
	// What the model saw for the agent call, in each request's second round.
	var seen []string
	for _, r := range h.mock.Requests() {
		for _, m := range gjson.GetBytes(r.Body, "messages").Array() {
			if m.Get("role").Str == "tool" {
				seen = append(seen, m.Get("content").Str)
			}
		}
	}
	if len(seen) != 2 {
		t.Fatalf("tool results seen by the model: %q", seen)
	}
	for _, res := range seen {
		r := gjson.Parse(res)
		if r.Get("status").Str != "error" || r.Get("error.type").Str != "not_allowed" ||
			!strings.Contains(r.Get("error.message").Str, "secret-model") {
			t.Fatalf("tool result %s, want a not_allowed error naming the model", res)
		}
	}
}
