package anthropic

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wire"
)

// streamOf returns the stream Anthropic sends for the message body: each
// block opened empty, its text, thinking or input as one delta, then
// message_delta and message_stop. redacted_thinking and other blocks open
// whole, as they do upstream.
func streamOf(t *testing.T, body string) [][]byte {
	t.Helper()
	msg := gjson.Parse(body)
	head := `{"type":"message","id":` + msg.Get("id").Raw + `,"role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`
	evs := []string{`{"type":"message_start","message":` + head + `}`}
	msg.Get("content").ForEach(func(k, b gjson.Result) bool {
		i := strconv.Itoa(int(k.Int()))
		var start, delta string
		switch b.Get("type").Str {
		case "text":
			start, delta = `{"type":"text","text":""}`, `{"type":"text_delta","text":`+b.Get("text").Raw+`}`
		case "thinking":
			start = `{"type":"thinking","thinking":""}`
			delta = `{"type":"thinking_delta","thinking":` + b.Get("thinking").Raw + `}`
		case "tool_use":
			start = `{"type":"tool_use","id":` + b.Get("id").Raw + `,"name":` + b.Get("name").Raw + `,"input":{}}`
			in, _ := json.Marshal(b.Get("input").Raw)
			delta = `{"type":"input_json_delta","partial_json":` + string(in) + `}`
		default:
			start = b.Raw
		}
		evs = append(evs, `{"type":"content_block_start","index":`+i+`,"content_block":`+start+`}`)
		if delta != "" {
			evs = append(evs, `{"type":"content_block_delta","index":`+i+`,"delta":`+delta+`}`)
		}
		evs = append(evs, `{"type":"content_block_stop","index":`+i+`}`)
		return true
	})
	evs = append(evs, `{"type":"message_delta","delta":{"stop_reason":`+msg.Get("stop_reason").Raw+`},"usage":{"output_tokens":5}}`,
		`{"type":"message_stop"}`)
	out := make([][]byte, len(evs))
	for i, e := range evs {
		out[i] = []byte(e)
	}
	return out
}

// TestDecodeMessageEqualsStream: the JSON answer of a message is what an
// SDK accumulates from the stream of the same message: content,
// reasoning_content, tool calls and finish_reason.
func TestDecodeMessageEqualsStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content string // content: the message's blocks
		want          string // the message's reasoning_content; "" = none
	}{
		{name: "thinking then text", want: "Let me think.", content: `{"type":"thinking","thinking":"Let me think.","signature":"c2ln"},` +
			`{"type":"text","text":"It is 4."}`},
		{name: "interleaved thinking and a call", want: "First. Then ünïcode 🌍.", content: `{"type":"thinking","thinking":"First.","signature":"a"},` +
			`{"type":"tool_use","id":"toolu_1","name":"f","input":{"x":1}},{"type":"thinking","thinking":" Then ünïcode 🌍.","signature":"b"},` +
			`{"type":"text","text":"Done."}`},
		{name: "redacted thinking is not shown", want: "", content: `{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"},` +
			`{"type":"text","text":"Hi."}`},
		{name: "empty thinking", want: "", content: `{"type":"thinking","thinking":"","signature":"c2ln"},{"type":"text","text":"Hi."}`},
		{name: "no thinking", want: "", content: `{"type":"text","text":"Hi."}`},
		// An empty text block is no content both ways (the JSON answer
		// said "", the stream, sending no delta, null).
		{name: "an empty text block", want: "", content: `{"type":"text","text":""}`},
		// A model's input that is not an object goes as it is both ways
		// (the JSON answer made it {}).
		{name: "an input that is not an object", want: "", content: `{"type":"tool_use","id":"toolu_1","name":"f","input":[1,2]},` +
			`{"type":"tool_use","id":"toolu_2","name":"g","input":"x"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[` + tc.content +
				`],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":5}}`
			h := wire.Header{Created: 1, Model: "claude"}
			js, err := DecodeMessage("a", []byte(body), h)
			if err != nil {
				t.Fatal(err)
			}
			d := NewStreamDecoder("a", h)
			var raw []byte
			var streamed string
			sawContent := false
			for _, ev := range streamOf(t, body) {
				if err := d.Feed(ev); err != nil {
					t.Fatalf("%s: %v", ev, err)
				}
				for c, ok := d.Pop(); ok; c, ok = d.Pop() {
					raw = sse.AppendData(raw, c)
					streamed += gjson.GetBytes(c, "choices.0.delta.reasoning_content").Str
					sawContent = sawContent || gjson.GetBytes(c, "choices.0.delta.content").Type == gjson.String
				}
			}
			if !d.Done() {
				t.Fatal("stream not done")
			}
			acc := accumulate(t, sse.AppendData(raw, []byte("[DONE]")))
			msg := gjson.GetBytes(js, "choices.0.message")
			if r := msg.Get("reasoning_content"); r.Str != tc.want || r.Exists() != (tc.want != "") || streamed != tc.want {
				t.Errorf("reasoning_content: json %s, stream %q, want %q", r.Raw, streamed, tc.want)
			}
			if c := msg.Get("content"); (c.Type == gjson.Null) == sawContent {
				t.Errorf("json content %s, the stream sent content: %v", c.Raw, sawContent)
			}
			sm := acc.Choices[0].Message
			if msg.Get("content").Str != sm.Content || gjson.GetBytes(js, "choices.0.finish_reason").Str != acc.Choices[0].FinishReason {
				t.Errorf("json %s, stream content %q finish %q", js, sm.Content, acc.Choices[0].FinishReason)
			}
			calls := msg.Get("tool_calls").Array()
			if len(calls) != len(sm.ToolCalls) {
				t.Fatalf("json calls %s, stream %+v", msg.Get("tool_calls").Raw, sm.ToolCalls)
			}
			for i, c := range calls {
				if c.Get("id").Str != sm.ToolCalls[i].ID || c.Get("function.arguments").Str != sm.ToolCalls[i].Function.Arguments {
					t.Errorf("call %d: json %s, stream %+v", i, c.Raw, sm.ToolCalls[i])
				}
			}
		})
	}
}

// A tool_use block's start carries its input whole unless it is empty:
// the {} (or "", or []) a streamed input starts with is followed by its
// fragments, and counting it would prefix them ("{}{...}").
func TestHasInput(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		`{}`: false, `{ }`: false, `""`: false, `[]`: false, `null`: false,
		`{"x":1}`: true, `[1]`: true, `"x"`: true, `7`: true,
	} {
		if got := hasInput(gjson.Parse(in)); got != want {
			t.Errorf("%s: %v, want %v", in, got, want)
		}
	}
	if hasInput(gjson.Result{}) {
		t.Error("a missing input counted")
	}
}

// A usage count that is not one (1e400, negative) is not taken: the total
// never overflows, and a client never sees a count past MaxTokenCount.
func TestUsageCountsAreCounts(t *testing.T) {
	t.Parallel()
	out, err := DecodeMessage("anthropic", []byte(`{"type":"message","id":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn",`+
		`"usage":{"input_tokens":1e400,"output_tokens":3,"cache_read_input_tokens":-4}}`), wire.Header{Created: 1, Model: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	u := gjson.GetBytes(out, "usage")
	if u.Get("prompt_tokens").Int() != 0 || u.Get("completion_tokens").Int() != 3 || u.Get("total_tokens").Int() != 3 ||
		u.Get("prompt_tokens_details.cached_tokens").Int() != 0 {
		t.Fatalf("usage %s", u.Raw)
	}
}

// Each stop_reason maps to the finish_reason a client acts on: a turn
// Anthropic paused (pause_turn) is not a whole answer.
func TestFinishReason(t *testing.T) {
	t.Parallel()
	for stop, want := range map[string]string{
		"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "model_context_window_exceeded": "length",
		"pause_turn": "length", "tool_use": "tool_calls", "refusal": "content_filter",
	} {
		if got := finishReason(stop); got != want {
			t.Errorf("%s: %s, want %s", stop, got, want)
		}
	}
}
