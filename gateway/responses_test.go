package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// responsesModel answers "weather?" with two parallel client calls whose
// arguments hold multi-byte characters, a tool result with a text, "long"
// with a cut-off answer, and anything else with an echo of the last text.
func responsesModel(c *mockllm.Call) mockllm.Turn {
	switch {
	case c.LastRole == "tool":
		return mockllm.Turn{Text: "Sunny in Zürich, 21°C — tool said: " + c.LastText}
	case c.LastText == "weather?":
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{
			{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Zürich 🌤"}`},
			{ID: "call_b", Name: "get_weather", Arguments: `{"city":"東京"}`},
		}}
	case c.LastText == "long":
		return mockllm.Turn{Text: "This answer is cut", FinishReason: "length"}
	}
	return mockllm.Turn{Text: "you said: " + c.LastText + " (" + gjson.GetBytes(c.Body, "messages.#").String() + " messages)"}
}

// streamResponse runs a streamed Responses request through the SDK and the
// Responses stream checker; it returns the completed response the SDK
// accumulated, and the checker's summary.
func (h *harness) streamResponse(params responses.ResponseNewParams, opts ...option.RequestOption) (responses.Response, *wiretest.ResponsesSummary) {
	h.t.Helper()
	stream := h.client.Responses.NewStreaming(context.Background(), params, opts...)
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.completed", "response.incomplete", "response.failed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		h.t.Fatalf("stream: %v", err)
	}
	_ = stream.Close()
	raw, _ := h.lastRaw()
	sum, err := wiretest.CheckResponsesStream(raw, wiretest.LoadResponsesSchema(h.t))
	if err != nil {
		h.t.Fatalf("responses stream: %v\n%s", err, raw)
	}
	return final, sum
}

// respond sends params streamed (through streamResponse) or not; a JSON
// answer is validated against the Response schema.
func (h *harness) respond(params responses.ResponseNewParams, stream bool) responses.Response {
	h.t.Helper()
	if stream {
		r, _ := h.streamResponse(params)
		return r
	}
	r, err := h.client.Responses.New(context.Background(), params)
	if err != nil {
		h.t.Fatal(err)
	}
	raw, _ := h.lastRaw()
	if err := wiretest.LoadResponsesSchema(h.t).Validate("Response", raw); err != nil {
		h.t.Fatalf("%v\n%s", err, raw)
	}
	return *r
}

var weatherTool = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:       "get_weather",
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
}}

// The Responses API through the pipeline with the real openai-go client:
// a text answer, streamed and not, with the same output and usage; every
// event and object validates against the schema.
func TestResponsesText(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: responsesModel})
	schema := wiretest.LoadResponsesSchema(t)
	params := responses.ResponseNewParams{
		Model:        "gpt-x",
		Instructions: openai.String("be brief"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
	}
	r, err := h.client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := h.lastRaw()
	if err := schema.Validate("Response", raw); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if r.Status != "completed" || r.OutputText() != "you said: hello (2 messages)" || !strings.HasPrefix(r.ID, "resp_") {
		t.Fatalf("response: status %q text %q id %q", r.Status, r.OutputText(), r.ID)
	}
	if r.Usage.InputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
		t.Fatalf("usage %+v", r.Usage)
	}
	// The upstream saw the instructions as a system message, then the input.
	got := h.mock.Requests()
	last := got[len(got)-1].Body
	if gjson.GetBytes(last, "messages.0.role").Str != "system" || gjson.GetBytes(last, "messages.1.content").Str != "hello" {
		t.Fatalf("upstream messages %s", gjson.GetBytes(last, "messages").Raw)
	}

	final, sum := h.streamResponse(params)
	if sum.Terminal != "response.completed" || final.OutputText() != r.OutputText() || final.Usage.TotalTokens != r.Usage.TotalTokens {
		t.Fatalf("stream: terminal %s text %q usage %+v; JSON said %q", sum.Terminal, final.OutputText(), final.Usage, r.OutputText())
	}
	for _, want := range []string{"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done"} {
		if !contains(sum.Events, want) {
			t.Errorf("stream lacks %s: %v", want, sum.Events)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Two parallel client function calls with multi-byte arguments come back
// as function_call items (streamed and not); the follow-up carries their
// outputs by previous_response_id, and the model sees the whole
// conversation. A length cut is "incomplete" with its reason.
func TestResponsesFunctionCallsAndFollowUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: responsesModel, Chunking: mockllm.Chunking{TextRunes: 1, ArgBytes: 3, InterleaveToolCalls: true, SplitWrites: true}})
	params := responses.ResponseNewParams{
		Model: "gpt-x",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")},
		Tools: []responses.ToolUnionParam{weatherTool},
	}
	for _, stream := range []bool{false, true} {
		r := h.respond(params, stream)
		var calls []responses.ResponseFunctionToolCall
		for _, it := range r.Output {
			if it.Type == "function_call" {
				calls = append(calls, it.AsFunctionCall())
			}
		}
		if len(calls) != 2 || calls[0].Arguments != `{"city":"Zürich 🌤"}` || calls[1].Arguments != `{"city":"東京"}` || calls[0].CallID != "call_a" {
			t.Fatalf("stream=%v: calls %+v", stream, calls)
		}
		follow := responses.ResponseNewParams{
			Model:              "gpt-x",
			PreviousResponseID: openai.String(r.ID),
			Tools:              []responses.ToolUnionParam{weatherTool},
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				callOutput("call_a", "21°C"),
				callOutput("call_b", "18°C"),
			}},
		}
		f := h.respond(follow, stream)
		if !strings.HasPrefix(f.OutputText(), "Sunny in Zürich") {
			t.Fatalf("stream=%v: follow-up %q", stream, f.OutputText())
		}
		got := h.mock.Requests()
		msgs := gjson.GetBytes(got[len(got)-1].Body, "messages")
		// user, assistant with both calls, two tool results.
		if n := len(msgs.Array()); n != 4 || msgs.Get("1.tool_calls.#").Int() != 2 || msgs.Get("3.tool_call_id").Str != "call_b" {
			t.Fatalf("stream=%v: upstream history %s", stream, msgs.Raw)
		}
	}

	long := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("long")}}
	r, err := h.client.Responses.New(context.Background(), long)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("length: status %q details %+v", r.Status, r.IncompleteDetails)
	}
	f, sum := h.streamResponse(long)
	if sum.Terminal != "response.incomplete" || f.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("length stream: %s %+v", sum.Terminal, f.IncompleteDetails)
	}
}

// Stored responses: GET returns the object, input_items the input, cancel
// is refused (nothing runs in the background), DELETE removes it; another tenant's key sees none of them, and a follow-up on an
// unknown id is a 404 envelope.
func TestResponsesStoredAndTenantScoped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+`
[[keys]]
name = "a-key"
key = "sk-a"
tenant = "a"
[[keys]]
name = "b-key"
key = "sk-b"
tenant = "b"
`, mockllm.Options{Respond: responsesModel})
	schema := wiretest.LoadResponsesSchema(t)
	ctx := context.Background()
	asA, asB := option.WithAPIKey("sk-a"), option.WithAPIKey("sk-b")
	r, err := h.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember me")},
	}, asA)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, asA)
	if err != nil || got.OutputText() != r.OutputText() {
		t.Fatalf("get: %v %q", err, got.OutputText())
	}
	raw, _ := h.lastRaw()
	if err := schema.Validate("Response", raw); err != nil {
		t.Fatal(err)
	}
	// Streamed again, a finished response is a clear 400 (nothing runs in
	// the background), not its JSON to a client that reads events.
	again := h.client.Responses.GetStreaming(ctx, r.ID, responses.ResponseGetParams{}, asA)
	for again.Next() {
		t.Fatalf("an event from a finished response: %s", again.Current().RawJSON())
	}
	var streamErr *openai.Error
	if !asStatus(again.Err(), &streamErr, http.StatusBadRequest) || streamErr.Param != "stream" {
		t.Fatalf("get with stream: %v", again.Err())
	}
	if status, _, body := send(t, http.MethodGet, h.base+"/responses/"+r.ID+"?stream=true", "sk-a", ""); status != http.StatusBadRequest ||
		gjson.GetBytes(body, "error.param").Str != "stream" {
		t.Fatalf("get with ?stream=true (the Node SDK's form): %d %s", status, body)
	}
	items, err := h.client.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{}, asA)
	if err != nil || len(items.Data) != 1 || items.Data[0].AsMessage().Content[0].Text != "remember me" {
		t.Fatalf("input items: %v %+v", err, items)
	}
	raw, _ = h.lastRaw()
	if err := schema.Validate("ResponseItemList", raw); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}

	var apiErr *openai.Error
	if _, err := h.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, asB); !asStatus(err, &apiErr, http.StatusNotFound) {
		t.Fatalf("tenant b read tenant a's response: %v", err)
	}
	_, err = h.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", PreviousResponseID: openai.String(r.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and now?")},
	}, asB)
	if !asStatus(err, &apiErr, http.StatusNotFound) || apiErr.Param != "previous_response_id" {
		t.Fatalf("tenant b continued tenant a's response: %v", err)
	}
	if err := h.client.Responses.Delete(ctx, r.ID, asB); !asStatus(err, &apiErr, http.StatusNotFound) {
		t.Fatalf("tenant b deleted tenant a's response: %v", err)
	}
	// Nothing runs in the background: cancelling a stored response is a
	// 400, another tenant's (or an unknown) one a 404.
	if _, err := h.client.Responses.Cancel(ctx, r.ID, asA); !asStatus(err, &apiErr, http.StatusBadRequest) {
		t.Fatalf("cancel of a finished response: %v", err)
	}
	if _, err := h.client.Responses.Cancel(ctx, r.ID, asB); !asStatus(err, &apiErr, http.StatusNotFound) {
		t.Fatalf("tenant b cancelled tenant a's response: %v", err)
	}
	if err := h.client.Responses.Delete(ctx, r.ID, asA); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, asA); !asStatus(err, &apiErr, http.StatusNotFound) {
		t.Fatalf("deleted response still readable: %v", err)
	}

	// store: false keeps nothing.
	r, err = h.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Store: openai.Bool(false), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("forget me")},
	}, asA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, asA); !asStatus(err, &apiErr, http.StatusNotFound) {
		t.Fatalf("store:false response readable: %v", err)
	}
}

func asStatus(err error, target **openai.Error, status int) bool {
	if err == nil {
		return false
	}
	e, ok := err.(*openai.Error)
	if !ok {
		return false
	}
	*target = e
	return e.StatusCode == status
}

func callOutput(id, out string) responses.ResponseInputItemUnionParam {
	p := responses.ResponseInputItemParamOfFunctionCallOutput(out)
	p.OfFunctionCallOutput.CallID = openai.String(id)
	return p
}

// calcModel calls the calculator (a server tool) with "6*7" and a broken
// expression, then answers with what the tool said.
func calcModel(c *mockllm.Call) mockllm.Turn {
	if c.LastRole != "tool" {
		return mockllm.Turn{Text: "Let me compute.", ToolCalls: []mockllm.ToolCall{
			{Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{Name: "calculator", Arguments: `{"expression":"6*"}`},
		}, Usage: &mockllm.Usage{Prompt: 10, Completion: 5}}
	}
	return mockllm.Turn{Text: "The answer is 42.", Usage: &mockllm.Usage{Prompt: 30, Completion: 7}}
}

// The tool loop behind the Responses API: each server tool run is an
// mcp_call item (server_label "builtin", its arguments and output, or its
// error) between the text before and after it, streamed and not, and the
// usage sums both rounds.
func TestResponsesServerToolLoop(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: calcModel})
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("6 times 7?")}}
	p, err := h.client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := h.lastRaw()
	if err := wiretest.LoadResponsesSchema(t).Validate("Response", raw); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	stream, sum := h.streamResponse(params)
	for _, r := range []responses.Response{*p, stream} {
		var mcp []responses.ResponseOutputItemMcpCall
		for _, it := range r.Output {
			if it.Type == "mcp_call" {
				mcp = append(mcp, it.AsMcpCall())
			}
		}
		if len(mcp) != 2 || mcp[0].ServerLabel != "builtin" || mcp[0].Name != "calculator" || gjson.Get(mcp[0].Output, "data.result").Int() != 42 ||
			mcp[0].Arguments != `{"expression":"6*7"}` || mcp[1].Status != "failed" || mcp[1].Error.Content == nil {
			t.Fatalf("mcp_call items: %+v", mcp)
		}
		if !strings.Contains(r.OutputText(), "The answer is 42.") {
			t.Fatalf("text %q", r.OutputText())
		}
		if r.Usage.InputTokens != 40 || r.Usage.OutputTokens != 12 {
			t.Fatalf("usage %+v", r.Usage)
		}
	}
	// The first round's text comes before the calls, the answer after, and
	// the JSON answer has the stream's items in the stream's order.
	want := "message:Let me compute.|mcp_call:calculator|mcp_call:calculator|message:The answer is 42."
	if got := outputItems(stream); got != want {
		t.Fatalf("stream output %s", got)
	}
	if got := outputItems(*p); got != want {
		t.Fatalf("JSON output %s, the stream's %s", got, want)
	}
	if !contains(sum.Events, "response.mcp_call.completed") || !contains(sum.Events, "response.mcp_call.failed") {
		t.Fatalf("events %v", sum.Events)
	}
}

// A mixed turn behind the Responses API (the model calls a server tool and
// a client tool in one answer): the stream hands the client's
// function_call out as the answer is read and the mcp_call once the server
// tool has run, and the JSON answer has its items in that order.
func TestResponsesMixedTurnOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Text: "Checking.", ToolCalls: []mockllm.ToolCall{
			{Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{Name: "get_weather", Arguments: `{"city":"Oslo"}`},
		}}
	}})
	params := responses.ResponseNewParams{Model: "gpt-x", Tools: []responses.ToolUnionParam{weatherTool},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("go")}}
	p, err := h.client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := h.streamResponse(params)
	want := "message:Checking.|function_call|mcp_call:calculator"
	if got := outputItems(stream); got != want {
		t.Fatalf("stream output %s, want %s", got, want)
	}
	if got := outputItems(*p); got != want {
		t.Fatalf("JSON output %s, the stream's %s", got, want)
	}
}

// @openai/agents replays a mixed turn's mcp_call without its output. With
// store: false nothing is stored under its id: the item is left out, so
// that the turn's kept server calls and results take its place, as for a
// client that sends only its own calls (a probe saw the model told the
// calculator returned "").
func TestResponsesMixedTurnReplayWithoutOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if len(c.ToolResults) > 0 {
			return mockllm.Turn{Text: "Results: " + strings.Join(c.ToolResults, " | ")}
		}
		return mockllm.Turn{Text: "Checking.", ToolCalls: []mockllm.ToolCall{
			{Name: "calculator", Arguments: `{"expression":"6*7"}`},
			{Name: "get_weather", Arguments: `{"city":"Oslo"}`},
		}}
	}})
	weather := `{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}`
	status, _, first := send(t, "POST", h.base+"/responses", "sk-client",
		`{"model":"gpt-x","store":false,"input":"go","tools":[`+weather+`]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, first)
	}
	mcp := gjson.GetBytes(first, `output.#(type=="mcp_call")`)
	call := gjson.GetBytes(first, `output.#(type=="function_call")`)
	if !mcp.Exists() || !call.Exists() {
		t.Fatalf("first answer %s", first)
	}
	replayed, _ := sjson.Delete(mcp.Raw, "output") // as @openai/agents sends it back
	follow := `{"model":"gpt-x","store":false,"tools":[` + weather + `],"input":[{"role":"user","content":"go"},` +
		replayed + `,` + call.Raw + `,{"type":"function_call_output","call_id":` + call.Get("call_id").Raw + `,"output":"sunny"}]}`
	status, _, next := send(t, "POST", h.base+"/responses", "sk-client", follow)
	if status != 200 {
		t.Fatalf("%d %s", status, next)
	}
	text := gjson.GetBytes(next, `output.#(type=="message").content.0.text`).Str
	if !strings.Contains(text, "42") || !strings.Contains(text, "sunny") || strings.Contains(text, ":  |") {
		t.Fatalf("the model saw %q; want the kept calculator result and the client's", text)
	}
}

// outputItems lists a response's output items: each message with its text,
// each call with its tool's name.
func outputItems(r responses.Response) string {
	var items []string
	for _, it := range r.Output {
		switch it.Type {
		case "message":
			var text string
			for _, c := range it.AsMessage().Content {
				text += c.Text
			}
			items = append(items, "message:"+text)
		case "mcp_call":
			items = append(items, "mcp_call:"+it.AsMcpCall().Name)
		case "reasoning":
			item := "reasoning"
			for _, c := range it.AsReasoning().Content {
				item += ":" + c.Text
			}
			items = append(items, item)
		default:
			items = append(items, string(it.Type))
		}
	}
	return strings.Join(items, "|")
}

// Two gateway processes sharing one redis-server: a response made on one
// is read and continued (previous_response_id) on the other, and a
// referenced output item resolves there too.
func TestResponsesAcrossReplicas(t *testing.T) {
	t.Parallel()
	redisAddr := testredis.Start(t).Addr()
	bin := testproc.Gateway(t)
	mock := mockllm.New(mockllm.Options{Respond: responsesModel})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg := strings.ReplaceAll(baseConfig, "{{MOCK}}", mockURL) + `
[redis]
addr = "` + redisAddr + `"
prefix = "responses-test:"
`
	a := openai.NewClient(option.WithBaseURL(startReplica(t, bin, cfg)), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	b := openai.NewClient(option.WithBaseURL(startReplica(t, bin, cfg)), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	ctx := context.Background()
	first, err := a.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")},
		Tools: []responses.ToolUnionParam{weatherTool},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if err != nil || len(got.Output) != 2 {
		t.Fatalf("get on the other replica: %v %+v", err, got)
	}
	next, err := b.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", PreviousResponseID: openai.String(first.ID), Tools: []responses.ToolUnionParam{weatherTool},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			callOutput("call_a", "21°C"), callOutput("call_b", "18°C"),
		}},
	})
	if err != nil {
		t.Fatalf("follow-up on the other replica: %v", err)
	}
	if !strings.HasPrefix(next.OutputText(), "Sunny in Zürich") {
		t.Fatalf("follow-up on the other replica: %q", next.OutputText())
	}
	// Without previous_response_id: the calls by item_reference, resolved
	// from the store on replica A.
	ref, err := a.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Tools: []responses.ToolUnionParam{weatherTool},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("weather?", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfItemReference(first.Output[0].ID),
			responses.ResponseInputItemParamOfItemReference(first.Output[1].ID),
			callOutput("call_a", "21°C"), callOutput("call_b", "18°C"),
		}},
	})
	if err != nil {
		var e *openai.Error
		_ = errors.As(err, &e)
		t.Fatalf("item references: %v %s", err, e.RawJSON())
	}
	if !strings.HasPrefix(ref.OutputText(), "Sunny in Zürich") {
		t.Fatalf("item references: %q", ref.OutputText())
	}
	reqs := mock.Requests()
	if msgs := gjson.GetBytes(reqs[len(reqs)-1].Body, "messages"); msgs.Get("1.tool_calls.#").Int() != 2 {
		t.Fatalf("referenced calls not in the history: %s", msgs.Raw)
	}
}

// A primary that fails before its first content falls back as for chat:
// the client sees one clean response from the fallback. A cut after
// content ends the stream with response.failed carrying the error, and the
// text streamed so far.
func TestResponsesFallbackAndFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fallbackConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		switch {
		case c.LastText == "cut":
			return mockllm.Turn{Text: "partial answer that is cut", Fault: &mockllm.Fault{Cut: true, CutAfter: 4}}
		case c.Model == "up-primary":
			return mockllm.Turn{Fault: &mockllm.Fault{Status: 503}}
		}
		return mockllm.Turn{Text: "from " + c.Model}
	}, ChunkDelay: 10 * time.Millisecond})
	params := responses.ResponseNewParams{Model: "primary", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	r, sum := h.streamResponse(params)
	if sum.Terminal != "response.completed" || r.OutputText() != "from up-small" || r.Model != "primary" {
		t.Fatalf("fallback: %s %q model %q", sum.Terminal, r.OutputText(), r.Model)
	}
	p, err := h.client.Responses.New(context.Background(), params)
	if err != nil || p.OutputText() != "from up-small" {
		t.Fatalf("fallback JSON: %v", err)
	}

	// "large" has no fallback of its own.
	params.Input.OfString, params.Model = openai.String("cut"), "large"
	f, sum := h.streamResponse(params)
	if sum.Terminal != "response.failed" || f.Status != "failed" || f.Error.Code != "server_error" || f.Error.Message == "" ||
		!strings.HasPrefix("partial answer that is cut", f.OutputText()) || f.OutputText() == "" {
		t.Fatalf("cut: %s status %q error %+v text %q", sum.Terminal, f.Status, f.Error.Message, f.OutputText())
	}
	// Its id was announced: it is stored, failed, as OpenAI keeps one.
	g, err := h.client.Responses.Get(context.Background(), f.ID, responses.ResponseGetParams{})
	if err != nil || g.Status != "failed" || g.Error.Message != f.Error.Message || g.OutputText() != f.OutputText() {
		t.Fatalf("GET of the failed response: %v %+v", err, g)
	}
}

// A round that fails after a server tool ran ends the stream with
// response.failed whose output still reports the tool's run: a tool with
// side effects is never run behind the client's back.
func TestResponsesFailureKeepsServerCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole != "tool" {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"2+3"}`}}}
		}
		return mockllm.Turn{Fault: &mockllm.Fault{Status: 500}}
	}})
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("2+3?")}}
	f, sum := h.streamResponse(params)
	if sum.Terminal != "response.failed" || f.Status != "failed" {
		t.Fatalf("terminal %s status %q", sum.Terminal, f.Status)
	}
	if got := outputItems(f); got != "mcp_call:calculator" {
		t.Fatalf("failed response's output %q, want the tool's run", got)
	}
	if !contains(sum.Events, "response.mcp_call.completed") {
		t.Fatalf("events %v", sum.Events)
	}
}

// A Responses answer from the response cache has the live answer's items:
// each server tool the loop ran is an mcp_call between the texts around it,
// whichever form (JSON or stream) filled the entry and whichever reads it.
// A chat client's hit carries no trace of the calls.
func TestResponsesCacheHitKeepsServerCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool+`
[middleware.cache]
enabled = true
store = "memory"
`, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole != "tool" {
			return mockllm.Turn{Text: "Let me check.", ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"2+3"}`}},
				Usage: &mockllm.Usage{Prompt: 10, Completion: 5}}
		}
		return mockllm.Turn{Text: "Tool said 5.", Usage: &mockllm.Usage{Prompt: 20, Completion: 4}}
	}})
	const want = "message:Let me check.|mcp_call:calculator|message:Tool said 5."
	for _, fill := range []bool{false, true} { // the miss as JSON, then as a stream
		params := responses.ResponseNewParams{Model: "gpt-x", Temperature: openai.Float(0),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("2+3? (stream miss %v)", fill))}}
		if got := outputItems(h.respond(params, fill)); got != want {
			t.Fatalf("miss (stream %v): %s", fill, got)
		}
		calls := len(h.mock.Requests())
		for _, stream := range []bool{false, true} {
			r := h.respond(params, stream)
			if got := outputItems(r); got != want {
				t.Fatalf("hit (filled by stream %v, read as stream %v): %s, want %s", fill, stream, got, want)
			}
			if mcp := r.Output[1].AsMcpCall(); gjson.Get(mcp.Output, "data.result").Int() != 5 || mcp.Arguments != `{"expression":"2+3"}` {
				t.Fatalf("hit's mcp_call: %+v", mcp)
			}
		}
		if n := len(h.mock.Requests()); n != calls {
			t.Fatalf("the hits called the model %d times", n-calls)
		}
	}
	status, _, body := h.post("/chat/completions", `{"model":"gpt-x","temperature":0,"messages":[{"role":"user","content":"2+3? (stream miss false)"}]}`, nil)
	if status != 200 || strings.Contains(string(body), "x_gateway_server_calls") || strings.Contains(string(body), "calculator") {
		t.Fatalf("chat: %d %s", status, body)
	}
}

// TestNodeAgentsResponses runs test/node/responses.mjs: the @openai/agents
// SDK with its default Responses model, run and streamed, against the
// gateway's tool loop: the server tool runs in the gateway (an mcp_call
// the agent leaves alone), the client tool in the agent.
func TestNodeAgentsResponses(t *testing.T) {
	t.Parallel()
	skipWithoutNode(t)
	h, _ := toolHarness(t, nodeResponder, mockllm.Chunking{})
	out := runNode(t, "responses.mjs", "GATEWAY_BASE_URL="+h.base, "GATEWAY_MODEL=gpt-x")
	if !strings.Contains(out, "run: ok") || !strings.Contains(out, "stream: ok") {
		t.Fatalf("node output: %s", out)
	}
}

// calculatorTool offers the builtin calculator as a server tool.
const calculatorTool = `
[[tools]]
name = "calculator"
kind = "builtin"
`

// withNativeResponses is cfg with responses = "native" on its provider
// (whose model gpt-x then passes /v1/responses through), and a model
// "translated" on a provider that serves chat only.
func withNativeResponses(cfg string) string {
	return strings.Replace(cfg, `retries = 0`, `retries = 0
responses = "native"`, 1) + `
[[providers]]
name = "chatonly"
kind = "openai"
base_url = "{{MOCK}}"
retries = 0
[[models]]
name = "translated"
provider = "chatonly"
upstream = "up-translated"
`
}

// With responses = "native" on its provider, a model's /v1/responses
// passes through unchanged (under its upstream name), and GET of an id not
// stored here goes to the provider too when the tenant created it there;
// other models stay translated.
func TestResponsesNativeProvider(t *testing.T) {
	t.Parallel()
	cfg := withNativeResponses(baseConfig)
	h := newHarness(t, cfg, mockllm.Options{Respond: responsesModel})
	status, _, body := h.post("/responses", `{"model":"gpt-x","input":"hi"}`, nil)
	if status != 200 || gjson.GetBytes(body, "path").Str != "/v1/responses" || gjson.GetBytes(body, "body").Str != `{"model":"up-model","input":"hi"}` {
		t.Fatalf("native: %d %s", status, body)
	}
	status, _, body = h.post("/responses", `{"model":"translated","input":"hi"}`, nil)
	if status != 200 || gjson.GetBytes(body, "object").Str != "response" || gjson.GetBytes(body, "output.0.content.0.text").Str != "you said: hi (1 messages)" {
		t.Fatalf("translated: %d %s", status, body)
	}
	// The provider's stored responses are shared by everyone behind its
	// key: reading them is opt-in, like any stateful pass-through path,
	// and even then only a response the tenant created through the
	// gateway passes (responses_owner_test.go): this id is no one's.
	for _, tc := range []struct {
		cfg  string
		want int
	}{{cfg, http.StatusForbidden}, {cfg + openPassthrough, http.StatusNotFound}} {
		h := newHarness(t, tc.cfg, mockllm.Options{Respond: responsesModel})
		resp, err := http.Get(h.base + "/responses/resp_theirs")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("GET of a provider's id: %d, want %d", resp.StatusCode, tc.want)
		}
	}
}

// A gated server tool surfaces as an mcp_approval_request item; the
// client's mcp_approval_response items resume the loop natively: the
// approved call runs (an mcp_call item), the rejected one does not, and the
// model answers. Streamed and not, against the schema.
func TestResponsesApproval(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool+`approval = "always"
`, mockllm.Options{Respond: calcModel})
	for _, stream := range []bool{false, true} {
		ask := func(p responses.ResponseNewParams) responses.Response { return h.respond(p, stream) }
		first := ask(responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("6 times 7?")}})
		var reqs []responses.ResponseOutputItemMcpApprovalRequest
		for _, it := range first.Output {
			switch it.Type {
			case "mcp_approval_request":
				reqs = append(reqs, it.AsMcpApprovalRequest())
			case "mcp_call", "function_call":
				t.Fatalf("stream=%v: a gated call ran or reached the client as a function: %s", stream, it.RawJSON())
			}
		}
		if len(reqs) != 2 || reqs[0].Name != "calculator" || reqs[0].Arguments != `{"expression":"6*7"}` || !strings.HasPrefix(reqs[0].ID, "call_gwa_") {
			t.Fatalf("stream=%v: approval requests %+v", stream, reqs)
		}
		approve := responses.ResponseInputItemParamOfMcpApprovalResponse(reqs[0].ID, true)
		reject := responses.ResponseInputItemParamOfMcpApprovalResponse(reqs[1].ID, false)
		reject.OfMcpApprovalResponse.Reason = openai.String("not that one")
		next := ask(responses.ResponseNewParams{Model: "gpt-x", PreviousResponseID: openai.String(first.ID),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{approve, reject}}})
		var ran []responses.ResponseOutputItemMcpCall
		for _, it := range next.Output {
			if it.Type == "mcp_call" {
				ran = append(ran, it.AsMcpCall())
			}
		}
		if len(ran) != 1 || gjson.Get(ran[0].Output, "data.result").Int() != 42 || next.OutputText() != "The answer is 42." || ran[0].ApprovalRequestID != reqs[0].ID {
			t.Fatalf("stream=%v: after the decisions: calls %+v, text %q", stream, ran, next.OutputText())
		}
		got := h.mock.Requests()
		tools := gjson.GetBytes(got[len(got)-1].Body, `messages.#(role=="tool")#.content`)
		if !strings.Contains(tools.Raw, "rejected") || !strings.Contains(tools.Raw, "not that one") || strings.Contains(tools.Raw, "decision") {
			t.Fatalf("stream=%v: the model saw %s", stream, tools.Raw)
		}
		// A follow-up's history holds the approved run once, with its
		// result, as the model saw it: not the call again beside it with
		// the decision as its result.
		ask(responses.ResponseNewParams{Model: "gpt-x", PreviousResponseID: openai.String(next.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("thanks")}})
		got = h.mock.Requests()
		msgs := gjson.GetBytes(got[len(got)-1].Body, "messages")
		calls := gjson.Get(msgs.Raw, `#.tool_calls|@flatten|#(id=="`+reqs[0].ID+`")#`)
		results := gjson.Get(msgs.Raw, `#(tool_call_id=="`+reqs[0].ID+`")#.content`)
		runs := gjson.Get(msgs.Raw, `#.tool_calls|@flatten|#(function.arguments=="{\"expression\":\"6*7\"}")#`)
		if len(calls.Array()) != 1 || len(runs.Array()) != 1 || len(results.Array()) != 1 || !strings.Contains(results.Array()[0].Str, "42") {
			t.Fatalf("stream=%v: the follow-up's history has the approved call %d times, results %s\n%s", stream, len(runs.Array()), results.Raw, msgs.Raw)
		}
	}
}

// TestResponsesUpstreamErrorNamesInput: an upstream error about a message of
// the chat request a Responses call became names the input, which the client
// sent, never a messages index, in the param and in the text.
func TestResponsesUpstreamErrorNamesInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: responsesModel})
	status, _, body := h.post("/responses", `{"model":"gpt-x","instructions":"be brief","input":[`+
		`{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"nope","output":"r"}]}`, nil)
	if status != 400 {
		t.Fatalf("status %d: %s", status, body)
	}
	if p, msg := gjson.GetBytes(body, "error.param").String(), gjson.GetBytes(body, "error.message").String(); p != "input" || strings.Contains(msg, "messages.[") || strings.Contains(msg, "messages[") {
		t.Fatalf("param %q, message %q: %s", p, msg, body)
	}
}

// /v1/responses runs its model calls through the chat pipeline, so an
// upstream answer without an answer falls back there too, streamed or not;
// when no model is left, the JSON client gets the chat client's error.
func TestResponsesNoAnswerFallsBack(t *testing.T) {
	t.Parallel()
	params := responses.ResponseNewParams{Model: "primary", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	for _, f := range noAnswerFaults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, fallbackConfig, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
				"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Text: "never seen", Fault: f.fault} },
			})})
			for _, stream := range []bool{false, true} {
				if r := h.respond(params, stream); r.OutputText() != "answer from up-small" || r.Model != "primary" {
					t.Fatalf("stream=%v: %q from %q", stream, r.OutputText(), r.Model)
				}
			}

			h = newHarness(t, fallbackConfig, mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn {
				return mockllm.Turn{Text: "never seen", Fault: f.fault}
			}})
			_, err := h.client.Responses.New(context.Background(), params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != f.want.status || apiErr.Message != f.want.msg {
				t.Fatalf("nothing left: %v, want %d %q", err, f.want.status, f.want.msg)
			}
		})
	}
}

// An upstream that sends "finish_reason":"" on every chunk before the last
// (Ollama, SGLang) still gives the Responses client its whole text: an
// empty reason is not the end of the answer.
func TestResponsesEmptyFinishReason(t *testing.T) {
	t.Parallel()
	chunk := func(delta, finish string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":` +
			delta + `,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, chunk(`{"role":"assistant","content":""}`, `""`)+chunk(`{"content":"Hello"}`, `""`)+
			chunk(`{"content":" world"}`, `""`)+chunk(`{}`, `"stop"`)+"data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.Replace(baseConfig, "{{MOCK}}", up.URL+"/v1", 1), mockllm.Options{})
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	final, sum := h.streamResponse(params)
	if final.Status != "completed" || final.OutputText() != "Hello world" {
		t.Fatalf("status %q, text %q (events %v)", final.Status, final.OutputText(), sum.Events)
	}
}

// An Anthropic model behind the Responses API: its thinking block is a
// reasoning item whose reasoning_text part is added before its deltas and
// done after them (the Node client throws on a delta for a part it never
// saw), streamed and not, with the same text; the usage keeps Claude's
// prompt-cache reads and writes.
func TestResponsesAnthropicReasoning(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	params := responses.ResponseNewParams{Model: "claude-small", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}}
	streamed, sum := h.streamResponse(params)
	for i, r := range []responses.Response{h.respond(params, false), streamed} {
		if got := outputItems(r); got != "reasoning:The user greets me.|message:"+claudeText {
			t.Fatalf("answer %d: output %s", i, got)
		}
		if rs := r.Output[0].AsReasoning(); len(rs.Content) != 1 || rs.Content[0].Text != "The user greets me." {
			t.Fatalf("answer %d: reasoning %s", i, r.Output[0].RawJSON())
		}
		if d := r.Usage.InputTokensDetails; d.CachedTokens != 20 || d.CacheWriteTokens != 10 {
			t.Fatalf("answer %d: usage %s", i, r.Usage.RawJSON())
		}
	}
	for _, want := range []string{"response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done"} {
		if !contains(sum.Events, want) {
			t.Errorf("stream lacks %s: %v", want, sum.Events)
		}
	}
}

// With reasoning.summary asked for (as the Vercel AI SDK asks, which shows
// only a summary), the reasoning text is the item's summary_text part, with
// the summary events, as OpenAI's reasoning models give theirs; it used to be
// reasoning_text content only, which such a client shows as empty.
func TestResponsesReasoningSummary(t *testing.T) {
	t.Parallel()
	h := anthropicHarness(t)
	params := responses.ResponseNewParams{Model: "claude-small", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
		Reasoning: shared.ReasoningParam{Summary: shared.ReasoningSummaryAuto}}
	streamed, sum := h.streamResponse(params)
	for i, r := range []responses.Response{h.respond(params, false), streamed} {
		rs := r.Output[0].AsReasoning()
		if len(rs.Summary) != 1 || rs.Summary[0].Text != "The user greets me." || len(rs.Content) != 0 {
			t.Fatalf("answer %d: reasoning %s", i, r.Output[0].RawJSON())
		}
	}
	for _, want := range []string{"response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done"} {
		if !contains(sum.Events, want) {
			t.Errorf("stream lacks %s: %v", want, sum.Events)
		}
	}
	if contains(sum.Events, "response.reasoning_text.delta") {
		t.Errorf("the reasoning was sent twice: %v", sum.Events)
	}
}

// input_items pages as the API does: newest first unless order=asc, limit
// items a page, has_more and after to walk on; the SDK's auto-pager lists
// every item once, in order.
func TestResponsesInputItemsPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: responsesModel})
	ctx := context.Background()
	var input responses.ResponseInputParam
	for _, s := range []string{"one", "two", "three"} {
		input = append(input, responses.ResponseInputItemParamOfMessage(s, responses.EasyInputMessageRoleUser))
	}
	r, err := h.client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}})
	if err != nil {
		t.Fatal(err)
	}
	texts := func(items []responses.ResponseItemUnion) string {
		var s []string
		for _, it := range items {
			s = append(s, it.AsMessage().Content[0].Text)
		}
		return strings.Join(s, ",")
	}
	page, err := h.client.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{})
	if err != nil || texts(page.Data) != "three,two,one" || page.HasMore {
		t.Fatalf("default order: %v %s", err, page.RawJSON())
	}
	raw, _ := h.lastRaw()
	if err := wiretest.LoadResponsesSchema(t).Validate("ResponseItemList", raw); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	pager := h.client.Responses.InputItems.ListAutoPaging(ctx, r.ID, responses.InputItemListParams{
		Limit: openai.Int(2), Order: responses.InputItemListParamsOrderAsc})
	var all []responses.ResponseItemUnion
	for pager.Next() {
		all = append(all, pager.Current())
	}
	if err := pager.Err(); err != nil || texts(all) != "one,two,three" {
		t.Fatalf("pages of 2, ascending: %v %q", err, texts(all))
	}
	_, err = h.client.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{Limit: openai.Int(101)})
	var apiErr *openai.Error
	if !asStatus(err, &apiErr, http.StatusBadRequest) || apiErr.Param != "limit" {
		t.Fatalf("limit=101: %v", err)
	}
}

// A follow-up (previous_response_id) of a response whose loop ran server
// tools continues from what that response's model saw: its text before
// the calls, the calls and their results, then its answer; streamed and
// not.
func TestResponsesFollowUpSeesServerCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: calcModel})
	for _, stream := range []bool{false, true} {
		first := h.respond(responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("6 times 7?")}}, stream)
		n := len(h.mock.Requests())
		h.respond(responses.ResponseNewParams{Model: "gpt-x", PreviousResponseID: openai.String(first.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("thanks")}}, stream)
		msgs := gjson.GetBytes(h.mock.Requests()[n].Body, "messages")
		if msgs.Get("#").Int() != 6 || msgs.Get("1.content").Str != "Let me compute." || msgs.Get("1.tool_calls.#").Int() != 2 ||
			gjson.Get(msgs.Get("2.content").Str, "data.result").Int() != 42 || msgs.Get("2.tool_call_id").Str != msgs.Get("1.tool_calls.0.id").Str ||
			msgs.Get("3.role").Str != "tool" || msgs.Get("4.content").Str != "The answer is 42." || msgs.Get("5.content").Str != "thanks" {
			t.Fatalf("stream=%v: the follow-up's model saw %s", stream, msgs.Raw)
		}
	}
}

// Behind the Responses API the client is shown every server call (an
// mcp_call item), so a follow-up of a round of client calls alone after a
// server round gives the model that round once, from the stored response,
// streamed and not.
func TestResponsesClientRoundAfterServerRound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mixedConfig, mockllm.Options{Respond: mixedResponder})
	city := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "lookup_city",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}}
	for _, stream := range []bool{false, true} {
		first := h.respond(responses.ResponseNewParams{Model: "gpt-x", Tools: []responses.ToolUnionParam{city},
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("client only")}}, stream)
		if got := outputItems(first); got != "mcp_call:calculator|message:Checking.|function_call" {
			t.Fatalf("stream=%v: output %s", stream, got)
		}
		fc := first.Output[2].AsFunctionCall()
		h.respond(responses.ResponseNewParams{Model: "gpt-x", PreviousResponseID: openai.String(first.ID), Tools: []responses.ToolUnionParam{city},
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: []responses.ResponseInputItemUnionParam{callOutput(fc.CallID, "Zürich: 420000 inhabitants")}}}, stream)
		if got, want := upstreamShape(lastUpstream(h)), "user assistant(calculator) tool assistant(lookup_city) tool"; got != want {
			t.Fatalf("stream=%v: upstream history %q, want %q", stream, got, want)
		}
	}
}

// A GET of a stored response reads a body only when it is small and of a
// known length (openai-go's {"stream":true}): the server streams request
// bodies and this route has no body limit of its own, so a larger or
// chunked one is left unread (it read one whole, whatever its size). The
// bodies here stay under what fasthttp discards on a kept connection, so
// the client finishes writing before it reads the answer.
func TestStoredResponseGetLeavesALargeBodyUnread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: responsesModel})
	r, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember me")},
	})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"pad":"` + strings.Repeat("a", 64<<10) + `","stream":true}`
	for _, chunked := range []bool{true, false} {
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // no length known: sent chunked
		}
		req, err := http.NewRequest(http.MethodGet, h.base+"/responses/"+r.ID, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || gjson.GetBytes(got, "id").Str != r.ID {
			t.Fatalf("a 64 KiB GET body (chunked %v): %d %s, want the stored response, the body unread", chunked, resp.StatusCode, got)
		}
	}
}

// The Responses API's max_tool_calls caps the server tools the gateway
// runs for the response, below tool_loop.max_tool_calls: a call past it is
// not run (its mcp_call fails with limit_reached) and the model answers;
// the response object repeats the setting. JSON and stream alike.
func TestResponsesMaxToolCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: calcModel})
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("6 times 7?")},
		MaxToolCalls: openai.Int(1)}
	p, err := h.client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := h.streamResponse(params)
	for i, r := range []responses.Response{*p, stream} {
		var ran, refused int
		for _, it := range r.Output {
			if it.Type != "mcp_call" {
				continue
			}
			c := it.AsMcpCall()
			switch {
			case c.Status == "completed":
				ran++
			case strings.Contains(c.Output+fmt.Sprint(c.Error), "limit_reached"):
				refused++
			}
		}
		if ran != 1 || refused != 1 || r.MaxToolCalls != 1 {
			t.Fatalf("response %d: %d run, %d refused, max_tool_calls %d: %s", i, ran, refused, r.MaxToolCalls, r.RawJSON())
		}
	}
	if code, _, b := h.post("/responses", `{"model":"gpt-x","input":"x","max_tool_calls":-1}`, nil); code != 400 || gjson.GetBytes(b, "error.param").Str != "max_tool_calls" {
		t.Fatalf("negative max_tool_calls: %d %s", code, b)
	}
}

// A Responses cache hit keeps each round's reasoning item where it was
// live, between the server calls, whichever form filled the entry and
// whichever reads it: the replay put all the reasoning first (stream) or
// after the calls (JSON of a stream-filled entry).
func TestResponsesCacheHitKeepsReasoningPlaces(t *testing.T) {
	t.Parallel()
	h := newHarness(t, anthropicConfig+`
[middleware.cache]
enabled = true
store = "memory"
always = true
`, mockllm.Options{Respond: claudeRespond})
	for _, fill := range []bool{false, true} {
		params := responses.ResponseNewParams{Model: "claude-big", Reasoning: shared.ReasoningParam{Effort: shared.ReasoningEffortLow},
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("compute (stream miss %v)", fill))}}
		live := outputItems(h.respond(params, fill))
		if !strings.HasPrefix(live, "reasoning:Round 0 thinks.|mcp_call:calculator|reasoning:Round 1 thinks.|mcp_call:calculator|reasoning:Round 2 thinks.|message:") {
			t.Fatalf("live (stream %v): %s", fill, live)
		}
		for _, stream := range []bool{false, true} {
			if got := outputItems(h.respond(params, stream)); got != live {
				t.Errorf("hit (filled by stream %v, read as stream %v):\n got %s\nwant %s", fill, stream, got, live)
			}
		}
	}
}

// A streamed Responses answer shows a server call as soon as its tool ran
// (at the loop's next keep-alive), not when the next round starts to
// answer: a client watching the stream sees the call and its result while
// the model is still thinking.
func TestResponsesServerCallShownBeforeTheNextRound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+calculatorTool+`
[tool_loop]
keepalive_interval = "50ms"
`, mockllm.Options{FirstByteDelay: 600 * time.Millisecond, Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole != "tool" {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"2+3"}`}}}
		}
		return mockllm.Turn{Text: "Five."}
	}})
	status, _, raw := h.post("/responses", `{"model":"gpt-x","stream":true,"input":"2+3?"}`, nil)
	if status != 200 {
		t.Fatalf("%d %s", status, raw)
	}
	call := bytes.Index(raw, []byte("response.mcp_call.completed"))
	lastPulse := bytes.LastIndex(raw, []byte("\n:"))
	if call < 0 || lastPulse < 0 || call > lastPulse {
		t.Fatalf("the server call (at %d) came after the keep-alives (last at %d):\n%s", call, lastPulse, raw)
	}
}

// A follow-up of an approved run and a rejected call, after the tool loop's
// record of the approvals expired (tool_loop.state_ttl, far shorter than a
// stored response's life), still shows the model the run's result and the
// rejection with its reason, kept in the stored history in the decisions'
// A client that keeps its own history (store: false) replays an approved
// run's mcp_call without its output, after the approval's record expired:
// the model is told the result was not kept, not that the tool was not run
// (a regression probe found the note read as a new decision and turned
// into approval_expired).
func TestResponsesApprovedRunReplayedWithoutOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+"[tool_loop]\nstate_ttl = \"2s\"\n"+calculatorTool+`approval = "always"
`, mockllm.Options{Respond: calcModel})
	status, _, first := send(t, "POST", h.base+"/responses", "sk-client", `{"model":"gpt-x","store":false,"input":"6 times 7?"}`)
	req := gjson.GetBytes(first, `output.#(type=="mcp_approval_request")`)
	if status != 200 || !req.Exists() {
		t.Fatalf("%d %s", status, first)
	}
	history := `{"role":"user","content":"6 times 7?"},` + req.Raw + `,{"type":"mcp_approval_response","approval_request_id":` + req.Get("id").Raw + `,"approve":true}`
	status, _, next := send(t, "POST", h.base+"/responses", "sk-client", `{"model":"gpt-x","store":false,"input":[`+history+`]}`)
	run := gjson.GetBytes(next, `output.#(type=="mcp_call")`)
	if status != 200 || !run.Exists() {
		t.Fatalf("%d %s", status, next)
	}
	time.Sleep(2500 * time.Millisecond) // the approval's record expires (2 s: a loaded CI machine took over 300 ms between the first two requests)
	replayed, _ := sjson.Delete(run.Raw, "output")
	status, _, last := send(t, "POST", h.base+"/responses", "sk-client",
		`{"model":"gpt-x","store":false,"input":[`+history+`,`+replayed+`,{"role":"user","content":"thanks"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, last)
	}
	got := h.mock.Requests()
	tools := gjson.GetBytes(got[len(got)-1].Body, `messages.#(role=="tool")#.content`)
	if !strings.Contains(tools.Raw, "result_not_kept") || strings.Contains(tools.Raw, "approval_expired") {
		t.Fatalf("the follow-up's model saw %s", tools.Raw)
	}
}

// places: not approval_expired, and the tool does not run again.
func TestResponsesApprovedRunOutlivesItsState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+"[tool_loop]\nstate_ttl = \"2s\"\n"+calculatorTool+`approval = "always"
`, mockllm.Options{Respond: calcModel})
	first := h.respond(responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("6 times 7?")}}, false)
	var items responses.ResponseInputParam
	for _, it := range first.Output {
		if it.Type == "mcp_approval_request" {
			items = append(items, responses.ResponseInputItemParamOfMcpApprovalResponse(it.ID, len(items) == 0))
		}
	}
	if len(items) == 2 {
		items[1].OfMcpApprovalResponse.Reason = openai.String("not that one")
	} else {
		t.Fatalf("no approval request: %s", first.RawJSON())
	}
	next := h.respond(responses.ResponseNewParams{Model: "gpt-x", PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items}}, false)
	time.Sleep(2500 * time.Millisecond) // the approval's record expires (2 s: a loaded CI machine took over 300 ms between the first two requests)
	last := h.respond(responses.ResponseNewParams{Model: "gpt-x", PreviousResponseID: openai.String(next.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("thanks")}}, false)
	for _, it := range last.Output {
		if it.Type == "mcp_call" { // the settled calls ran once; a new call of the model's would be gated
			t.Fatalf("the follow-up ran a tool: %s", it.RawJSON())
		}
	}
	got := h.mock.Requests()
	tools := gjson.GetBytes(got[len(got)-1].Body, `messages.#(role=="tool")#.content`)
	if !strings.Contains(tools.Raw, "42") || !strings.Contains(tools.Raw, "not that one") || strings.Contains(tools.Raw, "approval_expired") || strings.Contains(tools.Raw, "decision") {
		t.Fatalf("the follow-up's model saw %s", tools.Raw)
	}
}

// A Responses request that gives a top-level key twice (or in two cases)
// is refused naming it, as a chat request is: the gateway would read the
// first and the client's own JSON library, like most, the last. The
// upstream is never called.
func TestResponsesRepeatedKeyRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	for _, body := range []string{
		`{"model":"gpt-x","input":"a","input":"b"}`,
		`{"model":"gpt-x","input":"a","stream":false,"stream":true}`,
		`{"model":"gpt-x","input":"a","max_output_tokens":5,"Max_Output_Tokens":5000}`,
	} {
		code, _, b := h.post("/responses", body, nil)
		if code != 400 || !strings.Contains(gjson.GetBytes(b, "error.message").Str, "repeats") {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
	if n := len(h.mock.Requests()); n != 0 {
		t.Errorf("the upstream was called %d times", n)
	}
	if code, _, b := h.post("/responses", `{"model":"gpt-x","input":"a","stream":false}`, nil); code != 200 {
		t.Errorf("a plain request: %d %s", code, b)
	}
}

// A stream whose client leaves (a chat UI's stop button) is stored,
// cancelled, with what it output until then: the id response.created
// announced is found by a GET and continues as a previous_response_id.
func TestResponsesStreamClientLeftIsStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastText == "go on" {
			return mockllm.Turn{Text: "continued"}
		}
		return mockllm.Turn{Text: strings.Repeat("word ", 200)}
	}, Chunking: mockllm.Chunking{TextRunes: 5}, ChunkDelay: 20 * time.Millisecond})
	u, _ := url.Parse(h.base)
	c, br := dialGateway(t, u.Host)
	body := `{"model":"gpt-x","stream":true,"input":"write a lot"}`
	write(t, c, "POST /v1/responses HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, text := "", 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && text < 5 {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		if v := gjson.Get(line, "response.id").Str; id == "" && v != "" {
			id = v
		}
		if gjson.Get(line, "type").Str == "response.output_text.delta" {
			text++
		}
	}
	c.Close() // the client leaves mid-answer
	if id == "" {
		t.Fatal("no response id announced")
	}
	var got *responses.Response
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // stored once the gateway notices
		if g, err := h.client.Responses.Get(context.Background(), id, responses.ResponseGetParams{}); err == nil {
			got = g
			break
		}
	}
	if got == nil || got.Status != "cancelled" || got.OutputText() == "" || strings.Count(got.OutputText(), "word") >= 200 {
		t.Fatalf("the response its client left: %+v", got)
	}
	next, err := h.client.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-x", PreviousResponseID: openai.String(id),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("go on")}})
	if err != nil || next.OutputText() != "continued" {
		t.Fatalf("continued after the stop: %v", err)
	}
	last := h.mock.Requests()[len(h.mock.Requests())-1]
	if !strings.Contains(string(last.Body), "write a lot") || !strings.Contains(string(last.Body), "word word") {
		t.Fatalf("the follow-up's history lacks the stopped turn: %s", last.Body)
	}
}
