package toolloop

import (
	"bytes"
	"context"
	"fmt"
	"github.com/rs/zerolog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

const userBody = `{"model":"gpt-x","messages":[{"role":"user","content":"what is 1+2 and the time?"}]`

func TestStreamTwoServerRoundsThenAnswer(t *testing.T) {
	t.Parallel()
	m := &fakeModel{turns: []turnFn{
		always(toolRound("up-1", "call_a", "calculator", `{"expression":"1+2"}`, 10, 5), ""),
		always(toolRound("up-2", "call_b", "current_time", `{"timezone":"Europe/Oslo"}`, 20, 6), ""),
		always(textRound("up-3", "It is 3 o'clock.", 30, 7), ""),
	}}
	l := newLoop(t, []config.Tool{calcTool, timeTool}, nil)
	req := request(m, true, userBody+`,"stream":true,"stream_options":{"include_usage":true}}`)
	req.Hints.ToolTrace = true
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), true)
	if sum.Content != "It is 3 o'clock." {
		t.Fatalf("content %q", sum.Content)
	}
	if len(sum.ToolCalls) != 0 || sum.FinishReason != "stop" {
		t.Fatalf("tool calls %v finish %q", sum.ToolCalls, sum.FinishReason)
	}
	if sum.ID != "up-1" {
		t.Fatalf("id %q, want the first round's", sum.ID)
	}
	u := gjson.ParseBytes(sum.Usage)
	if u.Get("prompt_tokens").Int() != 60 || u.Get("completion_tokens").Int() != 18 || u.Get("total_tokens").Int() != 78 ||
		u.Get("prompt_tokens_details.cached_tokens").Int() != 6 || u.Get("completion_tokens_details.reasoning_tokens").Int() != 3 {
		t.Fatalf("usage not summed over 3 rounds: %s", sum.Usage)
	}
	last := sum.Chunks[len(sum.Chunks)-1]
	xg := gjson.GetBytes(last, "x_gateway")
	if xg.Get("iterations").Int() != 3 || xg.Get("tool_calls.#").Int() != 2 || xg.Get("stop_reason").String() != "answer" ||
		xg.Get("tool_calls.0.name").String() != "calculator" || xg.Get("tool_calls.0.status").String() != "ok" {
		t.Fatalf("x_gateway %s", xg.Raw)
	}
	if m.calls() != 3 || m.closed != m.opened {
		t.Fatalf("model calls %d, streams closed %d of %d", m.calls(), m.closed, m.opened)
	}
	// Every round asks for usage and offers the server tools.
	for i := 0; i < 3; i++ {
		b := m.body(i)
		if !gjson.GetBytes(b, "stream_options.include_usage").Bool() || gjson.GetBytes(b, "tools.#").Int() != 2 {
			t.Fatalf("round %d body %s", i, b)
		}
	}
	// Round 3 sees both turns: assistant+tool, assistant+tool.
	third := m.body(2)
	msgs := gjson.GetBytes(third, "messages").Array()
	// With server tools the gateway gives every call its own unguessable id
	// (the upstream's "call_a" is not shown); calls and results stay paired.
	id := msgs[1].Get("tool_calls.0.id").String()
	if len(msgs) != 5 || !strings.HasPrefix(id, "call_") || len(id) < 20 || id == "call_a" || msgs[2].Get("tool_call_id").String() != id {
		t.Fatalf("history %s", gjson.GetBytes(third, "messages").Raw)
	}
	if c := gjson.Parse(msgs[2].Get("content").String()); c.Get("status").String() != "ok" || c.Get("data.result").Float() != 3 {
		t.Fatalf("calculator result %s", msgs[2].Get("content").String())
	}
	if c := gjson.Parse(msgs[4].Get("content").String()); c.Get("data.timezone").String() != "Europe/Oslo" {
		t.Fatalf("current_time result %s", msgs[4].Get("content").String())
	}
}

func TestBlockingTwoServerRoundsThenAnswer(t *testing.T) {
	t.Parallel()
	m := &fakeModel{turns: []turnFn{
		always(nil, completion("up-1", "", `[{"id":"call_a","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"2*(3+4)\"}"}}]`, "tool_calls", 10, 5)),
		always(nil, completion("up-2", "", `[{"id":"call_b","type":"function","function":{"name":"current_time","arguments":"{}"}}]`, "tool_calls", 20, 6)),
		always(nil, completion("up-3", "14, at noon.", "", "stop", 30, 7)),
	}}
	l := newLoop(t, []config.Tool{calcTool, timeTool}, nil)
	resp, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	b := gjson.ParseBytes(resp.Body)
	if b.Get("id").String() != "up-1" || b.Get("choices.0.message.content").String() != "14, at noon." ||
		b.Get("choices.0.finish_reason").String() != "stop" || b.Get("choices.0.message.tool_calls").Exists() {
		t.Fatalf("body %s", resp.Body)
	}
	if b.Get("usage.prompt_tokens").Int() != 60 || b.Get("usage.total_tokens").Int() != 78 || b.Get("usage.prompt_tokens_details.cached_tokens").Int() != 6 {
		t.Fatalf("usage %s", b.Get("usage").Raw)
	}
	if b.Get("x_gateway").Exists() {
		t.Fatal("x_gateway without tool trace")
	}
	tm := toolMessages(m.body(1))
	if len(tm) != 1 || gjson.Parse(tm[0].Get("content").String()).Get("data.result").Float() != 14 {
		t.Fatalf("tool messages %v", tm)
	}
}

// The request's output cap bounds the whole answer, not each round (a
// probe saw max_output_tokens 8 answered with 20): a later round is given
// what the earlier ones left of it, and a round that spends it ends the
// answer with "length", its server calls not run. Streamed and JSON alike.
func TestOutputCapSpansRounds(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			t.Parallel()
			calc := `[{"id":"call_a","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
			clock := `[{"id":"call_b","type":"function","function":{"name":"current_time","arguments":"{}"}}]`
			m := &fakeModel{turns: []turnFn{
				always(toolRound("up-1", "call_a", "calculator", `{"expression":"1+2"}`, 10, 5), completion("up-1", "", calc, "tool_calls", 10, 5)),
				always(toolRound("up-2", "call_b", "current_time", `{}`, 20, 4), completion("up-2", "", clock, "tool_calls", 20, 4)),
				always(textRound("up-3", "never asked", 30, 1), completion("up-3", "never asked", "", "stop", 30, 1)),
			}}
			l := newLoop(t, []config.Tool{calcTool, timeTool}, nil)
			body := userBody + `,"max_completion_tokens":8}`
			if stream {
				body = userBody + `,"max_completion_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`
			}
			resp, err := l.Chat(context.Background(), request(m, stream, body))
			if err != nil {
				t.Fatal(err)
			}
			var finish string
			var completionTokens int64
			if stream {
				sum := checkStream(t, sse(t, resp.Stream), true)
				finish = sum.FinishReason
				completionTokens = gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "usage.completion_tokens").Int()
			} else {
				finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str
				completionTokens = gjson.GetBytes(resp.Body, "usage.completion_tokens").Int()
			}
			if finish != "length" || m.calls() != 2 || completionTokens != 9 {
				t.Fatalf("finish %q after %d model calls, %d completion tokens; want length after 2, 9", finish, m.calls(), completionTokens)
			}
			if got := gjson.GetBytes(m.body(1), "max_completion_tokens").Int(); got != 3 {
				t.Fatalf("the second round was given max_completion_tokens %d, want 3 (8 less the first round's 5)", got)
			}
		})
	}
}

// An upstream answer without an id gets the gateway's, JSON and stream
// alike (a schema probe found the stream's made one and the JSON answer
// relayed none).
func TestAnswerWithoutIDGetsOne(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		m := &fakeModel{turns: []turnFn{always(textRound("", "Hi there.", 3, 2), completion("", "Hi there.", "", "stop", 3, 2))}}
		resp := chatLoop(t, calcTool, m, stream)
		var id string
		if stream {
			sum := checkStream(t, sse(t, resp.Stream), false)
			id = gjson.GetBytes(sum.Chunks[0], "id").Str
		} else {
			id = gjson.GetBytes(resp.Body, "id").Str
		}
		if !strings.HasPrefix(id, "chatcmpl-gw") {
			t.Fatalf("stream %v: id %q, want the gateway's", stream, id)
		}
	}
}

func TestClientCallsNormalized(t *testing.T) {
	t.Parallel()
	// Upstream: a server call (index 0), two client calls with interleaved
	// fragments (1, 2), a client call sent whole in one delta (3).
	round := []string{
		chunk("up-1", `{"role":"assistant","content":null}`, ""),
		chunk("up-1", callWhole(0, "call_s", "calculator", `{"expression":"6/2"}`), ""),
		chunk("up-1", callHeader(1, "call_w", "get_weather"), ""),
		chunk("up-1", callHeader(2, "call_l", "lookup"), ""),
		chunk("up-1", callFrag(1, `{"city":`), ""),
		chunk("up-1", callFrag(2, `{"q":"é`), ""),
		chunk("up-1", callFrag(1, `"Oslo"}`), ""),
		chunk("up-1", callFrag(2, `x"}`), ""),
		chunk("up-1", callWhole(3, "call_z", "get_weather", `{"city":"Bergen"}`), ""),
		chunk("up-1", `{}`, "tool_calls"),
		usageChunk("up-1", 10, 5, 0),
	}
	m := &fakeModel{turns: []turnFn{always(round, "")}}
	l := newLoop(t, []config.Tool{calcTool}, nil)
	body := userBody + `,"stream":true,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},{"type":"function","function":{"name":"lookup"}}]}`
	resp, err := l.Chat(context.Background(), request(m, true, body))
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), false)
	want := []struct{ id, name, args string }{
		{"call_w", "get_weather", `{"city":"Oslo"}`},
		{"call_l", "lookup", `{"q":"éx"}`},
		{"call_z", "get_weather", `{"city":"Bergen"}`},
	}
	if len(sum.ToolCalls) != len(want) || sum.FinishReason != "tool_calls" {
		t.Fatalf("calls %+v finish %q", sum.ToolCalls, sum.FinishReason)
	}
	for i, w := range want {
		c := sum.ToolCalls[i]
		// Server tools are configured: ids are the gateway's own, unique.
		if c.Index != i || c.ID == w.id || len(c.ID) < 20 || c.Name != w.name || c.Arguments != w.args {
			t.Fatalf("call %d = %+v, want %+v with a gateway id", i, c, w)
		}
		for _, o := range sum.ToolCalls[:i] {
			if o.ID == c.ID {
				t.Fatalf("duplicate id %s", c.ID)
			}
		}
	}
	if m.calls() != 1 {
		t.Fatalf("model calls %d: a turn with client calls ends the loop", m.calls())
	}
	if gjson.GetBytes(m.body(0), "tools.#").Int() != 3 {
		t.Fatalf("tools not injected: %s", m.body(0))
	}
}

func TestToolChoiceRequiredExecutesWithoutSecondCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, choice string
		stream       bool
	}{
		{"named stream", `{"type":"function","function":{"name":"calculator"}}`, true},
		{"required blocking", `"required"`, false},
		{"allowed_tools required", `{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"calculator"}}]}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &fakeModel{turns: []turnFn{always(
				toolRound("up-1", "call_a", "calculator", `{"expression":"2^10"}`, 10, 5),
				completion("up-1", "", `[{"id":"call_a","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"2^10\"}"}}]`, "tool_calls", 10, 5))}}
			l := newLoop(t, []config.Tool{calcTool, timeTool}, nil)
			body := userBody + `,"tool_choice":` + tc.choice
			if tc.stream {
				body += `,"stream":true`
			}
			resp, err := l.Chat(context.Background(), request(m, tc.stream, body+`}`))
			if err != nil {
				t.Fatal(err)
			}
			var content, finish string
			if tc.stream {
				sum := checkStream(t, sse(t, resp.Stream), false)
				content, finish = sum.Content, sum.FinishReason
			} else {
				content = gjson.GetBytes(resp.Body, "choices.0.message.content").String()
				finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").String()
			}
			if m.calls() != 1 || !strings.Contains(content, "1024") || finish != "stop" {
				t.Fatalf("calls %d content %q finish %q", m.calls(), content, finish)
			}
			if strings.Contains(tc.name, "allowed") && gjson.GetBytes(m.body(0), "tools.#").Int() != 1 {
				t.Fatalf("allowed_tools: only calculator may be offered: %s", gjson.GetBytes(m.body(0), "tools").Raw)
			}
		})
	}
}

// TestRequiredChoiceMetByClientTool: tool_choice "required" (or
// allowed_tools in required mode naming a client tool) from a client that
// offers its own tool is the client's: it expects a call of one of its tools
// (the Vercel AI SDK throws ToolChoiceViolationError on an answer without
// one). A server call does not end the answer with its results, as it does
// when no client tool can meet the choice: the loop calls the model again
// with the client's tool_choice, and hands the client call over. The final
// round (max_iterations 2 here) keeps the choice instead of "none".
func TestRequiredChoiceMetByClientTool(t *testing.T) {
	t.Parallel()
	const weather = `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	calc, city := `{"expression":"2^10"}`, `{"city":"Oslo"}`
	for _, tc := range []struct {
		name, choice string
		maxIter      int
	}{
		{"required", `"required"`, 0},
		{"required, final round", `"required"`, 2},
		{"allowed_tools required", `{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"calculator"}},{"type":"function","function":{"name":"get_weather"}}]}}`, 0},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tc.name, stream), func(t *testing.T) {
				t.Parallel()
				m := &fakeModel{turns: []turnFn{
					always(toolRound("up-1", "call_a", "calculator", calc, 10, 5),
						completion("up-1", "", `[{"id":"call_a","type":"function","function":{"name":"calculator","arguments":`+q(calc)+`}}]`, "tool_calls", 10, 5)),
					always(toolRound("up-2", "call_b", "get_weather", city, 10, 5),
						completion("up-2", "", `[{"id":"call_b","type":"function","function":{"name":"get_weather","arguments":`+q(city)+`}}]`, "tool_calls", 10, 5)),
				}}
				l := newLoop(t, []config.Tool{calcTool}, func(o *Options) {
					if tc.maxIter > 0 {
						o.Loop.MaxIterations = tc.maxIter
					}
				})
				body := userBody + weather + `,"tool_choice":` + tc.choice
				if stream {
					body += `,"stream":true`
				}
				resp, err := l.Chat(context.Background(), request(m, stream, body+`}`))
				if err != nil {
					t.Fatal(err)
				}
				var content, finish string
				var calls []string
				if stream {
					sum := checkStream(t, sse(t, resp.Stream), false)
					content, finish = sum.Content, sum.FinishReason
					for _, c := range sum.ToolCalls {
						calls = append(calls, c.Name)
					}
				} else {
					content = gjson.GetBytes(resp.Body, "choices.0.message.content").String()
					finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").String()
					for _, c := range gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.#.function.name").Array() {
						calls = append(calls, c.Str)
					}
				}
				if m.calls() != 2 || finish != "tool_calls" || len(calls) != 1 || calls[0] != "get_weather" || strings.Contains(content, "1024") {
					t.Fatalf("calls %d, finish %q, client calls %v, content %q; want 2 model calls and the get_weather call", m.calls(), finish, calls, content)
				}
				if got := gjson.GetBytes(m.body(1), "tool_choice").Raw; got != tc.choice {
					t.Fatalf("second call's tool_choice %s, want the client's %s", got, tc.choice)
				}
			})
		}
	}
}

func TestMaxIterationsEndsGracefully(t *testing.T) {
	t.Parallel()
	m := &fakeModel{turns: []turnFn{func(r *pipeline.Request) ([]string, string) {
		if gjson.GetBytes(r.Body, "tool_choice").String() == "none" {
			return textRound("up-x", "Final answer.", 1, 1), ""
		}
		return toolRound("up-x", "call_"+r.ID, "calculator", `{"expression":"1"}`, 1, 1), ""
	}}}
	var logs syncBuffer
	l := newLoop(t, []config.Tool{calcTool}, func(o *Options) {
		o.Loop.MaxIterations = 3
		o.Logger = zerolog.New(&logs)
	})
	req := request(m, true, userBody+`,"stream":true}`)
	req.Hints.ToolTrace = true
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), false)
	if sum.Content != "Final answer." || sum.FinishReason != "stop" || m.calls() != 3 {
		t.Fatalf("content %q finish %q calls %d", sum.Content, sum.FinishReason, m.calls())
	}
	if gjson.GetBytes(m.body(1), "tool_choice").Exists() || gjson.GetBytes(m.body(2), "tool_choice").String() != "none" {
		t.Fatal("only the last allowed call is forced to tool_choice none")
	}
	if r := gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway.stop_reason").String(); r != "max_iterations" {
		t.Fatalf("stop_reason %q", r)
	}
	if line := logs.String(); !strings.Contains(line, "tool loop budget reached") || !strings.Contains(line, `"max_iterations"`) {
		t.Fatalf("no log line saying why the loop ended: %q", line)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestInvalidArgumentsThenCorrected(t *testing.T) {
	t.Parallel()
	m := &fakeModel{turns: []turnFn{
		always(nil, completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expr\":\"1+1\"}"}}]`, "tool_calls", 1, 1)),
		always(nil, completion("up-2", "", `[{"id":"c2","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]`, "tool_calls", 1, 1)),
		always(nil, completion("up-3", "2", "", "stop", 1, 1)),
	}}
	l := newLoop(t, []config.Tool{calcTool}, nil)
	resp, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	if gjson.GetBytes(resp.Body, "choices.0.message.content").String() != "2" {
		t.Fatalf("body %s", resp.Body)
	}
	first := gjson.Parse(toolMessages(m.body(1))[0].Get("content").String())
	if first.Get("status").String() != "error" || first.Get("error.type").String() != "invalid_arguments" ||
		!strings.Contains(first.Get("error.message").String(), "expression") {
		t.Fatalf("validation result %s", first.Raw)
	}
	second := gjson.Parse(toolMessages(m.body(2))[1].Get("content").String())
	if second.Get("status").String() != "ok" || second.Get("data.result").Float() != 2 {
		t.Fatalf("corrected result %s", second.Raw)
	}
}

func TestArgumentEchoDropped(t *testing.T) {
	t.Parallel()
	args := `{"expression":"2*3"}`
	echo := []string{
		chunk("up-1", `{"role":"assistant","content":""}`, ""),
		chunk("up-1", `{"content":"{\"expression\":"}`, ""),
		chunk("up-1", `{"content":" \"2*3\"}"}`, ""),
		chunk("up-1", callWhole(0, "call_a", "calculator", args), ""),
		chunk("up-1", `{}`, "tool_calls"),
	}
	m := &fakeModel{turns: []turnFn{
		always(echo, completion("up-1", args, `[{"id":"call_a","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"2*3\"}"}}]`, "tool_calls", 1, 1)),
		always(textRound("up-2", "Six.", 1, 1), completion("up-2", "Six.", "", "stop", 1, 1)),
	}}
	for _, stream := range []bool{true, false} {
		name := "blocking"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			mm := &fakeModel{turns: m.turns}
			resp := chatLoop(t, calcTool, mm, stream)
			content := gjson.GetBytes(resp.Body, "choices.0.message.content").String()
			if stream {
				content = checkStream(t, sse(t, resp.Stream), false).Content
			}
			if content != "Six." {
				t.Fatalf("content %q: the echo must be dropped", content)
			}
			asst := gjson.GetBytes(mm.body(1), "messages.1")
			if asst.Get("role").String() != "assistant" || asst.Get("content").Type != gjson.Null {
				t.Fatalf("history keeps the echo: %s", asst.Raw)
			}
		})
	}
}

func TestTextBeforeToolCallsIsForwarded(t *testing.T) {
	t.Parallel()
	// Text that is not an echo, even when it starts with '{', reaches the client.
	round := []string{
		chunk("up-1", `{"role":"assistant","content":""}`, ""),
		chunk("up-1", `{"content":"{curly} Let me compute. "}`, ""),
		chunk("up-1", callWhole(0, "call_a", "calculator", `{"expression":"1"}`), ""),
		chunk("up-1", `{}`, "tool_calls"),
	}
	m := &fakeModel{turns: []turnFn{always(round, ""), always(textRound("up-2", "Done.", 1, 1), "")}}
	l := newLoop(t, []config.Tool{calcTool}, nil)
	resp, err := l.Chat(context.Background(), request(m, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := checkStream(t, sse(t, resp.Stream), false).Content; got != "{curly} Let me compute. Done." {
		t.Fatalf("content %q", got)
	}
}

// TestTextAroundToolCallsAsJSON: whitespace, then a call, then text in
// the same round: the stream shows what the JSON answer's content says,
// the whitespace included; whitespace alone before a call is hidden by
// both.
func TestTextAroundToolCallsAsJSON(t *testing.T) {
	t.Parallel()
	call := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1\"}"}}]`
	for _, tc := range []struct {
		name, after, want string
	}{
		{name: "text after the call", after: "Checking", want: "\nCheckingDone."},
		{name: "only whitespace", want: "Done."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			round := []string{
				chunk("up-1", `{"role":"assistant","content":"\n"}`, ""),
				chunk("up-1", callWhole(0, "c1", "calculator", `{"expression":"1"}`), ""),
			}
			if tc.after != "" {
				round = append(round, chunk("up-1", `{"content":`+q(tc.after)+`}`, ""))
			}
			round = append(round, chunk("up-1", `{}`, "tool_calls"))
			var got [2]string
			for i, stream := range []bool{true, false} {
				m := &fakeModel{turns: []turnFn{
					always(round, completion("up-1", "\n"+tc.after, call, "tool_calls", 1, 1)),
					always(textRound("up-2", "Done.", 1, 1), completion("up-2", "Done.", "", "stop", 1, 1)),
				}}
				resp := chatLoop(t, calcTool, m, stream)
				if stream {
					got[i] = checkStream(t, sse(t, resp.Stream), false).Content
				} else {
					got[i] = gjson.GetBytes(resp.Body, "choices.0.message.content").Str
				}
			}
			if got[0] != tc.want || got[1] != tc.want {
				t.Fatalf("stream %q, JSON %q, want %q", got[0], got[1], tc.want)
			}
		})
	}
}

// TestNullArgumentsAsStream: "arguments": null is no arguments in a JSON
// turn as in a streamed one: the tool runs with none, and the history the
// next round sends is the same.
func TestNullArgumentsAsStream(t *testing.T) {
	t.Parallel()
	var hist [2]string
	for i, stream := range []bool{true, false} {
		m := &fakeModel{turns: []turnFn{
			always([]string{
				chunk("up-1", `{"role":"assistant","content":null}`, ""),
				chunk("up-1", `{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"current_time","arguments":null}}]}`, ""),
				chunk("up-1", `{}`, "tool_calls"),
			}, completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"current_time","arguments":null}}]`, "tool_calls", 1, 1)),
			always(textRound("up-2", "Done.", 1, 1), completion("up-2", "Done.", "", "stop", 1, 1)),
		}}
		resp := chatLoop(t, timeTool, m, stream)
		if stream {
			sse(t, resp.Stream)
		}
		msgs := gjson.GetBytes(m.body(1), "messages")
		if r := msgs.Get("2.content").Str; !strings.Contains(r, `"status":"ok"`) {
			t.Fatalf("stream %v: result %s", stream, r)
		}
		hist[i] = msgs.Get("1.tool_calls.0.function.arguments").Raw
	}
	if hist[0] != hist[1] {
		t.Fatalf("arguments in the history: stream %s, JSON %s", hist[0], hist[1])
	}
}

func TestFastPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		tools      []config.Tool
		stream     bool
	}{
		{"no tools configured", userBody + `}`, nil, false},
		{"model glob does not match", userBody + `}`, []config.Tool{{Name: "calculator", Kind: "builtin", Models: []string{"claude-*"}}}, false},
		{"tool_choice none", userBody + `,"tool_choice":"none"}`, []config.Tool{calcTool}, false},
		{"a custom tool offered", userBody + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"custom","custom":{"name":"code_exec"}}]}`, []config.Tool{calcTool}, false},
		{"a custom tool offered in a stream, no server tool", userBody + `,"stream":true,"tools":[{"type":"custom","custom":{"name":"code_exec"}}]}`, nil, true},
		{"a provider's own tool offered", userBody + `,"tools":[{"type":"web_search"}]}`, []config.Tool{calcTool}, false},
		{"deprecated functions", userBody + `,"functions":[{"name":"get_weather","parameters":{"type":"object"}}]}`, []config.Tool{calcTool}, false},
		{"deprecated function_call", userBody + `,"function_call":"auto"}`, []config.Tool{calcTool}, false},
		{"allowed_tools names only client tools", userBody + `,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"x"}}]}}}`, []config.Tool{calcTool}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := &pipeline.Response{Body: []byte(`{"ok":1}`)}
			var got *pipeline.Request
			h := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				got = r
				return want, nil
			})
			l := newLoop(t, tc.tools, nil)
			req := request(h, tc.stream, tc.body)
			resp, err := l.Chat(context.Background(), req)
			if err != nil || resp != want || got != req {
				t.Fatalf("fast path must pass req and the response through unchanged (err %v)", err)
			}
		})
	}
}

func TestPolicyFiltersTools(t *testing.T) {
	t.Parallel()
	var got *pipeline.Request
	h := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		got = r
		return &pipeline.Response{Body: []byte(completion("up", "hi", "", "stop", 1, 1))}, nil
	})
	l := newLoop(t, []config.Tool{calcTool, timeTool}, nil)
	req := request(h, false, userBody+`}`)
	req.Tenant = &pipeline.Tenant{Name: "t", Policy: toolPolicy(func(name string) bool { return name == "current_time" })}
	if _, err := l.Chat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if names := gjson.GetBytes(got.Body, "tools.#.function.name").Raw; names != `["current_time"]` {
		t.Fatalf("offered %s", names)
	}
}

func TestClientToolNameClash(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{calcTool}, nil)
	m := &fakeModel{turns: []turnFn{always(nil, "{}")}}
	_, err := l.Chat(context.Background(), request(m, false, userBody+`,"tools":[{"type":"function","function":{"name":"calculator"}}]}`))
	pe, ok := err.(*pipeline.Error)
	if !ok || pe.Status != 400 || pe.Param != "tools" || m.calls() != 0 {
		t.Fatalf("err %v", err)
	}
}

func TestBodyFromModelLayerInStream(t *testing.T) {
	t.Parallel()
	// A model layer may answer a streamed round with a body (a cache hit).
	h := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if len(toolMessages(r.Body)) == 0 {
			return &pipeline.Response{Body: []byte(completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"3*3\"}"}}]`, "tool_calls", 1, 1))}, nil
		}
		return &pipeline.Response{Body: []byte(completion("up-2", "nine", "", "stop", 2, 2))}, nil
	})
	l := newLoop(t, []config.Tool{calcTool}, nil)
	resp, err := l.Chat(context.Background(), request(h, true, userBody+`,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), true)
	if sum.Content != "nine" || gjson.GetBytes(sum.Usage, "total_tokens").Int() != 6 {
		t.Fatalf("content %q usage %s", sum.Content, sum.Usage)
	}
}

// Under a client-required tool_choice, a model that calls only server tools
// while it may still reach the final round, whose server calls are never
// run: the final round offers the client's tools alone (an allowed_tools
// choice narrowed to them), so the answer ends with a client call, which
// the client's "required" asks for (the Vercel AI SDK throws
// ToolChoiceViolationError on an answer without one).
func TestRequiredChoiceFinalRoundOffersOnlyClientTools(t *testing.T) {
	t.Parallel()
	const weather = `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	calc, city := `{"expression":"2^10"}`, `{"city":"Oslo"}`
	for _, tc := range []struct {
		name, choice, finalChoice string
	}{
		{"required", `"required"`, `"required"`},
		{"allowed_tools required",
			`{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"calculator"}},{"type":"function","function":{"name":"get_weather"}}]}}`,
			`{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"get_weather"}}]}}`},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", tc.name, stream), func(t *testing.T) {
				t.Parallel()
				// The server tool whenever it is offered, else the client's.
				m := &fakeModel{turns: []turnFn{func(r *pipeline.Request) ([]string, string) {
					for _, n := range gjson.GetBytes(r.Body, "tools.#.function.name").Array() {
						if n.Str == "calculator" {
							return toolRound("up-c", "call_c", "calculator", calc, 10, 5),
								completion("up-c", "", `[{"id":"call_c","type":"function","function":{"name":"calculator","arguments":`+q(calc)+`}}]`, "tool_calls", 10, 5)
						}
					}
					return toolRound("up-w", "call_w", "get_weather", city, 10, 5),
						completion("up-w", "", `[{"id":"call_w","type":"function","function":{"name":"get_weather","arguments":`+q(city)+`}}]`, "tool_calls", 10, 5)
				}}}
				l := newLoop(t, []config.Tool{calcTool}, func(o *Options) { o.Loop.MaxIterations = 3 })
				body := userBody + weather + `,"tool_choice":` + tc.choice
				if stream {
					body += `,"stream":true`
				}
				resp, err := l.Chat(context.Background(), request(m, stream, body+`}`))
				if err != nil {
					t.Fatal(err)
				}
				var finish string
				var calls []string
				if stream {
					sum := checkStream(t, sse(t, resp.Stream), false)
					finish = sum.FinishReason
					for _, c := range sum.ToolCalls {
						calls = append(calls, c.Name)
					}
				} else {
					finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").String()
					for _, c := range gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.#.function.name").Array() {
						calls = append(calls, c.Str)
					}
				}
				if m.calls() != 3 || finish != "tool_calls" || len(calls) != 1 || calls[0] != "get_weather" {
					t.Fatalf("model calls %d, finish %q, client calls %v; want 3 model calls ending in the get_weather call", m.calls(), finish, calls)
				}
				if got := gjson.GetBytes(m.body(1), "tools.#.function.name").Raw; got != `["get_weather","calculator"]` {
					t.Fatalf("second round's tools %s, want every tool", got)
				}
				final := m.body(2)
				if got := gjson.GetBytes(final, "tools.#.function.name").Raw; got != `["get_weather"]` {
					t.Fatalf("final round's tools %s, want the client's alone", got)
				}
				if got := gjson.GetBytes(final, "tool_choice").Raw; got != tc.finalChoice {
					t.Fatalf("final round's tool_choice %s, want %s", got, tc.finalChoice)
				}
			})
		}
	}
}

// With no server tool offered the loop only normalizes the client's calls:
// a call of a tool the client did not offer is handed over with the others
// in one model call, streamed and not, never answered by the gateway as an
// unknown server tool (which dropped it, or looped the model until its
// error budget ran out).
func TestUnofferedCallWithoutServerToolsIsTheClients(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		m := &fakeModel{turns: []turnFn{always(
			[]string{
				chunk("up-1", `{"role":"assistant","content":null}`, ""),
				chunk("up-1", callWhole(0, "call_w", "get_weather", `{"city":"Oslo"}`), ""),
				chunk("up-1", callWhole(1, "call_t", "get_time", `{}`), ""),
				chunk("up-1", `{}`, "tool_calls"),
				usageChunk("up-1", 10, 5, 0),
			},
			completion("up-1", "", `[{"id":"call_w","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}},`+
				`{"id":"call_t","type":"function","function":{"name":"get_time","arguments":"{}"}}]`, "tool_calls", 10, 5))}}
		l := newLoop(t, nil, nil)
		body := userBody + `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
		if stream {
			body += `,"stream":true`
		}
		resp, err := l.Chat(context.Background(), request(m, stream, body+`}`))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		var finish string
		if stream {
			sum := checkStream(t, sse(t, resp.Stream), false)
			for _, c := range sum.ToolCalls {
				names = append(names, c.Name)
			}
			finish = sum.FinishReason
		} else {
			gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.#.function.name").ForEach(func(_, v gjson.Result) bool {
				names = append(names, v.Str)
				return true
			})
			finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str
		}
		if strings.Join(names, ",") != "get_weather,get_time" || finish != "tool_calls" || m.calls() != 1 {
			t.Errorf("stream %v: calls %v finish %q model calls %d", stream, names, finish, m.calls())
		}
	}
}

// A server call is reported with where its tool lives, and a near miss
// under the name of the tool it ran as (calculater ran calculator), and a
// name no tool answers to as "gateway" (it got the gateway's unknown-tool
// error), never as a builtin.
func TestServerCallSource(t *testing.T) {
	t.Parallel()
	calls := `[{"id":"c1","type":"function","function":{"name":"nonexistent_zz","arguments":"{}"}},` +
		`{"id":"c2","type":"function","function":{"name":"calculater","arguments":"{\"expression\":\"1+1\"}"}}]`
	m := &fakeModel{turns: []turnFn{
		always(nil, completion("up-1", "", calls, "tool_calls", 10, 5)),
		always(nil, completion("up-2", "done", "", "stop", 10, 5)),
	}}
	l := newLoop(t, []config.Tool{calcTool}, nil)
	req := request(m, false, userBody+`}`)
	var mu sync.Mutex
	got := map[string]string{}
	req.OnServerCall = func(c *pipeline.ServerCall) {
		mu.Lock()
		got[c.Name] = c.Source
		mu.Unlock()
	}
	if _, err := l.Chat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got["nonexistent_zz"] != "gateway" || got["calculator"] != "builtin" || len(got) != 2 {
		t.Fatalf("sources %v", got)
	}
}

// wallTimeRun runs one request whose model calls the tools named (in
// parallel, in one round; those named mcp_* are fakeSource's, the others
// unknown), then answers "Done.", under a loop wall time of wall; slow
// delays the first model call. It returns the model and the answer.
func wallTimeRun(t *testing.T, names []string, wall, slow time.Duration, mod func(*Options)) (*fakeModel, *pipeline.Response) {
	t.Helper()
	src := &fakeSource{}
	var tools []config.Tool
	var calls []string
	for i, n := range names {
		if strings.HasPrefix(n, "mcp_") {
			tools = append(tools, srcTool(n, `{"type":"object"}`))
		}
		calls = append(calls, fmt.Sprintf(`{"id":"u%d","type":"function","function":{"name":%q,"arguments":"{}"}}`, i, n))
	}
	src.set(tools...)
	callBody := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
		strings.Join(calls, ",") + `]},"finish_reason":"tool_calls"}]}`
	done := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`
	first := func(*pipeline.Request) ([]string, string) { time.Sleep(slow); return nil, callBody }
	m := &fakeModel{turns: []turnFn{first, always(nil, done)}}
	l := newLoop(t, nil, func(o *Options) {
		o.Source = src
		o.Loop.WallTime = config.Duration(wall)
		if mod != nil {
			mod(o)
		}
	})
	req := request(m, false, userBody+`}`)
	req.Hints.ToolTrace = true
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return m, resp
}

// toolResults are the tool messages' contents of the model's second call.
func toolResults(m *fakeModel) string {
	return gjson.GetBytes(m.bodies[1], `messages.#(role=="tool")#.content`).Raw
}

// The loop's wall time bounds a tool call running when it ends: the call
// is stopped (here long before its 5 s timeout), the model reads a
// wall_time error result, and its final answer follows. It was checked
// only between rounds, so a call could outlast it by its whole timeout.
// A call that finished with its own error before (a parallel sibling
// hung) keeps it; a round whose model call spent the wall time runs none
// of its calls; terminate_on_unknown_calls' stop on an unknown tool's
// result stands beside a sibling the wall time ended.
func TestWallTime(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	t.Run("stops a running call", func(t *testing.T) {
		t.Parallel()
		m, resp := wallTimeRun(t, []string{"mcp_hang"}, 200*ms, 0, nil)
		if gjson.GetBytes(resp.Body, "choices.0.message.content").Str != "Done." || len(m.bodies) != 2 {
			t.Fatalf("%d model calls, answer %s", len(m.bodies), resp.Body)
		}
		if got := toolResults(m); !strings.Contains(got, `wall_time`) || !strings.Contains(got, "stopped") {
			t.Fatalf("the model read %s", got)
		}
		// The trace says how long the call ran before it was stopped.
		if d := gjson.GetBytes(resp.Body, "x_gateway.tool_calls.0.duration_ms").Int(); d < 150 {
			t.Fatalf("a call stopped after 200 ms of wall time: duration_ms %d in %s", d, gjson.GetBytes(resp.Body, "x_gateway").Raw)
		}
	})
	t.Run("keeps a finished call's own error", func(t *testing.T) {
		t.Parallel()
		m, _ := wallTimeRun(t, []string{"mcp_fail", "mcp_hang"}, 300*ms, 0, nil)
		if got := toolResults(m); !strings.Contains(got, "remote says no") {
			t.Errorf("mcp_fail finished before the wall time, yet the model read %s", got)
		}
	})
	t.Run("spent before the tools", func(t *testing.T) {
		t.Parallel()
		m, _ := wallTimeRun(t, []string{"mcp_echo"}, 200*ms, 250*ms, nil)
		if got := toolResults(m); !strings.Contains(got, "wall_time") || !strings.Contains(got, "not run") {
			t.Errorf("the model read %s", got)
		}
	})
	t.Run("keeps a stop", func(t *testing.T) {
		t.Parallel()
		m, _ := wallTimeRun(t, []string{"zzzz_nothing", "mcp_hang"}, 300*ms, 0, func(o *Options) { o.Loop.TerminateOnUnknownCalls = true })
		if len(m.bodies) != 1 {
			t.Errorf("terminate_on_unknown_calls did not stop the loop: %d model calls", len(m.bodies))
		}
	})
}
