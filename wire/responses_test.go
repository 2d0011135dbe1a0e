package wire

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wiretest"
)

var respHeader = ResponsesHeader{ID: "resp_abc", Created: 1767225600, Model: "gpt-x",
	Echo: []byte(`"instructions":null,"tools":[],"tool_choice":"auto","parallel_tool_calls":true,"metadata":{},"temperature":null,"top_p":null`)}

// encodeBoth runs events through the stream and the JSON form; it returns
// the stream's bytes, the terminal event's response and the JSON object.
func encodeBoth(events []Event) (stream []byte, final gjson.Result, object []byte) {
	return encodeBothWith(respHeader, events)
}

// encodeBothWith is encodeBoth under header h.
func encodeBothWith(h ResponsesHeader, events []Event) (stream []byte, final gjson.Result, object []byte) {
	s, j := NewResponsesStream(h), NewResponsesJSON(h)
	for i := range events {
		stream = s.Encode(stream, &events[i])
		object = j.Encode(object, &events[i])
	}
	var last []byte
	for ev := range bytes.SplitSeq(stream, []byte("\n\n")) {
		if i := bytes.Index(ev, []byte("data: ")); i >= 0 {
			last = ev[i+6:]
		}
	}
	return stream, gjson.GetBytes(last, "response"), object
}

func text(key, s string) Event { return Event{Kind: Text, Key: key, Text: []byte(s)} }

// The stream's terminal response and the JSON answer of the same events
// are the same object, and the stream passes the Responses checker and
// the schema: text, refusal, reasoning, interleaved parallel calls, a
// server call, a length cut.
func TestResponsesStreamAndJSONAgree(t *testing.T) {
	schema := wiretest.LoadResponsesSchema(t)
	usage := Event{Kind: Usage, Raw: []byte(`{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}`)}
	cases := map[string][]Event{
		"text": {{Kind: Role}, text("content", "Hel"), text("content", "lo é"), {Kind: Finish, Finish: "stop"}, usage, {Kind: End}},
		"reasoning then text and refusal": {{Kind: Role}, text("reasoning_content", "think"), text("content", "a"),
			text("refusal", "no"), {Kind: Finish, Finish: "stop"}, {Kind: End}},
		"interleaved calls": {{Kind: Role}, text("content", "calling"),
			{Kind: CallHeader, Index: 0, ID: "call_a", Name: "f"}, {Kind: CallHeader, Index: 1, ID: "call_b", Name: "g"},
			{Kind: CallArgs, Index: 0, Text: []byte(`{"x":`)}, {Kind: CallArgs, Index: 1, Text: []byte(`{"y":2}`)},
			{Kind: CallArgs, Index: 0, Text: []byte(`1}`)}, {Kind: Finish, Finish: "tool_calls"}, usage, {Kind: End}},
		"server call between rounds": {{Kind: Role}, text("content", "let me"),
			{Kind: ServerCall, Name: "calc", Key: "builtin", Text: []byte(`{"e":"1+1"}`), Raw: []byte(`2`)},
			{Kind: ServerCall, Name: "calc", Key: "builtin", Text: []byte(`{}`), Finish: "bad input"},
			text("content", "it is 2"), {Kind: Finish, Finish: "stop"}, {Kind: End}},
		"length": {{Kind: Role}, text("content", "cut"), {Kind: Finish, Finish: "length"}, {Kind: End}},
		// A model that said nothing: a message of empty text, which an
		// agent takes as the final answer instead of asking again.
		"empty answer":            {{Kind: Role}, text("content", ""), {Kind: Finish, Finish: "stop"}, usage, {Kind: End}},
		"reasoning and no text":   {{Kind: Role}, text("reasoning_content", "hm"), {Kind: Finish, Finish: "stop"}, {Kind: End}},
		"no finish and no text":   {{Kind: Role}, text("content", ""), usage, {Kind: End}},
		"tool_calls and no call":  {{Kind: Role}, {Kind: Finish, Finish: "tool_calls"}, {Kind: End}},
		"server call and no text": {{Kind: Role}, {Kind: ServerCall, Name: "calc", Key: "builtin", Text: []byte(`{}`), Raw: []byte(`2`)}, {Kind: Finish, Finish: "stop"}, {Kind: End}},
		// A loop's last round cut: the items done before it stay completed,
		// in the terminal response as in their output_item.done.
		"length after a server call": {{Kind: Role}, text("reasoning_content", "plan"), text("content", "let me"),
			{Kind: ServerCall, Name: "calc", Key: "builtin", Text: []byte(`{"e":"1+1"}`), Raw: []byte(`2`)},
			text("content", "it is"), {Kind: Finish, Finish: "length"}, {Kind: End}},
		"content filter after a server call": {{Kind: Role}, text("content", "let me"),
			{Kind: ServerCall, Name: "calc", Key: "builtin", Text: []byte(`{"e":"1+1"}`), Raw: []byte(`2`)},
			text("content", "it is"), {Kind: Finish, Finish: "content_filter"}, {Kind: End}},
	}
	for name, events := range cases {
		t.Run(name, func(t *testing.T) {
			stream, final, object := encodeBoth(events)
			sum, err := wiretest.CheckResponsesStream(stream, schema)
			if err != nil {
				t.Fatalf("%v\n%s", err, stream)
			}
			if final.Raw != string(object) {
				t.Fatalf("stream and JSON differ:\n%s\n%s", final.Raw, object)
			}
			if err := schema.Validate("Response", object); err != nil {
				t.Fatalf("%v\n%s", err, object)
			}
			want, reason := "response.completed", ""
			switch name {
			case "length", "length after a server call":
				want, reason = "response.incomplete", "max_output_tokens"
			case "content filter after a server call":
				want, reason = "response.incomplete", "content_filter"
			}
			if reason != "" {
				if gjson.GetBytes(object, "incomplete_details.reason").Str != reason {
					t.Fatalf("incomplete_details: %s", object)
				}
				// What was open when the answer was cut is incomplete; what
				// was done before it (and the server call) is completed.
				o := gjson.ParseBytes(object)
				last := o.Get("output.#").Int() - 1
				if o.Get(fmt.Sprintf("output.%d.status", last)).Str != "incomplete" {
					t.Fatalf("the cut item is not incomplete: %s", o.Get("output").Raw)
				}
				if last > 0 && o.Get("output.0.status").Str != "completed" {
					t.Fatalf("an item done before the cut is not completed: %s", o.Get("output").Raw)
				}
			}
			if sum.Terminal != want {
				t.Fatalf("terminal %s, want %s", sum.Terminal, want)
			}
		})
	}
	// The values that matter, once.
	_, _, object := encodeBoth(cases["interleaved calls"])
	o := gjson.ParseBytes(object)
	if o.Get("output.1.arguments").Str != `{"x":1}` || o.Get("output.2.arguments").Str != `{"y":2}` || o.Get("output.2.call_id").Str != "call_b" {
		t.Fatalf("calls: %s", o.Get("output").Raw)
	}
	if o.Get("usage.input_tokens").Int() != 12 || o.Get("usage.input_tokens_details.cached_tokens").Int() != 4 ||
		o.Get("usage.output_tokens_details.reasoning_tokens").Int() != 2 || o.Get("usage.total_tokens").Int() != 17 {
		t.Fatalf("usage: %s", o.Get("usage").Raw)
	}
	for name, types := range map[string]string{"empty answer": `["message"]`, "reasoning and no text": `["reasoning","message"]`,
		"server call and no text": `["mcp_call","message"]`, "length": `["message"]`, "no finish and no text": `["message"]`, "tool_calls and no call": `["message"]`, "interleaved calls": `["message","function_call","function_call"]`} {
		_, _, object := encodeBoth(cases[name])
		o := gjson.ParseBytes(object)
		if o.Get("output.#.type").Raw != types {
			t.Errorf("%s: output %s", name, o.Get("output").Raw)
		}
		if m := o.Get(`output.#(type=="message")`); m.Get("content.#").Int() != 1 || m.Get("content.0.type").Str != "output_text" {
			t.Errorf("%s: message %s", name, m.Raw)
		}
	}
	_, _, object = encodeBoth(cases["server call between rounds"])
	o = gjson.ParseBytes(object)
	if o.Get("output.#").Int() != 4 || o.Get("output.1.type").Str != "mcp_call" || o.Get("output.2.status").Str != "failed" ||
		o.Get("output.2.error.content").Str != "bad input" || o.Get("output.3.content.0.text").Str != "it is 2" {
		t.Fatalf("server calls: %s", o.Get("output").Raw)
	}
}

// A mixed turn: the client's call is streamed while the round is read, and
// the server call is reported once it ran, after the round. The call is
// done before the mcp_call is added, so a client that takes a call on its
// output_item.done (the AI SDK) lists the calls in the JSON answer's order.
func TestResponsesServerCallClosesCalls(t *testing.T) {
	events := []Event{{Kind: Role}, text("content", "checking"),
		{Kind: CallHeader, Index: 0, ID: "call_a", Name: "get_weather"}, {Kind: CallArgs, Index: 0, Text: []byte(`{"city":"Oslo"}`)},
		{Kind: ServerCall, Name: "calc", Key: "builtin", Text: []byte(`{"e":"1+1"}`), Raw: []byte(`2`)},
		{Kind: Finish, Finish: "tool_calls"}, {Kind: End}}
	stream, final, object := encodeBoth(events)
	if _, err := wiretest.CheckResponsesStream(stream, wiretest.LoadResponsesSchema(t)); err != nil {
		t.Fatalf("%v\n%s", err, stream)
	}
	if final.Raw != string(object) {
		t.Fatalf("stream and JSON differ:\n%s\n%s", final.Raw, object)
	}
	var done []string // item types in the order of their output_item.done
	for ev := range bytes.SplitSeq(stream, []byte("\n\n")) {
		if i := bytes.Index(ev, []byte("data: ")); i >= 0 && gjson.GetBytes(ev[i+6:], "type").Str == "response.output_item.done" {
			done = append(done, gjson.GetBytes(ev[i+6:], "item.type").Str)
		}
	}
	var order []string
	gjson.GetBytes(object, "output.#.type").ForEach(func(_, v gjson.Result) bool { order = append(order, v.Str); return true })
	if fmt.Sprint(done) != fmt.Sprint(order) {
		t.Fatalf("items done in the order %v; the answer lists %v\n%s", done, order, stream)
	}
}

// Fail ends a stream with response.failed carrying the error and what was
// streamed; nothing follows it.
func TestResponsesFail(t *testing.T) {
	s := NewResponsesStream(respHeader)
	var out []byte
	for _, e := range []Event{{Kind: Role}, text("content", "part")} {
		out = s.Encode(out, &e)
	}
	out = s.Fail(out, "server_error", "upstream cut")
	n := len(out)
	out = s.Encode(out, &Event{Kind: End})
	if len(out) != n {
		t.Fatal("an event after Fail was written")
	}
	sum, err := wiretest.CheckResponsesStream(out, wiretest.LoadResponsesSchema(t))
	if err != nil || sum.Terminal != "response.failed" || sum.Final.Get("error.message").Str != "upstream cut" ||
		sum.Final.Get("output.0.content.0.text").Str != "part" {
		t.Fatalf("%v %+v\n%s", err, sum, out)
	}
}

// The chunk decoder follows the chunks' tool-call indices, numbers the calls
// in header order, starts a new call at a new id on an index in use, emits
// the role once and the finish once, and ignores what is not a chunk.
func TestChunkDecoder(t *testing.T) {
	var d ChunkDecoder
	var got []string
	emit := func(e *Event) {
		switch e.Kind {
		case Role:
			got = append(got, "role")
		case Text:
			got = append(got, e.Key+":"+string(e.Text))
		case CallHeader:
			got = append(got, "call"+string(rune('0'+e.Index))+":"+e.ID+":"+e.Name)
		case CallArgs:
			got = append(got, "args"+string(rune('0'+e.Index))+":"+string(e.Text))
		case Finish:
			got = append(got, "finish:"+e.Finish)
		case Usage:
			got = append(got, "usage")
		}
	}
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"[]"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":5,"function":{"arguments":"orphan"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"h","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"x"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1}}`,
		`not json`, `[]`,
	} {
		d.Decode([]byte(c), emit)
	}
	want := "role|content:hi|call0:b:g|call1:a:f|args1:{|args0:[]|call2:c:h|args2:{}|args2:x|finish:tool_calls|usage"
	if s := join(got); s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
}

// A stream of several choices (n > 1) decodes as its choice 0: the other
// choices' text and finish are not mixed into it.
func TestChunkDecoderFollowsChoiceZero(t *testing.T) {
	var d ChunkDecoder
	var got []string
	emit := func(e *Event) {
		switch e.Kind {
		case Role:
			got = append(got, "role")
		case Text:
			got = append(got, e.Key+":"+string(e.Text))
		case Finish:
			got = append(got, "finish:"+e.Finish)
		}
	}
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}]}`,
		`{"choices":[{"index":1,"delta":{"role":"assistant","content":"b"},"finish_reason":null}]}`,
		`{"choices":[{"index":1,"delta":{},"finish_reason":"length"}]}`,
		`{"choices":[{"index":1,"delta":{"content":"c"},"finish_reason":null},{"index":0,"delta":{"content":"d"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	} {
		d.Decode([]byte(c), emit)
	}
	if s, want := join(got), "role|content:a|content:d|finish:stop"; s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
}

// Ollama and SGLang send "finish_reason":"" on every chunk before the
// last: an empty reason is no finish, or every text after the role chunk
// would be dropped.
func TestChunkDecoderEmptyFinishReason(t *testing.T) {
	var d ChunkDecoder
	var got []string
	emit := func(e *Event) {
		switch e.Kind {
		case Role:
			got = append(got, "role")
		case Text:
			got = append(got, e.Key+":"+string(e.Text))
		case Finish:
			got = append(got, "finish:"+e.Finish)
		}
	}
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":""}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":""}]}`,
		`{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":""}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	} {
		d.Decode([]byte(c), emit)
	}
	if s, want := join(got), "role|content:Hel|content:lo|finish:stop"; s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, v := range s {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(v)
	}
	return b.String()
}

// FuzzChunkDecoder: any bytes, decoded and encoded as a Responses stream,
// never panic, and the stream stays valid JSON event by event.
func FuzzChunkDecoder(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"role":"assistant","content":"hi","tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`))
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":99999999999,"id":"x"}]}}]}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a\u00e9","annotations":[{"type":"url_citation","url_citation":{"start_index":0,"end_index":2,"title":{"x":1},"url":"u\"v"}}]}}]}`))
	f.Fuzz(func(t *testing.T, chunk []byte) {
		var d ChunkDecoder
		s := NewResponsesStream(respHeader)
		var out []byte
		d.Decode(chunk, func(e *Event) { out = s.Encode(out, e) })
		out = s.Encode(out, &Event{Kind: End})
		for ev := range bytes.SplitSeq(out, []byte("\n\n")) {
			if i := bytes.Index(ev, []byte("data: ")); i >= 0 && !gjson.ValidBytes(ev[i+6:]) {
				t.Fatalf("invalid event JSON: %s", ev)
			}
		}
	})
}

// lpChunk is a chat logprobs object of the given tokens, each with one top
// alternative.
func lpChunk(tokens ...string) []byte {
	b := []byte(`{"content":[`)
	for i, tok := range tokens {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"token":%q,"logprob":-0.%d,"bytes":%s,"top_logprobs":[{"token":%q,"logprob":-1.5,"bytes":null}]}`,
			tok, i+1, byteList(tok), tok+"!")
	}
	return append(b, `],"refusal":null}`...)
}

func byteList(s string) string {
	var parts []string
	for _, c := range []byte(s) {
		parts = append(parts, fmt.Sprint(c))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Asked for (ResponsesHeader.Logprobs), the content tokens of the Text
// events' logprobs fill output_text.logprobs in the Responses form: each
// delta carries its own tokens, output_text.done, output_item.done and the
// terminal response all of them, the JSON answer the same; every event and
// the object validate against the schema (LogProb: bytes an array, null
// bytes []). Entries the schema cannot take are left out, and a refusal's
// logprobs are not shown. Not asked for, they stay [].
func TestResponsesLogprobs(t *testing.T) {
	schema := wiretest.LoadResponsesSchema(t)
	withLP := func(s string, lp []byte) Event { e := text("content", s); e.Logprobs = lp; return e }
	refusal := text("refusal", "no")
	refusal.Logprobs = []byte(`{"content":null,"refusal":[{"token":"no","logprob":-0.1,"bytes":[110,111],"top_logprobs":[]}]}`)
	events := []Event{{Kind: Role},
		withLP("Hel", lpChunk("Hel")),
		withLP("lo é", []byte(`{"content":[{"token":"lo","logprob":-0.2,"bytes":[108,111],"top_logprobs":[]},`+
			`{"token":" é","logprob":-0.3,"bytes":null,"top_logprobs":[]},{"token":7,"logprob":-1},{"token":"x"}],"refusal":null}`)),
		withLP("!", []byte(`null`)),
		refusal,
		{Kind: Finish, Finish: "stop"}, {Kind: End}}

	h := respHeader
	h.Logprobs = true
	stream, _, object := encodeBothWith(h, events)
	sum, err := wiretest.CheckResponsesStream(stream, schema)
	if err != nil {
		t.Fatalf("%v\n%s", err, stream)
	}
	if err := schema.Validate("Response", object); err != nil {
		t.Fatalf("%v\n%s", err, object)
	}
	if sum.Final.Raw != string(object) {
		t.Fatalf("stream and JSON differ:\n%s\n%s", sum.Final.Raw, object)
	}
	want := `[{"token":"Hel","logprob":-0.1,"bytes":[72,101,108],"top_logprobs":[{"token":"Hel!","logprob":-1.5,"bytes":[]}]},` +
		`{"token":"lo","logprob":-0.2,"bytes":[108,111],"top_logprobs":[]},{"token":" é","logprob":-0.3,"bytes":[],"top_logprobs":[]}]`
	o := gjson.ParseBytes(object)
	if got := o.Get("output.0.content.0.logprobs").Raw; got != want {
		t.Fatalf("output_text.logprobs\n got %s\nwant %s", got, want)
	}
	if got := o.Get("output.0.content.1.logprobs"); got.Exists() || o.Get("output.0.content.1.type").Str != "refusal" {
		t.Fatalf("refusal part %s", o.Get("output.0.content.1").Raw)
	}
	var deltas []string
	for ev := range bytes.SplitSeq(stream, []byte("\n\n")) {
		i := bytes.Index(ev, []byte("data: "))
		if i < 0 {
			continue
		}
		d := gjson.ParseBytes(ev[i+6:])
		switch d.Get("type").Str {
		case "response.output_text.delta":
			deltas = append(deltas, d.Get("logprobs.#.token").Raw)
		case "response.output_text.done":
			if d.Get("logprobs").Raw != want {
				t.Fatalf("output_text.done logprobs %s", d.Get("logprobs").Raw)
			}
		}
	}
	if got := strings.Join(deltas, " "); got != `["Hel"] ["lo"," é"] []` {
		t.Fatalf("delta tokens %s", got)
	}

	// Not asked for: [] everywhere, whatever the events carry.
	stream, final, object := encodeBoth(events)
	if _, err := wiretest.CheckResponsesStream(stream, schema); err != nil {
		t.Fatalf("%v\n%s", err, stream)
	}
	if final.Get("output.0.content.0.logprobs").Raw != `[]` || gjson.GetBytes(object, "output.0.content.0.logprobs").Raw != `[]` ||
		bytes.Contains(stream, []byte(`"logprobs":[{`)) {
		t.Fatalf("logprobs shown unasked:\n%s\n%s", stream, object)
	}
}

// The decoders give a choice's logprobs to its content text (to the
// refusal only when there is no content text), as the tool loop pairs
// them: a streamed chunk's and a whole completion's.
func TestDecodersCarryLogprobs(t *testing.T) {
	lp := `{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[]}],"refusal":null}`
	got := map[string]string{}
	note := func(e *Event) {
		if e.Kind == Text {
			got[e.Key] = string(e.Logprobs)
		}
	}
	var d ChunkDecoder
	d.Decode([]byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"refusal":"r","content":"Hi"},"logprobs":`+lp+`,"finish_reason":null}]}`), note)
	if got["content"] != lp || got["refusal"] != "" {
		t.Fatalf("chunk: %q", got)
	}
	clear(got)
	d.Decode([]byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"refusal":"r"},"logprobs":`+lp+`,"finish_reason":null}]}`), note)
	if got["refusal"] != lp {
		t.Fatalf("refusal chunk: %q", got)
	}
	clear(got)
	DecodeCompletion([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":`+lp+`,"finish_reason":"stop"}]}`), note)
	if got["content"] != lp {
		t.Fatalf("completion: %q", got)
	}
}

// CutLogprobs parts a text's tokens where the text is cut, by their bytes
// (or their text when they have none).
func TestCutLogprobs(t *testing.T) {
	lp := []byte(`{"content":[{"token":"on","logprob":-1,"bytes":[111,110],"top_logprobs":[]},{"token":"e","logprob":-2,"bytes":null,"top_logprobs":[]},` +
		`{"token":"two","logprob":-3,"bytes":[116,119,111],"top_logprobs":[]}],"refusal":null}`)
	head, rest := CutLogprobs(lp, 3)
	if gjson.GetBytes(head, "content.#.token").Raw != `["on","e"]` || gjson.GetBytes(rest, "content.#.token").Raw != `["two"]` {
		t.Fatalf("head %s rest %s", head, rest)
	}
	if head, rest := CutLogprobs([]byte(`{"content":[`), 3); head != nil || rest != nil {
		t.Fatalf("cut of invalid JSON: %s %s", head, rest)
	}
}

// A content token that comes without text (a guardrail's max_length cut
// took its text) but whose logprob cannot be shown (null) gives no
// output_text.delta: an empty delta carrying no token says nothing.
func TestResponsesNoEmptyLogprobsDelta(t *testing.T) {
	schema := wiretest.LoadResponsesSchema(t)
	withLP := func(s string, lp []byte) Event { e := text("content", s); e.Logprobs = lp; return e }
	events := []Event{{Kind: Role},
		withLP("Hi", lpChunk("Hi")),
		withLP("", []byte(`{"content":[{"token":"n","logprob":null}],"refusal":null}`)),
		withLP("", lpChunk("cut")),
		{Kind: Finish, Finish: "length"}, {Kind: End}}
	h := respHeader
	h.Logprobs = true
	stream, _, object := encodeBothWith(h, events)
	sum, err := wiretest.CheckResponsesStream(stream, schema)
	if err != nil {
		t.Fatalf("%v\n%s", err, stream)
	}
	if sum.Final.Raw != string(object) {
		t.Fatalf("stream and JSON differ:\n%s\n%s", sum.Final.Raw, object)
	}
	if got := gjson.GetBytes(object, "output.0.content.0.logprobs.#.token").Raw; got != `["Hi","cut"]` {
		t.Fatalf("output_text tokens %s", got)
	}
	if n := bytes.Count(stream, []byte(`"type":"response.output_text.delta"`)); n != 2 {
		t.Fatalf("%d output_text deltas, want 2 (Hi, and the cut token's):\n%s", n, stream)
	}
}

// The same answer streamed and in one completion builds the same
// response: a text that comes after the round's calls joins the message
// before them in a stream too, as the completion's one content holds it,
// and reasoning that goes on across the calls stays one item.
func TestResponsesStreamedAnswerEqualsCompletion(t *testing.T) {
	schema := wiretest.LoadResponsesSchema(t)
	cases := map[string]struct {
		chunks     []string
		completion string
		reasoning  string // the reasoning item's text, when there is one
		// annotations: the message's output_text annotations, when it
		// has any.
		annotations string
	}{
		"both names of the reasoning": {
			// vLLM during its rename sends each text under both names.
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"think A ","reasoning":"think A "}}]}`,
				`{"choices":[{"index":0,"delta":{"reasoning_content":"think B","reasoning":"think B"}}]}`,
				`{"choices":[{"index":0,"delta":{"content":"ans"}}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			},
			completion: `{"choices":[{"index":0,"message":{"role":"assistant","content":"ans",` +
				`"reasoning_content":"think A think B","reasoning":"think A think B"},"finish_reason":"stop"}]}`,
			reasoning: "think A think B",
		},
		"text after the calls": {
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Let me "}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"f","arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"content":"check."}}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
			completion: `{"choices":[{"index":0,"message":{"role":"assistant","content":"Let me check.",` +
				`"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
		},
		"a search model's annotations": {
			// OpenAI's search models send the annotations in a delta of
			// their own after the text; a stream may split them.
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Oslo é "}}]}`,
				`{"choices":[{"index":0,"delta":{"content":"is cold [1]."}}]}`,
				`{"choices":[{"index":0,"delta":{"annotations":[{"type":"url_citation","url_citation":{"end_index":19,"start_index":7,"title":"Weather","url":"https://example.com/w"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"annotations":[{"type":"url_citation","url_citation":{"end_index":6,"start_index":0,"title":"Oslo","url":"https://example.com/o"}}]},"finish_reason":"stop"}]}`,
			},
			completion: `{"choices":[{"index":0,"message":{"role":"assistant","content":"Oslo é is cold [1].","annotations":[` +
				`{"type":"url_citation","url_citation":{"end_index":19,"start_index":7,"title":"Weather","url":"https://example.com/w"}},` +
				`{"type":"url_citation","url_citation":{"end_index":6,"start_index":0,"title":"Oslo","url":"https://example.com/o"}}]},"finish_reason":"stop"}]}`,
			annotations: `[{"type":"url_citation","end_index":19,"start_index":7,"title":"Weather","url":"https://example.com/w"},` +
				`{"type":"url_citation","end_index":6,"start_index":0,"title":"Oslo","url":"https://example.com/o"}]`,
		},
		"reasoning across the calls": {
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"first "}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"f","arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"reasoning_content":"then"}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"g","arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			},
			completion: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"first then",` +
				`"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},` +
				`{"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s, j := NewResponsesStream(respHeader), NewResponsesJSON(respHeader)
			var stream, object []byte
			var d ChunkDecoder
			for _, ch := range c.chunks {
				d.Decode([]byte(ch), func(e *Event) { stream = s.Encode(stream, e) })
			}
			end := Event{Kind: End}
			stream = s.Encode(stream, &end)
			DecodeCompletion([]byte(c.completion), func(e *Event) { object = j.Encode(object, e) })
			if _, err := wiretest.CheckResponsesStream(stream, schema); err != nil {
				t.Fatalf("%v\n%s", err, stream)
			}
			var last []byte
			for ev := range bytes.SplitSeq(stream, []byte("\n\n")) {
				if i := bytes.Index(ev, []byte("data: ")); i >= 0 {
					last = ev[i+6:]
				}
			}
			if got := gjson.GetBytes(last, "response.output").Raw; got != gjson.GetBytes(object, "output").Raw {
				t.Fatalf("stream and completion differ:\n%s\n%s", got, gjson.GetBytes(object, "output").Raw)
			}
			if c.reasoning != "" {
				if got := gjson.GetBytes(object, `output.#(type=="reasoning").content.0.text`).String(); got != c.reasoning {
					t.Errorf("reasoning %q, want %q", got, c.reasoning)
				}
			}
			if c.annotations != "" {
				if got := gjson.GetBytes(object, `output.#(type=="message").content.0.annotations`).Raw; got != c.annotations {
					t.Errorf("annotations %s, want %s", got, c.annotations)
				}
				if err := schema.Validate("Response", object); err != nil {
					t.Fatalf("%v\n%s", err, object)
				}
			}
		})
	}
}

// A tool loop's answer: chat counts the last round's annotation offsets
// from the start of the whole content, earlier rounds' text included; in
// the Responses form that round's text is a message of its own, and they
// count from its start. What cannot be placed is left out: an annotation
// before the message, one without a url, another kind, one with nowhere to
// go (the round wrote only a refusal).
func TestResponsesAnnotations(t *testing.T) {
	schema := wiretest.LoadResponsesSchema(t)
	note := func(start, end int, url string) string {
		return fmt.Sprintf(`{"type":"url_citation","url_citation":{"start_index":%d,"end_index":%d,"title":"T","url":%q}}`, start, end, url)
	}
	extra := func(items ...string) Event {
		return Event{Kind: Extra, Raw: []byte(`"annotations":[` + strings.Join(items, ",") + `]`)}
	}
	// "Let me check. " is 14 characters (é is one).
	events := []Event{{Kind: Role}, text("content", "Let mé check. "),
		{Kind: ServerCall, Name: "search", Key: "builtin", Text: []byte(`{"q":"x"}`), Raw: []byte(`found`)},
		text("content", "It rains [1]."),
		extra(note(14, 27, "https://a.example"), note(2, 5, "https://before.example"), `{"type":"file_citation","file_id":"f"}`,
			`{"type":"url_citation","url_citation":{"start_index":14,"end_index":16,"title":"no url"}}`, note(23, 26, "https://b.example")),
		{Kind: Finish, Finish: "stop"}, {Kind: End}}
	stream, final, object := encodeBoth(events)
	if _, err := wiretest.CheckResponsesStream(stream, schema); err != nil {
		t.Fatalf("%v\n%s", err, stream)
	}
	if final.Raw != string(object) {
		t.Fatalf("stream and JSON differ:\n%s\n%s", final.Raw, object)
	}
	if err := schema.Validate("Response", object); err != nil {
		t.Fatalf("%v\n%s", err, object)
	}
	o := gjson.ParseBytes(object)
	want := `[{"type":"url_citation","end_index":13,"start_index":0,"title":"T","url":"https://a.example"},` +
		`{"type":"url_citation","end_index":12,"start_index":9,"title":"T","url":"https://b.example"}]`
	if got := o.Get("output.2.content.0.annotations").Raw; got != want {
		t.Fatalf("annotations %s\nwant %s", got, want)
	}
	if got := o.Get("output.0.content.0.annotations").Raw; got != "[]" {
		t.Fatalf("the first round's message got annotations: %s", got)
	}
	if n := strings.Count(string(stream), "event: response.output_text.annotation.added\n"); n != 2 {
		t.Fatalf("%d annotation.added events, want 2:\n%s", n, stream)
	}

	// Nowhere to put them: the round's text is a refusal, or there is none.
	for name, events := range map[string][]Event{
		"refusal": {{Kind: Role}, text("refusal", "no"), extra(note(0, 2, "https://a.example")), {Kind: Finish, Finish: "stop"}, {Kind: End}},
		"no text": {{Kind: Role}, extra(note(0, 2, "https://a.example")), {Kind: Finish, Finish: "stop"}, {Kind: End}},
	} {
		stream, _, object := encodeBoth(events)
		if _, err := wiretest.CheckResponsesStream(stream, schema); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, stream)
		}
		if strings.Contains(string(object), "a.example") || strings.Contains(string(stream), "annotation.added") {
			t.Fatalf("%s: an annotation was placed:\n%s", name, stream)
		}
	}

	// An upstream that sends thousands keeps the first maxNotes.
	many := make([]string, maxNotes+10)
	for i := range many {
		many[i] = note(0, 1, "https://m.example")
	}
	_, _, object = encodeBoth([]Event{{Kind: Role}, text("content", "x"), extra(many...), {Kind: Finish, Finish: "stop"}, {Kind: End}})
	if n := gjson.GetBytes(object, "output.0.content.0.annotations.#").Int(); n != maxNotes {
		t.Fatalf("%d annotations kept, want %d", n, maxNotes)
	}
}

// A response its client left is cancelled with what it output: its text
// so far, and no call whose arguments were still coming (cut off, it would
// be a call without its result in a follow-up's history).
func TestResponsesCancel(t *testing.T) {
	s := NewResponsesStream(respHeader)
	var out []byte
	for _, e := range []Event{{Kind: Role}, text("content", "part"), {Kind: CallHeader, Index: 0, ID: "call_a", Name: "f"},
		{Kind: CallArgs, Index: 0, Text: []byte(`{"ci`)}} {
		out = s.Encode(out, &e)
	}
	if !s.Cancel() || s.Cancel() {
		t.Fatal("Cancel reports the first cancel only")
	}
	obj := gjson.ParseBytes(s.Object(nil))
	if obj.Get("status").Str != "cancelled" || obj.Get("output.#").Int() != 1 || obj.Get("output.0.content.0.text").Str != "part" {
		t.Fatalf("cancelled object: %s", obj.Raw)
	}
	if n := len(out); len(s.Encode(out, &Event{Kind: End})) != n {
		t.Fatal("an event after Cancel was written")
	}
}
