package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// todosConfig offers write_todos to gpt-x only; {{SYSTEM}} is replaced by
// the tool's system key (or nothing).
const todosConfig = baseConfig + `
[[models]]
name = "plain"
provider = "up"
upstream = "up-plain"
[[tools]]
name = "write_todos"
kind = "builtin"
models = ["gpt-x"]
{{SYSTEM}}
[[tools]]
name = "calculator"
kind = "builtin"
`

// The plan of the scripted run: written, updated, completed.
var planRounds = []string{
	`[{"content":"Find the data","status":"in_progress"},{"content":"Compute the total","status":"pending"},{"content":"Write the summary","status":"pending"}]`,
	`[{"content":"Find the data","status":"completed"},{"content":"Compute the total","status":"in_progress"},{"content":"Write the summary","status":"pending"}]`,
	`[{"content":"Find the data","status":"completed"},{"content":"Compute the total","status":"completed"},{"content":"Write the summary","status":"completed"}]`,
}

// planModel writes, updates and completes the plan in three rounds, then
// answers. Any other model answers "plain".
func planModel(c *mockllm.Call) mockllm.Turn {
	if c.Model != "up-model" {
		return mockllm.Turn{Text: "plain"}
	}
	n := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array())
	if n < len(planRounds) {
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "write_todos", Arguments: `{"todos":` + planRounds[n] + `}`}}}
	}
	return mockllm.Turn{Text: "All three steps are done."}
}

// A scripted run writes, updates and completes a plan across three rounds:
// every result returns the list, the final list is x_gateway.todos of the
// JSON answer and of the stream's last chunk (without tool_trace), and every
// round's request carries the default prompt addition after the client's
// own system prompt.
func TestWriteTodosPlan(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(todosConfig, "{{SYSTEM}}", "", 1), mockllm.Options{Respond: planModel})
	schema := wiretest.LoadSchema(t)
	p := openai.ChatCompletionNewParams{Model: "gpt-x", Messages: []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are helpful."), openai.UserMessage("summarise the data in three steps"),
	}}
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "stream"}[stream]
		h.mock.ResetRecords()
		var content string
		var xg gjson.Result
		if stream {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: true}, schema)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			content, xg = acc.Choices[0].Message.Content, gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway")
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			raw, _ := h.lastRaw()
			if err := schema.Completion(raw); err != nil {
				t.Fatal(err)
			}
			content, xg = resp.Choices[0].Message.Content, gjson.GetBytes(raw, "x_gateway")
		}
		if content != "All three steps are done." {
			t.Errorf("%s: content %q", name, content)
		}
		if got := xg.Get("todos").Raw; got != planRounds[2] {
			t.Errorf("%s: x_gateway.todos %s, want the completed plan %s", name, got, planRounds[2])
		}
		if xg.Get("tool_calls").Exists() {
			t.Errorf("%s: x_gateway carries the trace without tool_trace: %s", name, xg.Raw)
		}
		reqs := h.mock.Requests()
		if len(reqs) != 4 {
			t.Fatalf("%s: %d model calls, want 4", name, len(reqs))
		}
		for i, r := range reqs {
			sys := gjson.GetBytes(r.Body, "messages.0")
			if sys.Get("role").Str != "system" || !strings.HasPrefix(sys.Get("content").Str, "You are helpful.\n\n## Planning with write_todos") {
				t.Errorf("%s: round %d's first message %s, want the client's system prompt and the addition", name, i+1, sys.Raw)
			}
			if n := len(gjson.GetBytes(r.Body, `messages.#(role=="system")#`).Array()); n != 1 {
				t.Errorf("%s: round %d has %d system messages", name, i+1, n)
			}
			if i == 0 {
				continue
			}
			res := gjson.GetBytes(r.Body, `messages.#(role=="tool")#.content`).Array()
			if got := gjson.Get(res[i-1].Str, "data.todos").Raw; got != planRounds[i-1] {
				t.Errorf("%s: round %d got the result %s, want the list %s", name, i+1, res[i-1].Str, planRounds[i-1])
			}
		}
	}
}

// The prompt addition is the tool's system key; a model the tool is not
// offered to gets neither the tool nor the prompt, nor x_gateway.todos.
func TestWriteTodosPromptAndModels(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(todosConfig, "{{SYSTEM}}", `system = "Plan briefly."`, 1), mockllm.Options{Respond: planModel})
	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("plan it")); err != nil {
		t.Fatal(err)
	}
	first := h.mock.Requests()[0].Body
	if got := gjson.GetBytes(first, "messages.0").Raw; got != `{"role":"system","content":"Plan briefly."}` {
		t.Errorf("first message %s, want the configured addition as a system message", got)
	}
	if gjson.GetBytes(first, "messages.1.role").Str != "user" {
		t.Errorf("the client's message moved: %s", gjson.GetBytes(first, "messages").Raw)
	}

	h.mock.ResetRecords()
	p := userMsg("plan it")
	p.Model = "plain"
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	body := h.mock.Requests()[0].Body
	if strings.Contains(string(body), "write_todos") || strings.Contains(string(body), "Plan briefly.") {
		t.Errorf("the plain model was offered write_todos or its prompt: %s", body)
	}
	raw, _ := h.lastRaw()
	if resp.Choices[0].Message.Content != "plain" || gjson.GetBytes(raw, "x_gateway").Exists() {
		t.Errorf("plain answer %s", raw)
	}
}

// A tenant whose policy does not list write_todos gets neither the tool nor
// its prompt on a model the tool is offered to.
func TestWriteTodosTenantPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(todosConfig, "{{SYSTEM}}", "", 1)+`
[[keys]]
tenant = "team"
key = "sk-client"
[[policies]]
tenant = "team"
tools = ["calculator"]
`, mockllm.Options{Respond: planModel})
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("plan it"))
	if err != nil {
		t.Fatal(err)
	}
	body := h.mock.Requests()[0].Body
	if strings.Contains(string(body), "write_todos") || !strings.Contains(string(body), `"calculator"`) {
		t.Errorf("the tenant's request offered write_todos or its prompt, or lost the calculator: %s", body)
	}
	if resp.Choices[0].FinishReason != "stop" || len(resp.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("answer %+v", resp.Choices[0])
	}
}

// An upstream error that names a message by index names the client's: the
// system message write_todos puts in front of the client's messages shifts
// the upstream's indices by one, and the client sees its own. The stream of
// the same request ends with the same param.
func TestUpstreamErrorParamNamesTheClientsMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(todosConfig, "{{SYSTEM}}", "", 1), mockllm.Options{Respond: planModel})
	// The tool message answers no call: the mock (as OpenAI) refuses it,
	// naming messages.[3] of what it received (the gateway's system message
	// first), which is the client's messages.[2].
	msgs := `[{"role":"user","content":"plan it"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"nope","content":"r"}]`
	for _, stream := range []bool{false, true} {
		body := `{"model":"gpt-x","messages":` + msgs
		if stream {
			body += `,"stream":true`
		}
		status, _, out := h.post("/chat/completions", body+`}`, nil)
		if stream && status == 200 {
			out = []byte(gjson.Get(strings.TrimPrefix(lastDataLine(string(out)), "data: "), "error").Raw)
			out = []byte(`{"error":` + string(out) + `}`)
		} else if status != 400 {
			t.Fatalf("stream %v: status %d: %s", stream, status, out)
		}
		if got := gjson.GetBytes(out, "error.param").String(); got != "messages.[2].tool_call_id" {
			t.Fatalf("stream %v: param %q, want the client's messages.[2].tool_call_id: %s", stream, got, out)
		}
	}
	// The message quotes the param, and names the client's message too.
	status, _, out := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"plan it"},`+
		`{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"lookup","arguments":"{}"}}]}]}`, nil)
	if msg := gjson.GetBytes(out, "error.message").String(); status != 400 || !strings.Contains(msg, "'messages.[1].tool_calls[].id'") {
		t.Fatalf("status %d, message %q: %s", status, msg, out)
	}
	// Without the system message (a model write_todos is not offered to),
	// the index passes as it is.
	status, _, out = h.post("/chat/completions", `{"model":"plain","messages":`+msgs+`}`, nil)
	if got := gjson.GetBytes(out, "error.param").String(); status != 400 || got != "messages.[2].tool_call_id" {
		t.Fatalf("status %d, param %q: %s", status, got, out)
	}
}

// lastDataLine returns the last "data: " line of an SSE body that is not
// [DONE].
func lastDataLine(body string) string {
	last := ""
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "data: ") && l != "data: [DONE]" {
			last = l
		}
	}
	return last
}
