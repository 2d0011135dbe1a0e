package gateway

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// mixedConfig has one server tool (calculator); the client brings lookup_city.
const mixedConfig = baseConfig + `
[[tools]]
name = "calculator"
kind = "builtin"
`

// mixedResponder: a user message starts a mixed turn (calculator and
// lookup_city together); "prior" first runs a server-only round, and
// "client only" runs one and then calls lookup_city alone. After the
// client's result, it answers with every trailing tool result.
func mixedResponder(c *mockllm.Call) mockllm.Turn {
	tools := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array())
	clientOnly := strings.Contains(gjson.GetBytes(c.Body, "messages.0.content").String(), "client only")
	switch {
	case c.LastRole == "user" && clientOnly:
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
	case clientOnly && tools == 1 && !hasClientResult(c):
		return mockllm.Turn{Text: "Checking.", ToolCalls: []mockllm.ToolCall{{Name: "lookup_city", Arguments: `{"name":"Zürich"}`}}}
	case c.LastRole == "user" && strings.Contains(c.LastText, "prior"):
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}}}
	case c.LastRole == "user" || (tools == 1 && !hasClientResult(c)):
		return mockllm.Turn{Text: "Checking.", ToolCalls: []mockllm.ToolCall{
			{Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{Name: "lookup_city", Arguments: `{"name":"Zürich"}`},
		}}
	default:
		return mockllm.Turn{Text: "Final: " + strings.Join(c.ToolResults, " | ")}
	}
}

// hasClientResult reports whether the history holds a result the client sent.
func hasClientResult(c *mockllm.Call) bool {
	return strings.Contains(string(c.Body), "inhabitants")
}

func cityTool() []openai.ChatCompletionToolUnionParam {
	return []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name:       "lookup_city",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}},
	})}
}

// followUp is the client's next request: its history plus one result per
// client call it was given.
func followUp(first openai.ChatCompletionNewParams, msg openai.ChatCompletionMessage) openai.ChatCompletionNewParams {
	p := first
	p.Messages = append(append([]openai.ChatCompletionMessageParamUnion(nil), first.Messages...), msg.ToParam())
	for _, c := range msg.ToolCalls {
		p.Messages = append(p.Messages, openai.ToolMessage("Zürich: 420000 inhabitants", c.ID))
	}
	return p
}

// upstreamShape summarises the messages of an upstream request: for each
// assistant message its tool names, for each tool message "tool".
func upstreamShape(body []byte) string {
	var out []string
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").Str {
		case "assistant":
			var names []string
			m.Get("tool_calls.#.function.name").ForEach(func(_, v gjson.Result) bool { names = append(names, v.Str); return true })
			out = append(out, "assistant("+strings.Join(names, ",")+")")
		default:
			out = append(out, m.Get("role").Str)
		}
		return true
	})
	return strings.Join(out, " ")
}

func lastUpstream(h *harness) []byte {
	r := h.mock.Requests()
	return r[len(r)-1].Body
}

func TestMixedTurnFollowUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mixedConfig, mockllm.Options{Respond: mixedResponder})
	schema := wiretest.LoadSchema(t)
	cases := []struct {
		name      string
		stream    bool
		prompt    string
		wantShape string
	}{
		{name: "stream", stream: true, prompt: "go",
			wantShape: "user assistant(calculator,lookup_city) tool tool"},
		{name: "blocking", prompt: "go",
			wantShape: "user assistant(calculator,lookup_city) tool tool"},
		{name: "stream after a server-only round", stream: true, prompt: "prior",
			wantShape: "user assistant(calculator) tool assistant(calculator,lookup_city) tool tool"},
		// A round of client calls only, after a server-only round: the
		// follow-up still carries the server round the client never saw.
		{name: "stream, client calls after a server round", stream: true, prompt: "client only",
			wantShape: "user assistant(calculator) tool assistant(lookup_city) tool"},
		{name: "blocking, client calls after a server round", prompt: "client only",
			wantShape: "user assistant(calculator) tool assistant(lookup_city) tool"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := userMsg(tc.prompt)
			p.Tools = cityTool()
			var msg openai.ChatCompletionMessage
			var finish string
			if tc.stream {
				acc, sum, err := h.streamChat(p, wiretest.Options{}, schema)
				if err != nil {
					t.Fatal(err)
				}
				msg, finish = acc.Choices[0].Message, sum.FinishReason
			} else {
				resp, err := h.client.Chat.Completions.New(context.Background(), p)
				if err != nil {
					t.Fatal(err)
				}
				msg, finish = resp.Choices[0].Message, resp.Choices[0].FinishReason
			}
			// Only the client call reaches the client.
			if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup_city" || finish != "tool_calls" {
				t.Fatalf("mixed turn returned %+v (finish %s)", msg.ToolCalls, finish)
			}
			// The follow-up carries only the client's result; upstream gets
			// the full history (the mock refuses unpaired calls with 400).
			fp := followUp(p, msg)
			var answer string
			if tc.stream {
				acc, _, err := h.streamChat(fp, wiretest.Options{}, schema)
				if err != nil {
					t.Fatal(err)
				}
				answer = acc.Choices[0].Message.Content
			} else {
				resp, err := h.client.Chat.Completions.New(context.Background(), fp)
				if err != nil {
					t.Fatal(err)
				}
				answer = resp.Choices[0].Message.Content
			}
			if got := upstreamShape(lastUpstream(h)); got != tc.wantShape {
				t.Fatalf("upstream history %q, want %q", got, tc.wantShape)
			}
			if (tc.prompt != "client only" && !strings.Contains(answer, `"result":42`)) || !strings.Contains(answer, "420000 inhabitants") {
				t.Fatalf("final answer %q", answer)
			}
		})
	}
}

// TestForcedFinalClientCallsKeepServerRounds: a forced final round (the
// loop's last, sent with tool_choice "none") whose model still calls a
// server tool beside a client tool hands the client call out and drops the
// server one; the server-only rounds before it are kept for the follow-up
// as any client round's are, so the follow-up does not start the task over
// and run the server tools again.
func TestForcedFinalClientCallsKeepServerRounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mixedConfig+"[tool_loop]\nmax_iterations = 2\n", mockllm.Options{Respond: mixedResponder})
	schema := wiretest.LoadSchema(t)
	for _, stream := range []bool{true, false} {
		p := userMsg("prior")
		p.Tools = cityTool()
		var msg openai.ChatCompletionMessage
		if stream {
			acc, _, err := h.streamChat(p, wiretest.Options{}, schema)
			if err != nil {
				t.Fatal(err)
			}
			msg = acc.Choices[0].Message
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			msg = resp.Choices[0].Message
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup_city" {
			t.Fatalf("stream=%v: the forced final round returned %+v", stream, msg.ToolCalls)
		}
		if got := gjson.GetBytes(lastUpstream(h), "tool_choice").Str; got != "none" {
			t.Fatalf("stream=%v: the last round was not the forced final one (tool_choice %q)", stream, got)
		}
		before := len(h.mock.Requests())
		if _, err := h.client.Chat.Completions.New(context.Background(), followUp(p, msg)); err != nil {
			t.Fatal(err)
		}
		reqs := h.mock.Requests()[before:]
		if want := "user assistant(calculator) tool assistant(lookup_city) tool"; len(reqs) != 1 || upstreamShape(reqs[0].Body) != want {
			shapes := []string{}
			for _, r := range reqs {
				shapes = append(shapes, upstreamShape(r.Body))
			}
			t.Fatalf("stream=%v: the follow-up's upstream rounds %q, want one: %q", stream, shapes, want)
		}
	}
}

// TestMixedTurnExpiredState: without the kept state the follow-up goes
// upstream as the client sent it; that history is valid (the mock checks
// it) and the request succeeds.
func TestMixedTurnExpiredState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mixedConfig+"[tool_loop]\nstate_ttl = \"1ms\"\n", mockllm.Options{Respond: mixedResponder})
	p := userMsg("go")
	p.Tools = cityTool()
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	final, err := h.client.Chat.Completions.New(context.Background(), followUp(p, resp.Choices[0].Message))
	if err != nil {
		t.Fatalf("follow-up after expiry: %v", err)
	}
	if got := upstreamShape(lastUpstream(h)); got != "user assistant(lookup_city) tool" {
		t.Fatalf("upstream history %q", got)
	}
	if c := final.Choices[0].Message.Content; !strings.Contains(c, "420000") || strings.Contains(c, `"result":42`) {
		t.Fatalf("answer %q", c)
	}
}

// TestMixedTurnsStayBounded: 200 mixed turns with state_max_entries = 50;
// the newest turns resume, the oldest were evicted (and still get a valid
// answer).
func TestMixedTurnsStayBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mixedConfig+"[tool_loop]\nstate_max_entries = 50\n", mockllm.Options{Respond: mixedResponder})
	type turn struct {
		p   openai.ChatCompletionNewParams
		msg openai.ChatCompletionMessage
	}
	var turns []turn
	for i := 0; i < 200; i++ {
		p := userMsg("go " + strconv.Itoa(i))
		p.Tools = cityTool()
		resp, err := h.client.Chat.Completions.New(context.Background(), p)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if len(resp.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("turn %d: %+v", i, resp.Choices[0].Message)
		}
		turns = append(turns, turn{p, resp.Choices[0].Message})
	}
	cases := []struct {
		name  string
		turn  int
		shape string
	}{
		{name: "newest resumes", turn: 199, shape: "user assistant(calculator,lookup_city) tool tool"},
		{name: "150th resumes", turn: 150, shape: "user assistant(calculator,lookup_city) tool tool"},
		{name: "149th evicted", turn: 149, shape: "user assistant(lookup_city) tool"},
		{name: "oldest evicted", turn: 0, shape: "user assistant(lookup_city) tool"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := turns[tc.turn]
			if _, err := h.client.Chat.Completions.New(context.Background(), followUp(tr.p, tr.msg)); err != nil {
				t.Fatal(err)
			}
			if got := upstreamShape(lastUpstream(h)); got != tc.shape {
				t.Fatalf("upstream history %q, want %q", got, tc.shape)
			}
		})
	}
}

// Two conversations whose upstream reuses the same call ids (short or
// sequential ids, or ids repeated after a restart) never share hidden
// state: the client sees the gateway's own unguessable ids, and a follow-up
// carrying the upstream's id resumes nothing.
func TestMixedTurnStateNotSharedAcrossConversations(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mixedConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "user" {
			secret := "6*7"
			if strings.Contains(c.LastText, "bob") {
				secret = "2*3"
			}
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{
				{ID: "call_1", Name: "calculator", Arguments: `{"expression":"` + secret + `"}`},
				{ID: "call_2", Name: "lookup_city", Arguments: `{"name":"Zürich"}`},
			}}
		}
		return mockllm.Turn{Text: "done"}
	}})
	start := func(who string) (openai.ChatCompletionNewParams, openai.ChatCompletionMessage) {
		p := userMsg("I am " + who)
		p.Tools = cityTool()
		resp, err := h.client.Chat.Completions.New(context.Background(), p)
		if err != nil || len(resp.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("%s: %v %+v", who, err, resp)
		}
		return p, resp.Choices[0].Message
	}
	pa, ma := start("alice")
	pb, mb := start("bob")
	if ma.ToolCalls[0].ID == mb.ToolCalls[0].ID || ma.ToolCalls[0].ID == "call_2" {
		t.Fatalf("client-visible ids %q and %q: the upstream's reused ids leak through", ma.ToolCalls[0].ID, mb.ToolCalls[0].ID)
	}
	n := len(h.mock.Requests())
	if _, err := h.client.Chat.Completions.New(context.Background(), followUp(pb, mb)); err != nil {
		t.Fatal(err)
	}
	bobBody := string(h.mock.Requests()[n].Body)
	if !strings.Contains(bobBody, `2*3`) || strings.Contains(bobBody, `6*7`) || !strings.Contains(bobBody, `\"result\":6`) {
		t.Fatalf("bob's follow-up was rebuilt with someone else's hidden turn: %s", bobBody)
	}
	// A follow-up naming the upstream's id resumes nothing (the history goes
	// upstream as sent, still valid).
	forged := ma
	forged.ToolCalls = append([]openai.ChatCompletionMessageToolCallUnion(nil), ma.ToolCalls...)
	forged.ToolCalls[0].ID = "call_2"
	n = len(h.mock.Requests())
	if _, err := h.client.Chat.Completions.New(context.Background(), followUp(pa, forged)); err != nil {
		t.Fatal(err)
	}
	if body := string(h.mock.Requests()[n].Body); strings.Contains(body, "6*7") || strings.Contains(body, "calculator") && strings.Contains(body, `"tool_call_id":"call_1"`) {
		t.Fatalf("a forged id resumed hidden state: %s", body)
	}
}

// TestMixedTurnErrorParam: the follow-up of a mixed turn goes upstream with
// the hidden server round's messages put back among the client's, so an
// upstream error naming a message by index does not name the client's
// (messages.[6] upstream is the client's messages.[3]): the client is told
// "messages", in the param and in the text, never a wrong index.
func TestMixedTurnErrorParam(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mixedConfig, mockllm.Options{Respond: mixedResponder})
	p := userMsg("prior")
	p.Tools = cityTool()
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	fp := followUp(p, resp.Choices[0].Message)
	fp.Messages = append(fp.Messages, openai.ToolMessage("stray", "nope")) // answers no call: the mock refuses it
	_, err = h.client.Chat.Completions.New(context.Background(), fp)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("want a 400, got %v", err)
	}
	if got := upstreamShape(lastUpstream(h)); !strings.HasPrefix(got, "user assistant(calculator) tool ") {
		t.Fatalf("the hidden round was not put back: %q", got)
	}
	if apiErr.Param != "messages" || strings.Contains(apiErr.Message, "messages.[") {
		t.Fatalf("param %q, message %q: an index of the upstream's messages reached the client", apiErr.Param, apiErr.Message)
	}
}
