package toolloop

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wiretest"
	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The stream forwards every round's refusal and reasoning text as it comes;
// the JSON answer of the same rounds carries the same text, every round's,
// not only the last round's.
func TestRefusalAndReasoningOfEveryRound(t *testing.T) {
	t.Parallel()
	calc := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
	round1 := completion("up-1", "", calc, "tool_calls", 1, 1)
	round1, _ = setRaw(round1, "choices.0.message.refusal", `"I cannot say that. "`)
	round1, _ = setRaw(round1, "choices.0.message.reasoning_content", `"Compute first. "`)
	round2 := completion("up-2", "3", "", "stop", 1, 1)
	round2, _ = setRaw(round2, "choices.0.message.refusal", `"Still no."`)
	round2, _ = setRaw(round2, "choices.0.message.reasoning_content", `"Now answer."`)
	streamed := [][]string{{
		chunk("up-1", `{"role":"assistant","content":null}`, ""),
		chunk("up-1", `{"reasoning_content":"Compute first. "}`, ""),
		chunk("up-1", `{"refusal":"I cannot say that. "}`, ""),
		chunk("up-1", callWhole(0, "c1", "calculator", `{"expression":"1+2"}`), ""),
		chunk("up-1", `{}`, "tool_calls"),
	}, {
		chunk("up-2", `{"role":"assistant","reasoning_content":"Now answer."}`, ""),
		chunk("up-2", `{"refusal":"Still no."}`, ""),
		chunk("up-2", `{"content":"3"}`, ""),
		chunk("up-2", `{}`, "stop"),
	}}

	l := newLoop(t, []config.Tool{calcTool}, nil)
	sm := &fakeModel{turns: []turnFn{always(streamed[0], ""), always(streamed[1], "")}}
	resp, err := l.Chat(context.Background(), request(sm, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), false)
	var acc openai.ChatCompletionAccumulator
	var reasoning string
	for _, ch := range sum.Chunks {
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(ch, &c); err != nil {
			t.Fatal(err)
		}
		acc.AddChunk(c)
		reasoning += gjson.GetBytes(ch, "choices.0.delta.reasoning_content").String()
	}

	bm := &fakeModel{turns: []turnFn{always(nil, round1), always(nil, round2)}}
	resp, err = l.Chat(context.Background(), request(bm, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	msg := gjson.GetBytes(resp.Body, "choices.0.message")
	if got, want := msg.Get("refusal").String(), acc.Choices[0].Message.Refusal; got != want || want != "I cannot say that. Still no." {
		t.Fatalf("JSON refusal %q, streamed %q", got, want)
	}
	if got := msg.Get("reasoning_content").String(); got != reasoning || reasoning != "Compute first. Now answer." {
		t.Fatalf("JSON reasoning_content %q, streamed %q", got, reasoning)
	}
	if got := msg.Get("content").String(); got != acc.Choices[0].Message.Content {
		t.Fatalf("JSON content %q, streamed %q", got, acc.Choices[0].Message.Content)
	}
}

func setRaw(body, path, raw string) (string, error) {
	b, err := sjson.SetRawBytes([]byte(body), path, []byte(raw))
	return string(b), err
}

// Each later round reports into its own Meta: the client's
// x-gateway-attempts and x-gateway-model stay the first call's (a stream's
// headers leave before later rounds), other headers (context edits) still
// reach the client, and the trace lists every round's model and attempts.
func TestLaterRoundsReportIntoTheirOwnMeta(t *testing.T) {
	t.Parallel()
	calc := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
	n := 0
	layer := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		n++
		r.Meta.Set(fallback.HeaderAttempts, strconv.Itoa(n+1))
		r.Meta.Set(fallback.HeaderModel, "model-"+strconv.Itoa(n))
		r.Meta.Set("x-gateway-context-edits", "round-"+strconv.Itoa(n))
		if n == 1 {
			return &pipeline.Response{Body: []byte(completion("up-1", "", calc, "tool_calls", 1, 1))}, nil
		}
		return &pipeline.Response{Body: []byte(completion("up-2", "3", "", "stop", 1, 1))}, nil
	})
	l := newLoop(t, []config.Tool{calcTool}, nil)
	req := request(layer, false, userBody+`}`)
	req.Hints.ToolTrace = true
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if a, m, e := req.Meta.Get(fallback.HeaderAttempts), req.Meta.Get(fallback.HeaderModel), req.Meta.Get("x-gateway-context-edits"); a != "2" || m != "model-1" || e != "round-2" {
		t.Fatalf("attempts %q model %q context edits %q", a, m, e)
	}
	if got := gjson.GetBytes(resp.Body, "x_gateway.rounds").Raw; got != `[{"model":"model-1","attempts":2},{"model":"model-2","attempts":3}]` {
		t.Fatalf("rounds %s", got)
	}
}

// An upstream that answers a loop round with a second choice the client did
// not ask for (n was not above 1) misbehaves; the loop follows choice 0.
// The stream relays choice 0 only, and the JSON answer of the same rounds
// carries the same: one choice, with choice 0's content.
func TestUnaskedChoiceLeftInBothForms(t *testing.T) {
	t.Parallel()
	calc := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
	second := func(body string) string { // a second choice after choice 0
		b, _ := setRaw(body, "choices.-1", `{"index":1,"message":{"role":"assistant","content":"stray"},"logprobs":null,"finish_reason":"stop"}`)
		return b
	}
	first := func(body string) string { // a second choice before choice 0
		b, _ := setRaw(body, "choices", `[{"index":1,"message":{"role":"assistant","content":"stray"},"logprobs":null,"finish_reason":"stop"},`+
			gjson.Get(body, "choices.0").Raw+`]`)
		return b
	}
	strayChunk := `{"id":"up-2","object":"chat.completion.chunk","created":1767225600,"model":"gpt-x","choices":[{"index":1,"delta":{"role":"assistant","content":"stray"},"logprobs":null,"finish_reason":"stop"}],"usage":null}`
	for _, tc := range []struct {
		name    string
		rounds  []string   // JSON answers, one per round
		streams [][]string // the same rounds streamed
	}{
		{"after a tool round",
			[]string{completion("up-1", "", calc, "tool_calls", 1, 1), second(completion("up-2", "3", "", "stop", 1, 1))},
			[][]string{
				{chunk("up-1", callWhole(0, "c1", "calculator", `{"expression":"1+2"}`), ""), chunk("up-1", `{}`, "tool_calls")},
				{chunk("up-2", `{"role":"assistant","content":"3"}`, ""), strayChunk, chunk("up-2", `{}`, "stop")},
			}},
		{"in the only round",
			[]string{second(completion("up-2", "3", "", "stop", 1, 1))},
			[][]string{{chunk("up-2", `{"role":"assistant","content":"3"}`, ""), strayChunk, chunk("up-2", `{}`, "stop")}}},
		{"listed first", // the stream follows index 0, wherever it stands
			[]string{first(completion("up-2", "3", "", "stop", 1, 1))},
			[][]string{{strayChunk, chunk("up-2", `{"role":"assistant","content":"3"}`, ""), chunk("up-2", `{}`, "stop")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLoop(t, []config.Tool{calcTool}, nil)
			var sturns, bturns []turnFn
			for i := range tc.rounds {
				sturns = append(sturns, always(tc.streams[i], ""))
				bturns = append(bturns, always(nil, tc.rounds[i]))
			}
			resp, err := l.Chat(context.Background(), request(&fakeModel{turns: sturns}, true, userBody+`,"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			var acc openai.ChatCompletionAccumulator
			for _, ch := range checkStream(t, sse(t, resp.Stream), false).Chunks {
				var c openai.ChatCompletionChunk
				if err := json.Unmarshal(ch, &c); err != nil {
					t.Fatal(err)
				}
				acc.AddChunk(c)
			}
			resp, err = l.Chat(context.Background(), request(&fakeModel{turns: bturns}, false, userBody+`}`))
			if err != nil {
				t.Fatal(err)
			}
			choices := gjson.GetBytes(resp.Body, "choices").Array()
			if len(choices) != len(acc.Choices) || len(choices) != 1 {
				t.Fatalf("JSON answer has %d choices, the stream %d: %s", len(choices), len(acc.Choices), resp.Body)
			}
			if got, want := choices[0].Get("message.content").String(), acc.Choices[0].Message.Content; got != want || want != "3" {
				t.Fatalf("JSON content %q, streamed %q", got, want)
			}
		})
	}
}

// Each round's request says how its messages relate to the client's: the
// first round's are the client's, a later round's add the loop's history
// after them, so an upstream error naming a history message does not pass
// as an index of the client's.
func TestRoundsRecordTheirMessages(t *testing.T) {
	t.Parallel()
	calc := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
	var maps []pipeline.MessageMap
	layer := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		maps = append(maps, r.Messages)
		if len(maps) == 1 {
			return &pipeline.Response{Body: []byte(completion("up-1", "", calc, "tool_calls", 1, 1))}, nil
		}
		return &pipeline.Response{Body: []byte(completion("up-2", "3", "", "stop", 1, 1))}, nil
	})
	l := newLoop(t, []config.Tool{calcTool}, nil)
	if _, err := l.Chat(context.Background(), request(layer, false, userBody+`}`)); err != nil {
		t.Fatal(err)
	}
	if len(maps) != 2 || maps[0] != (pipeline.MessageMap{}) || maps[1] != (pipeline.MessageMap{Client: 1}) {
		t.Fatalf("rounds' message maps %+v", maps)
	}
	if got := maps[1].ClientParam("messages.[1].content"); got != "messages" { // the loop's assistant message
		t.Fatalf("a history message named as %q", got)
	}
	if got := maps[1].ClientParam("messages.[0].content"); got != "messages.[0].content" {
		t.Fatalf("the client's message named as %q", got)
	}
}

// With server tools in play every call id the client sees is the gateway's
// own (docs/wire.md rule 11), in the JSON answer as in the stream, also
// when the round has only client calls: the JSON answer kept the upstream's
// ids then, because it rewrote tool_calls only to remove server calls.
func TestClientCallIDsSameBothWays(t *testing.T) {
	t.Parallel()
	const body = userBody + `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	args := `{"city":"Oslo"}`
	turn := always([]string{
		chunk("up-1", `{"role":"assistant","content":null}`, ""),
		chunk("up-1", callWhole(0, "call_a", "get_weather", args), ""),
		chunk("up-1", `{}`, "tool_calls"),
	}, completion("up-1", "", `[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":`+q(args)+`}}]`, "tool_calls", 10, 2))
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			t.Parallel()
			l := newLoop(t, []config.Tool{calcTool}, nil)
			b := body + `}`
			if stream {
				b = body + `,"stream":true}`
			}
			resp, err := l.Chat(context.Background(), request(&fakeModel{turns: []turnFn{turn}}, stream, b))
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			if stream {
				for _, c := range checkStream(t, sse(t, resp.Stream), false).ToolCalls {
					ids = append(ids, c.ID)
				}
			} else {
				for _, c := range gjson.GetBytes(resp.Body, "choices.0.message.tool_calls").Array() {
					ids = append(ids, c.Get("id").Str)
				}
			}
			if len(ids) != 1 || ids[0] == "call_a" || len(ids[0]) != len(newCallID()) {
				t.Fatalf("call ids %q, want one of the gateway's own", ids)
			}
		})
	}
}

// withLogprobs puts lp as the choice's logprobs of a chunk or a body built
// by chunk or completion.
func withLogprobs(s, lp string) string {
	return strings.Replace(s, `"logprobs":null`, `"logprobs":`+lp, 1)
}

// tokenLP is a logprobs object of one content token.
func tokenLP(tok string) string {
	return `{"content":[{"token":` + q(tok) + `,"logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}],"refusal":null}`
}

// streamTokens returns the content tokens of every chunk's logprobs, in
// order, and checks that openai-go's accumulator gathers the same.
func streamTokens(t *testing.T, sum *wiretest.Summary) []string {
	t.Helper()
	var toks []string
	var acc openai.ChatCompletionAccumulator
	for _, ch := range sum.Chunks {
		for _, it := range gjson.GetBytes(ch, "choices.0.logprobs.content").Array() {
			toks = append(toks, it.Get("token").Str)
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(ch, &c); err != nil {
			t.Fatal(err)
		}
		acc.AddChunk(c)
	}
	var accToks []string
	for _, lp := range acc.Choices[0].Logprobs.Content {
		accToks = append(accToks, lp.Token)
	}
	if strings.Join(accToks, "|") != strings.Join(toks, "|") {
		t.Fatalf("openai-go accumulated tokens %q, the chunks carry %q", accToks, toks)
	}
	return toks
}

// The loop's stream carries each chunk's logprobs on the chunk that shows
// its text, and the JSON answer of the same rounds joins every shown
// round's, as an SDK accumulates the stream: the stream wrote
// "logprobs":null on every chunk, and the JSON answer kept only the last
// round's. service_tier, which the relay passes on, is on every chunk too.
func TestLogprobsSameBothWays(t *testing.T) {
	t.Parallel()
	const client = `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	tier := func(s string) string {
		return strings.Replace(s, `"model":"gpt-x",`, `"model":"gpt-x","service_tier":"default",`, 1)
	}
	calc := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
	for _, tc := range []struct {
		name   string
		tools  []config.Tool
		body   string
		rounds [][]string // streamed rounds
		bodies []string   // the same rounds as JSON; nil: the JSON form is relayed, not compared
		want   []string   // tokens
	}{
		{
			name: "client tools, live text",
			body: client,
			rounds: [][]string{{
				chunk("up-1", `{"role":"assistant","content":""}`, ""),
				withLogprobs(chunk("up-1", `{"content":"Hi"}`, ""), tokenLP("Hi")),
				withLogprobs(chunk("up-1", `{"content":" there"}`, ""), tokenLP(" there")),
				chunk("up-1", `{}`, "stop"),
			}},
			want: []string{"Hi", " there"},
		},
		{
			name: "client tools, held text joined",
			body: client,
			rounds: [][]string{{
				chunk("up-1", `{"role":"assistant","content":""}`, ""),
				withLogprobs(chunk("up-1", `{"content":" "}`, ""), tokenLP(" ")),
				withLogprobs(chunk("up-1", `{"content":"{\"a\":"}`, ""), tokenLP(`{"a":`)),
				withLogprobs(chunk("up-1", `{"content":"1}"}`, ""), tokenLP("1}")),
				chunk("up-1", `{}`, "stop"),
			}},
			want: []string{" ", `{"a":`, "1}"},
		},
		{
			name:  "server tool rounds",
			tools: []config.Tool{calcTool},
			rounds: [][]string{{
				chunk("up-1", `{"role":"assistant","content":""}`, ""),
				withLogprobs(chunk("up-1", `{"content":"Let me check. "}`, ""), tokenLP("Let me check. ")),
				chunk("up-1", callWhole(0, "c1", "calculator", `{"expression":"1+2"}`), ""),
				chunk("up-1", `{}`, "tool_calls"),
			}, {
				chunk("up-2", `{"role":"assistant","content":""}`, ""),
				withLogprobs(chunk("up-2", `{"content":"It is"}`, ""), tokenLP("It is")),
				withLogprobs(chunk("up-2", `{"content":" 3."}`, ""), tokenLP(" 3.")),
				chunk("up-2", `{}`, "stop"),
			}},
			bodies: []string{
				withLogprobs(completion("up-1", "Let me check. ", calc, "tool_calls", 1, 1), tokenLP("Let me check. ")),
				withLogprobs(completion("up-2", "It is 3.", "", "stop", 1, 1),
					`{"content":[{"token":"It is","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]},{"token":" 3.","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}],"refusal":null}`),
			},
			want: []string{"Let me check. ", "It is", " 3."},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var turns []turnFn
			for i, r := range tc.rounds {
				var chunks []string
				for _, c := range r {
					chunks = append(chunks, tier(c))
				}
				b := ""
				if tc.bodies != nil {
					b = tier(tc.bodies[i])
				}
				turns = append(turns, always(chunks, b))
			}
			l := newLoop(t, tc.tools, nil)
			resp, err := l.Chat(context.Background(), request(&fakeModel{turns: turns}, true, userBody+tc.body+`,"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			sum := checkStream(t, sse(t, resp.Stream), false)
			if got := streamTokens(t, sum); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("streamed tokens %q, want %q", got, tc.want)
			}
			for i, ch := range sum.Chunks {
				if gjson.GetBytes(ch, "service_tier").Str != "default" {
					t.Fatalf("chunk %d lacks the service_tier: %s", i, ch)
				}
			}
			if tc.bodies == nil {
				return
			}
			resp, err = l.Chat(context.Background(), request(&fakeModel{turns: turns}, false, userBody+tc.body+`}`))
			if err != nil {
				t.Fatal(err)
			}
			var whole []string
			for _, it := range gjson.GetBytes(resp.Body, "choices.0.logprobs.content").Array() {
				whole = append(whole, it.Get("token").Str)
			}
			if strings.Join(whole, "|") != strings.Join(tc.want, "|") || gjson.GetBytes(resp.Body, "choices.0.message.content").Str != sum.Content {
				t.Fatalf("JSON tokens %q, want %q: %s", whole, tc.want, resp.Body)
			}
		})
	}
}

// Parallel calls an upstream streams all at index 0, each whole with its
// own id (as some OpenAI-compatible servers do), stay apart: the stream
// shows two calls, as the JSON answer of the same turn has them.
func TestParallelCallsAtOneIndexStayApart(t *testing.T) {
	t.Parallel()
	const body = userBody + `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},{"type":"function","function":{"name":"get_time","parameters":{"type":"object"}}}]`
	turn := always([]string{
		chunk("up-1", `{"role":"assistant","content":null}`, ""),
		chunk("up-1", callWhole(0, "call_a", "get_weather", `{"city":"Oslo"}`), ""),
		chunk("up-1", callWhole(0, "call_b", "get_time", `{"tz":"CET"}`), ""),
		chunk("up-1", `{}`, "tool_calls"),
	}, completion("up-1", "", `[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}},`+
		`{"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"CET\"}"}}]`, "tool_calls", 10, 2))
	var forms []string
	for _, stream := range []bool{false, true} {
		l := newLoop(t, []config.Tool{calcTool}, nil)
		b := body + `}`
		if stream {
			b = body + `,"stream":true}`
		}
		resp, err := l.Chat(context.Background(), request(&fakeModel{turns: []turnFn{turn}}, stream, b))
		if err != nil {
			t.Fatal(err)
		}
		var calls []string
		if stream {
			for _, c := range checkStream(t, sse(t, resp.Stream), false).ToolCalls {
				calls = append(calls, c.Name+" "+c.Arguments)
			}
		} else {
			for _, c := range gjson.GetBytes(resp.Body, "choices.0.message.tool_calls").Array() {
				calls = append(calls, c.Get("function.name").Str+" "+c.Get("function.arguments").Str)
			}
		}
		forms = append(forms, strings.Join(calls, " | "))
	}
	if want := `get_weather {"city":"Oslo"} | get_time {"tz":"CET"}`; forms[0] != want || forms[1] != want {
		t.Fatalf("JSON %q, stream %q, want %q", forms[0], forms[1], want)
	}
}

// A stream shows the first round's system_fingerprint and service_tier on
// every chunk (its chunks leave before later rounds come); the JSON answer
// of the same rounds has the first round's too, not the last one's.
func TestFingerprintAndTierOfFirstRoundBothWays(t *testing.T) {
	t.Parallel()
	mark := func(s, fp, tier string) string {
		if fp == "" {
			return s
		}
		return strings.Replace(s, `"model":"gpt-x",`, `"model":"gpt-x","system_fingerprint":"`+fp+`","service_tier":"`+tier+`",`, 1)
	}
	marks := func(chunks []string, fp, tier string) []string {
		out := make([]string, len(chunks))
		for i, c := range chunks {
			out[i] = mark(c, fp, tier)
		}
		return out
	}
	calc := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
	for _, tc := range []struct{ name, fp, tier string }{
		{"first round marked", "fp_1", "default"},
		{"first round unmarked", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			turns := []turnFn{
				always(marks(toolRound("up-1", "c1", "calculator", `{"expression":"1+2"}`, 1, 1), tc.fp, tc.tier),
					mark(completion("up-1", "", calc, "tool_calls", 1, 1), tc.fp, tc.tier)),
				always(marks(textRound("up-2", "It is 3.", 1, 1), "fp_2", "flex"),
					mark(completion("up-2", "It is 3.", "", "stop", 1, 1), "fp_2", "flex")),
			}
			l := newLoop(t, []config.Tool{calcTool}, nil)
			resp, err := l.Chat(context.Background(), request(&fakeModel{turns: turns}, true, userBody+`,"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			sum := checkStream(t, sse(t, resp.Stream), false)
			last := sum.Chunks[len(sum.Chunks)-1]
			streamed := gjson.GetBytes(last, "system_fingerprint").Str + "/" + gjson.GetBytes(last, "service_tier").Str

			resp, err = l.Chat(context.Background(), request(&fakeModel{turns: turns}, false, userBody+`}`))
			if err != nil {
				t.Fatal(err)
			}
			body := gjson.GetBytes(resp.Body, "system_fingerprint").Str + "/" + gjson.GetBytes(resp.Body, "service_tier").Str
			if want := tc.fp + "/" + tc.tier; streamed != want || body != want {
				t.Fatalf("streamed %q, JSON %q, want %q", streamed, body, want)
			}
		})
	}
}

// A search model's annotations (and any other message member the loop does
// not read) reach the client in both forms: the stream sends the last
// round's before its finish, as the JSON answer's message carries them;
// after earlier rounds' text, their offsets count from the start of the
// whole content in both.
func TestAnnotationsBothWays(t *testing.T) {
	t.Parallel()
	cite := func(start, end int) string {
		return `[{"type":"url_citation","url_citation":{"start_index":` + strconv.Itoa(start) + `,"end_index":` + strconv.Itoa(end) +
			`,"url":"https://example.com","title":"Example"}}]`
	}
	calc := `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`
	const first, answer = "First round, é. ", "See example.com."
	final := completion("up-2", answer, "", "stop", 1, 1)
	final, _ = setRaw(final, "choices.0.message.annotations", cite(4, 15))
	final, _ = setRaw(final, "choices.0.message.reasoning_details", `[{"type":"reasoning.text","text":"r"}]`)
	const citations = `["https://example.com"]` // a provider's own top-level member (Perplexity's)
	final, _ = setRaw(final, "citations", citations)
	withCitations := func(c string) string { return strings.Replace(c, `{"id":`, `{"citations":`+citations+`,"id":`, 1) }
	finalChunks := []string{
		withCitations(chunk("up-2", `{"role":"assistant","content":"See ","token_id":1}`, "")), // Together's per-delta token_id: no message member
		withCitations(chunk("up-2", `{"content":"example.com.","token_id":2}`, "")),
		withCitations(chunk("up-2", `{"annotations":`+cite(4, 15)+`}`, "")),
		withCitations(chunk("up-2", `{"reasoning_details":[{"type":"reasoning.text","text":"r"}],"annotations":[]}`, "")),
		withCitations(chunk("up-2", `{}`, "stop")),
	}
	for _, rounds := range []int{1, 2} {
		var streamed, bodies []turnFn
		if rounds == 2 {
			streamed = append(streamed, always([]string{
				chunk("up-1", `{"role":"assistant","content":`+q(first)+`}`, ""),
				chunk("up-1", callWhole(0, "c1", "calculator", `{"expression":"1+2"}`), ""),
				chunk("up-1", `{}`, "tool_calls"),
			}, ""))
			bodies = append(bodies, always(nil, completion("up-1", first, calc, "tool_calls", 1, 1)))
		}
		streamed = append(streamed, always(finalChunks, ""))
		bodies = append(bodies, always(nil, final))

		l := newLoop(t, []config.Tool{calcTool}, nil)
		resp, err := l.Chat(context.Background(), request(&fakeModel{turns: streamed}, true, userBody+`,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		sum := checkStream(t, sse(t, resp.Stream), false)
		var acc openai.ChatCompletionAccumulator
		var details, topCitations string
		var streamedCites []string
		for _, ch := range sum.Chunks {
			if gjson.GetBytes(ch, "choices.0.delta.token_id").Exists() {
				t.Fatalf("%d rounds: a per-chunk figure became a message member: %s", rounds, ch)
			}
			if c := gjson.GetBytes(ch, "citations"); c.Exists() {
				topCitations += c.Raw // the last round's, once
			}
			var c openai.ChatCompletionChunk
			if err := json.Unmarshal(ch, &c); err != nil {
				t.Fatal(err)
			}
			acc.AddChunk(c)
			if d := gjson.GetBytes(ch, "choices.0.delta.reasoning_details"); d.Exists() {
				details += d.Raw
			}
			// openai-go's accumulator keeps no annotations; the Node SDK's
			// joins the arrays of the deltas, as here.
			gjson.GetBytes(ch, "choices.0.delta.annotations").ForEach(func(_, a gjson.Result) bool {
				streamedCites = append(streamedCites, a.Get("url_citation.start_index").String()+"-"+a.Get("url_citation.end_index").String())
				return true
			})
		}
		resp, err = l.Chat(context.Background(), request(&fakeModel{turns: bodies}, false, userBody+`}`))
		if err != nil {
			t.Fatal(err)
		}
		msg := gjson.GetBytes(resp.Body, "choices.0.message")
		content := msg.Get("content").Str
		if content != acc.Choices[0].Message.Content {
			t.Fatalf("%d rounds: JSON content %q, streamed %q", rounds, content, acc.Choices[0].Message.Content)
		}
		var jsonCites []string
		msg.Get("annotations").ForEach(func(_, a gjson.Result) bool {
			jsonCites = append(jsonCites, a.Get("url_citation.start_index").String()+"-"+a.Get("url_citation.end_index").String())
			return true
		})
		if strings.Join(jsonCites, ",") != strings.Join(streamedCites, ",") || len(jsonCites) != 1 {
			t.Fatalf("%d rounds: JSON annotations %v, streamed %v", rounds, jsonCites, streamedCites)
		}
		// The citation spans "example.com" in the whole content.
		runes := []rune(content)
		var start, end int
		_, _ = fmt.Sscanf(jsonCites[0], "%d-%d", &start, &end)
		if end > len(runes) || string(runes[start:end]) != "example.com" {
			t.Fatalf("%d rounds: the citation %d-%d of %q does not span the cited text", rounds, start, end, content)
		}
		if j := gjson.GetBytes(resp.Body, "citations").Raw; j != citations || topCitations != j {
			t.Fatalf("%d rounds: JSON citations %s, streamed %s", rounds, j, topCitations)
		}
		if details != msg.Get("reasoning_details").Raw {
			t.Fatalf("%d rounds: JSON reasoning_details %s, streamed %s", rounds, msg.Get("reasoning_details").Raw, details)
		}
	}
}
