package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// approvalConfig: delete_file (an http tool) needs approval; calculator
// runs as usual. Two tenants; {{HTTP}} is the delete_file server.
const approvalConfig = baseConfig + `
[[tools]]
name = "calculator"
kind = "builtin"
[[tools]]
name = "delete_file"
kind = "http"
url = "{{HTTP}}"
approval = "always"
parameters = '{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}'
[[keys]]
tenant = "acme"
key = "sk-client"
[[keys]]
tenant = "globex"
key = "sk-other"
`

// sideEffects records the arguments of every call that reached the gated
// tool's server.
type sideEffects struct {
	mu   sync.Mutex
	args []string
}

func (s *sideEffects) runs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.args...)
}

func newSideEffects(t *testing.T) (*sideEffects, string) {
	s := &sideEffects{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.args = append(s.args, string(b))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"deleted":` + gjson.GetBytes(b, "path").Raw + `}`))
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// approvalResponder: a user message makes one turn with a server call
// (calculator) and a gated one (delete_file); after the tool results it
// answers with every trailing result.
func approvalResponder(c *mockllm.Call) mockllm.Turn {
	if c.LastRole == "user" {
		return mockllm.Turn{Text: "Let me clean up.", ToolCalls: []mockllm.ToolCall{
			{Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{Name: "delete_file", Arguments: `{"path":"/tmp/a"}`},
		}}
	}
	return mockllm.Turn{Text: "Final: " + strings.Join(c.ToolResults, " | ")}
}

func approvalHarness(t *testing.T, extra string) (*harness, *sideEffects) {
	se, url := newSideEffects(t)
	h := newHarness(t, strings.ReplaceAll(approvalConfig, "{{HTTP}}", url)+extra, mockllm.Options{Respond: approvalResponder})
	return h, se
}

// ask sends p as a stream (every chunk through the wire checker and the
// schema) or as JSON, and returns the message, finish reason, x_gateway and
// the response headers.
func (h *harness) ask(t *testing.T, p openai.ChatCompletionNewParams, stream bool, schema *wiretest.Schema, opts ...option.RequestOption) (openai.ChatCompletionMessage, string, gjson.Result, http.Header) {
	t.Helper()
	if stream {
		acc, sum, err := h.streamChat(p, wiretest.Options{}, schema, opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, hdr := h.lastRaw()
		return acc.Choices[0].Message, sum.FinishReason, gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway"), hdr
	}
	resp, err := h.client.Chat.Completions.New(context.Background(), p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	raw, hdr := h.lastRaw()
	if err := schema.Completion(raw); err != nil {
		t.Fatalf("schema: %v\n%s", err, raw)
	}
	return resp.Choices[0].Message, string(resp.Choices[0].FinishReason), gjson.GetBytes(raw, "x_gateway"), hdr
}

// pause sends the first request and checks the gated call came back for
// approval without running; it returns the request and the message.
func pause(t *testing.T, h *harness, se *sideEffects, prompt string, stream bool, schema *wiretest.Schema, opts ...option.RequestOption) (openai.ChatCompletionNewParams, openai.ChatCompletionMessage) {
	t.Helper()
	p := userMsg(prompt)
	before := len(se.runs())
	msg, finish, xg, hdr := h.ask(t, p, stream, schema, opts...)
	if finish != "tool_calls" || len(msg.ToolCalls) != 1 {
		t.Fatalf("finish %q, calls %+v", finish, msg.ToolCalls)
	}
	c := msg.ToolCalls[0]
	if c.Function.Name != "delete_file" || c.Function.Arguments != `{"path":"/tmp/a"}` || !strings.HasPrefix(c.ID, "call_gwa_") {
		t.Fatalf("call handed over %+v", c)
	}
	if got := xg.Get("awaiting_approval.#.id").Array(); len(got) != 1 || got[0].Str != c.ID || xg.Get("awaiting_approval.0.name").Str != "delete_file" {
		t.Fatalf("x_gateway %s", xg.Raw)
	}
	if !stream && hdr.Get("X-Gateway-Approval") != "pending" {
		t.Fatalf("x-gateway-approval %q", hdr.Get("X-Gateway-Approval"))
	}
	if len(se.runs()) != before {
		t.Fatal("the gated tool ran without a decision")
	}
	return p, msg
}

// answer is the client's follow-up: its history, the assistant message, and
// content as the tool message for the gated call.
func answer(p openai.ChatCompletionNewParams, msg openai.ChatCompletionMessage, content string) openai.ChatCompletionNewParams {
	f := p
	f.Messages = append(append([]openai.ChatCompletionMessageParamUnion(nil), p.Messages...), msg.ToParam(),
		openai.ToolMessage(content, msg.ToolCalls[0].ID))
	return f
}

// gatedResult is the content of the gated call's tool message in the last
// upstream request.
func gatedResult(t *testing.T, h *harness, id string) string {
	t.Helper()
	for _, m := range gjson.GetBytes(lastUpstream(h), "messages").Array() {
		if m.Get("role").Str == "tool" && m.Get("tool_call_id").Str == id {
			return m.Get("content").Str
		}
	}
	t.Fatalf("no tool message for %s upstream: %s", id, lastUpstream(h))
	return ""
}

func TestApprovalDecisions(t *testing.T) {
	t.Parallel()
	h, se := approvalHarness(t, "")
	schema := wiretest.LoadSchema(t)
	cases := []struct {
		name     string
		content  string
		wantRun  string // the arguments the tool ran with; "" = not run
		wantSeen string // in the result the model sees
	}{
		{name: "approve", content: `{"decision":"approve"}`, wantRun: `{"path":"/tmp/a"}`, wantSeen: `"deleted":"/tmp/a"`},
		{name: "edit", content: `{"decision":"edit","arguments":{"path":"/tmp/b"}}`, wantRun: `{"path":"/tmp/b"}`, wantSeen: `"arguments_edited_by_user":{"path":"/tmp/b"}`},
		{name: "invalid edit", content: `{"decision":"edit","arguments":{"path":5}}`, wantSeen: `"invalid_arguments"`},
		{name: "edit without arguments", content: `{"decision":"edit"}`, wantSeen: `"invalid_arguments"`},
		{name: "reject", content: `{"decision":"reject","message":"keep that file"}`, wantSeen: `keep that file`},
		{name: "unknown decision", content: `{"decision":"maybe"}`, wantSeen: `"invalid_decision"`},
		{name: "free text", content: `I moved it to the archive myself.`, wantSeen: `"answered_by":"user","data":"I moved it to the archive myself."`},
	}
	for _, stream := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name + map[bool]string{true: " stream", false: " json"}[stream]
			t.Run(name, func(t *testing.T) {
				p, msg := pause(t, h, se, "clean up ("+name+")", stream, schema)
				before := len(se.runs())
				final, finish, _, _ := h.ask(t, answer(p, msg, tc.content), stream, schema)
				runs := se.runs()[before:]
				switch {
				case tc.wantRun == "" && len(runs) != 0:
					t.Fatalf("the tool ran: %v", runs)
				case tc.wantRun != "" && (len(runs) != 1 || runs[0] != tc.wantRun):
					t.Fatalf("tool runs %v, want one with %s", runs, tc.wantRun)
				}
				seen := gatedResult(t, h, msg.ToolCalls[0].ID)
				if !strings.Contains(seen, tc.wantSeen) || strings.Contains(seen, `"decision"`) {
					t.Fatalf("the model saw %s", seen)
				}
				// The hidden server call of the same turn was kept and spliced back.
				if got := upstreamShape(lastUpstream(h)); got != "user assistant(calculator,delete_file) tool tool" {
					t.Fatalf("upstream history %q", got)
				}
				if finish != "stop" || !strings.HasPrefix(final.Content, "Final: ") || !strings.Contains(final.Content, `"result":42`) {
					t.Fatalf("final %q (%s)", final.Content, finish)
				}
				// Replaying the same history runs nothing again and shows the model the same result.
				before = len(se.runs())
				h.ask(t, answer(p, msg, tc.content), stream, schema)
				if n := len(se.runs()) - before; n != 0 {
					t.Fatalf("a replayed decision ran the tool %d more times", n)
				}
				if again := gatedResult(t, h, msg.ToolCalls[0].ID); again != seen {
					t.Fatalf("replay shows %s, first %s", again, seen)
				}
			})
		}
	}
}

// TestApprovalWrongTenant: a decision sent with another tenant's key is
// refused (an error result), the tool does not run, and the decision JSON
// never reaches the model.
func TestApprovalWrongTenant(t *testing.T) {
	t.Parallel()
	h, se := approvalHarness(t, "")
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{false, true} {
		p, msg := pause(t, h, se, "wrong tenant", stream, schema)
		_, _, _, _ = h.ask(t, answer(p, msg, `{"decision":"approve"}`), stream, schema, option.WithAPIKey("sk-other"))
		if len(se.runs()) != 0 {
			t.Fatal("another tenant's decision ran the tool")
		}
		seen := gatedResult(t, h, msg.ToolCalls[0].ID)
		if !strings.Contains(seen, `"approval_invalid"`) || strings.Contains(seen, `"decision"`) {
			t.Fatalf("the model saw %s", seen)
		}
		// The owner's decision still works afterwards.
		h.ask(t, answer(p, msg, `{"decision":"approve"}`), stream, schema)
		if n := len(se.runs()); n != 1 {
			t.Fatalf("owner's approval ran the tool %d times", n)
		}
		se.mu.Lock()
		se.args = nil
		se.mu.Unlock()
	}
}

// TestApprovalExpired: after state_ttl the gateway still knows its own id
// and tells the model the approval expired; the tool does not run.
func TestApprovalExpired(t *testing.T) {
	t.Parallel()
	h, se := approvalHarness(t, "[tool_loop]\nstate_ttl = \"1ms\"\n")
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{false, true} {
		p, msg := pause(t, h, se, "expire", stream, schema)
		time.Sleep(20 * time.Millisecond)
		final, _, _, _ := h.ask(t, answer(p, msg, `{"decision":"approve"}`), stream, schema)
		if len(se.runs()) != 0 {
			t.Fatal("an expired approval ran the tool")
		}
		seen := gatedResult(t, h, msg.ToolCalls[0].ID)
		if !strings.Contains(seen, `"approval_expired"`) || strings.Contains(seen, `"decision"`) {
			t.Fatalf("the model saw %s", seen)
		}
		if !strings.Contains(final.Content, "approval_expired") {
			t.Fatalf("final %q", final.Content)
		}
	}
}

// TestApprovalToolsPerTenant: approval_tools replaces the tools' settings
// for a tenant: acme needs none (delete_file runs at once), globex needs it
// for calculator too.
func TestApprovalToolsPerTenant(t *testing.T) {
	t.Parallel()
	h, se := approvalHarness(t, `
[[policies]]
tenant = "acme"
approval_tools = []
[[policies]]
tenant = "globex"
approval_tools = ["calc*", "delete_file"]
`)
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if len(se.runs()) != 1 || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("acme: runs %v, finish %s", se.runs(), resp.Choices[0].FinishReason)
	}
	resp, err = h.client.Chat.Completions.New(context.Background(), userMsg("globex"), option.WithAPIKey("sk-other"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range resp.Choices[0].Message.ToolCalls {
		names = append(names, c.Function.Name)
		if !strings.HasPrefix(c.ID, "call_gwa_") { // a turn of gated calls only: no server call ran
			t.Fatalf("call %+v handed out without an approval id", c)
		}
	}
	if strings.Join(names, ",") != "calculator,delete_file" || len(se.runs()) != 1 {
		t.Fatalf("globex: calls %v, runs %v", names, se.runs())
	}
}

// TestNodeSDKApprovalRunTools runs test/node/approval.mjs: the openai npm
// package's runTools() with a client function named after the gated tool
// that returns the decision (the README's recipe), streamed and not.
func TestNodeSDKApprovalRunTools(t *testing.T) {
	t.Parallel()
	skipWithoutNode(t)
	h, se := approvalHarness(t, "")
	out := runNode(t, "approval.mjs", "GATEWAY_BASE_URL="+h.base, "GATEWAY_API_KEY=sk-client")
	if !strings.Contains(out, "stream=false: ok") || !strings.Contains(out, "stream=true: ok") {
		t.Fatalf("node output: %s", out)
	}
	if runs := se.runs(); len(runs) != 2 || runs[0] != `{"path":"/tmp/a"}` {
		t.Fatalf("the gated tool ran %v", runs)
	}
}

// TestNodeAgentsApproval runs test/node/agents-approval.mjs: an
// @openai/agents run that declares the gateway as a hosted MCP server gets
// the gated call as an interruption, approves it and resumes to the tool's
// result, streamed and not (the README's recipe).
func TestNodeAgentsApproval(t *testing.T) {
	t.Parallel()
	skipWithoutNode(t)
	h, se := approvalHarness(t, "")
	out := runNode(t, "agents-approval.mjs", "GATEWAY_BASE_URL="+h.base, "GATEWAY_API_KEY=sk-client")
	if !strings.Contains(out, "stream=false: ok") || !strings.Contains(out, "stream=true: ok") {
		t.Fatalf("node output: %s", out)
	}
	if runs := se.runs(); len(runs) != 2 {
		t.Fatalf("the gated tool ran %v", runs)
	}
}

// TestApprovalDecisionRunsOnce: one approval runs the gated call once,
// whether the answer comes in concurrent requests or twice in one request's
// history; the others see the decided result or an error result.
func TestApprovalDecisionRunsOnce(t *testing.T) {
	t.Parallel()
	h, se := approvalHarness(t, "")
	schema := wiretest.LoadSchema(t)

	p, msg := pause(t, h, se, "racing approvals", false, schema)
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = h.client.Chat.Completions.New(context.Background(), answer(p, msg, `{"decision":"approve"}`))
		}()
	}
	wg.Wait()
	if n := len(se.runs()); n != 1 {
		t.Fatalf("6 concurrent requests with one approval ran the tool %d times", n)
	}

	p, msg = pause(t, h, se, "approval given twice", false, schema)
	twice := answer(p, msg, `{"decision":"approve"}`)
	twice.Messages = append(twice.Messages, openai.ToolMessage(`{"decision":"approve"}`, msg.ToolCalls[0].ID))
	_, _ = h.client.Chat.Completions.New(context.Background(), twice)
	if n := len(se.runs()); n != 2 {
		t.Fatalf("an approval given twice in one request ran the tool %d times", n-1)
	}
}
