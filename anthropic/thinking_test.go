package anthropic

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// thinkingEvents is a stream with a signed thinking block, a redacted one,
// an unsigned one, text and a tool call; thinkingMessage is the same
// message whole.
var thinkingEvents = []string{
	`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Köln \"first\""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":", then 🌍"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Cg=="}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"RVhU"}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"content_block_start","index":2,"content_block":{"type":"thinking","thinking":"unsigned"}}`,
	`{"type":"content_block_stop","index":2}`,
	`{"type":"content_block_start","index":3,"content_block":{"type":"text","text":"Let me look."}}`,
	`{"type":"content_block_stop","index":3}`,
	`{"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`,
	`{"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`,
	`{"type":"content_block_stop","index":4}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`,
	`{"type":"message_stop"}`,
}

const thinkingMessage = `{"id":"msg_1","type":"message","role":"assistant","content":[` +
	`{"type":"thinking","thinking":"Köln \"first\", then 🌍","signature":"EqQBCg=="},` +
	`{"type":"redacted_thinking","data":"RVhU"},{"type":"thinking","thinking":"unsigned"},` +
	`{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}],` +
	`"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":9}}`

const wantBlocks = `[{"type":"thinking","thinking":"Köln \"first\", then 🌍","signature":"EqQBCg=="},{"type":"redacted_thinking","data":"RVhU"}]`

// decodeAll feeds thinkingEvents and returns the chunks, back to back.
func decodeAll(t *testing.T, d *StreamDecoder) []byte {
	t.Helper()
	var out []byte
	for _, ev := range thinkingEvents {
		if err := d.Feed([]byte(ev)); err != nil {
			t.Fatal(err)
		}
		for c, ok := d.Pop(); ok; c, ok = d.Pop() {
			out = append(append(out, c...), '\n')
		}
	}
	return out
}

// TestStreamDecoderNotesThinking: the signed thinking blocks go to the
// request's pipeline.Thinking, as DecodeMessage's body gives them, and the
// chunks are the same bytes whether they are noted or not.
func TestStreamDecoderNotesThinking(t *testing.T) {
	t.Parallel()
	h := wire.Header{Created: 1, Model: "claude"}
	plain := decodeAll(t, NewStreamDecoder("a", h))
	var th pipeline.Thinking
	d := NewStreamDecoder("a", h)
	d.NoteThinking(&th)
	noted := decodeAll(t, d)
	if !bytes.Equal(plain, noted) {
		t.Errorf("chunks differ:\n%s\n%s", plain, noted)
	}
	if bytes.Contains(noted, []byte("EqQB")) || bytes.Contains(noted, []byte("RVhU")) {
		t.Errorf("a signature reached the chunks: %s", noted)
	}
	if string(th.Blocks) != wantBlocks {
		t.Errorf("stream noted %s", th.Blocks)
	}
	if got := MessageThinking([]byte(thinkingMessage)); string(got) != wantBlocks {
		t.Errorf("message gave %s", got)
	}
	if got := MessageThinking([]byte(`{"content":[{"type":"text","text":"x"}]}`)); got != nil {
		t.Errorf("no thinking gave %s", got)
	}
}

// TestTranslateRequestCarriesThinking: the tool loop's assistant turn
// carries its signed blocks in the gateway's member; they start that
// turn's content and keep thinking on. Without thinking, or when the last
// turn that called a tool lacks them, no thinking block is sent.
func TestTranslateRequestCarriesThinking(t *testing.T) {
	t.Parallel()
	const tool = `"tools":[{"type":"function","function":{"name":"f"}}]`
	call := `"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]`
	turn := func(member string) string {
		return `{"role":"user","content":"x"},{"role":"assistant","content":"Looking.",` + call + member + `},` +
			`{"role":"tool","tool_call_id":"call_1","content":"42"}`
	}
	signed := `,"x_gateway_thinking":` + wantBlocks
	tests := []struct {
		name, body string
		thinking   bool
		content    string // the types of the assistant turn's blocks
	}{
		{"signed turn keeps thinking", `{"reasoning_effort":"low",` + tool + `,"messages":[` + turn(signed) + `]}`,
			true, "thinking redacted_thinking text tool_use"},
		{"empty thinking text", `{"reasoning_effort":"low",` + tool + `,"messages":[` +
			turn(`,"x_gateway_thinking":[{"type":"thinking","thinking":"","signature":"s"}]`) + `]}`, true, "thinking text tool_use"},
		{"client turn without blocks", `{"reasoning_effort":"low",` + tool + `,"messages":[` + turn("") + `]}`,
			false, "text tool_use"},
		{"unusable entries", `{"reasoning_effort":"low",` + tool + `,"messages":[` +
			turn(`,"x_gateway_thinking":[{"type":"thinking","thinking":"no signature"},{"type":"other"},7]`) + `]}`, false, "text tool_use"},
		{"not a list", `{"reasoning_effort":"low",` + tool + `,"messages":[` + turn(`,"x_gateway_thinking":{"a":1}`) + `]}`,
			false, "text tool_use"},
		{"forced call drops blocks", `{"reasoning_effort":"low",` + tool + `,"tool_choice":"required","messages":[` + turn(signed) + `]}`,
			false, "text tool_use"},
		{"no thinking asked", `{` + tool + `,"messages":[` + turn(signed) + `]}`, false, "text tool_use"},
		{"merged into the turn before", `{"reasoning_effort":"low",` + tool + `,"messages":[{"role":"user","content":"x"},` +
			`{"role":"assistant","content":"y"},{"role":"assistant","content":null,` + call + signed + `},` +
			`{"role":"tool","tool_call_id":"call_1","content":"42"}]}`, false, "text tool_use"},
		{"turn without a call", `{"reasoning_effort":"low",` + tool + `,"messages":[{"role":"user","content":"x"},` +
			`{"role":"assistant","content":"y"` + signed + `},{"role":"user","content":"z"}]}`, true, "text"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := TranslateRequest([]byte(tc.body), RequestOptions{Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			sdkRoundTrip(t, out)
			var types []string
			gjson.GetBytes(out, "messages.1.content.#.type").ForEach(func(_, v gjson.Result) bool {
				types = append(types, v.Str)
				return true
			})
			if got := strings.Join(types, " "); got != tc.content || gjson.GetBytes(out, "thinking").Exists() != tc.thinking ||
				bytes.Contains(out, []byte(pipeline.ThinkingMember)) {
				t.Errorf("assistant blocks %q, %s", got, out)
			}
			if tc.thinking && strings.HasPrefix(tc.content, "thinking redacted") {
				c := gjson.GetBytes(out, "messages.1.content")
				if c.Get("0").Raw != `{"type":"thinking","thinking":"Köln \"first\", then 🌍","signature":"EqQBCg=="}` ||
					c.Get("1").Raw != `{"type":"redacted_thinking","data":"RVhU"}` {
					t.Errorf("blocks %s", c.Raw)
				}
			}
		})
	}
}

// TestInterleavedThinkingKeepsItsPlace: with interleaved thinking a turn
// reads thinking, a call, thinking, a call; Anthropic refuses that turn
// back in another order, so each block notes the calls before it (streamed
// and whole alike) and the translation puts it back there.
func TestInterleavedThinkingKeepsItsPlace(t *testing.T) {
	t.Parallel()
	events := []string{
		`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"a","signature":"S1"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Looking."}}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}}`,
		`{"type":"content_block_stop","index":2}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"thinking","thinking":"b","signature":"S2"}}`,
		`{"type":"content_block_stop","index":3}`,
		`{"type":"content_block_start","index":4,"content_block":{"type":"redacted_thinking","data":"R"}}`,
		`{"type":"content_block_stop","index":4}`,
		`{"type":"content_block_start","index":5,"content_block":{"type":"tool_use","id":"toolu_2","name":"f","input":{"a":2}}}`,
		`{"type":"content_block_stop","index":5}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`,
		`{"type":"message_stop"}`,
	}
	const whole = `{"id":"msg_1","type":"message","role":"assistant","content":[` +
		`{"type":"thinking","thinking":"a","signature":"S1"},{"type":"text","text":"Looking."},` +
		`{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}},{"type":"thinking","thinking":"b","signature":"S2"},` +
		`{"type":"redacted_thinking","data":"R"},{"type":"tool_use","id":"toolu_2","name":"f","input":{"a":2}}],` +
		`"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":9}}`
	const want = `[{"type":"thinking","thinking":"a","signature":"S1"},` +
		`{"type":"thinking","thinking":"b","signature":"S2","calls":1},{"type":"redacted_thinking","data":"R","calls":1}]`
	var th pipeline.Thinking
	d := NewStreamDecoder("a", wire.Header{Created: 1, Model: "claude"})
	d.NoteThinking(&th)
	for _, ev := range events {
		if err := d.Feed([]byte(ev)); err != nil {
			t.Fatal(err)
		}
		for _, ok := d.Pop(); ok; _, ok = d.Pop() {
		}
	}
	if string(th.Blocks) != want {
		t.Errorf("stream noted %s", th.Blocks)
	}
	if got := MessageThinking([]byte(whole)); string(got) != want {
		t.Errorf("message gave %s", got)
	}

	calls := `"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},` +
		`{"id":"toolu_2","type":"function","function":{"name":"f","arguments":"{\"a\":2}"}}]`
	for _, tc := range []struct{ member, content string }{
		{want, "thinking:a text tool_use:toolu_1 thinking:b redacted_thinking tool_use:toolu_2"},
		// A block after the last call stays after it; one noting more
		// calls than the turn has goes last too.
		{`[{"type":"thinking","thinking":"a","signature":"S1"},{"type":"thinking","thinking":"z","signature":"S9","calls":2},` +
			`{"type":"thinking","thinking":"y","signature":"S8","calls":7}]`,
			"thinking:a text tool_use:toolu_1 tool_use:toolu_2 thinking:z thinking:y"},
	} {
		body := `{"reasoning_effort":"low","tools":[{"type":"function","function":{"name":"f"}}],"messages":[` +
			`{"role":"user","content":"x"},{"role":"assistant","content":"Looking.",` + calls + `,"x_gateway_thinking":` + tc.member + `},` +
			`{"role":"tool","tool_call_id":"toolu_1","content":"1"},{"role":"tool","tool_call_id":"toolu_2","content":"2"}]}`
		out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		sdkRoundTrip(t, out)
		var got []string
		gjson.GetBytes(out, "messages.1.content").ForEach(func(_, b gjson.Result) bool {
			s := b.Get("type").Str
			if v := b.Get("thinking").Str + b.Get("id").Str; v != "" {
				s += ":" + v
			}
			got = append(got, s)
			return true
		})
		if strings.Join(got, " ") != tc.content || !gjson.GetBytes(out, "thinking").Exists() || bytes.Contains(out, []byte(`"calls"`)) {
			t.Errorf("assistant blocks %q, %s", strings.Join(got, " "), out)
		}
	}
}

// TestStreamDecoderBoundsThinking: the signed reasoning kept for the next
// round (a thinking block's text and signature, redacted blocks) stops at
// the sink's Max with ErrResponseTooLarge, however it grows: an upstream
// streaming endless thinking grew the gateway's memory without limit in
// the tool loop (a probe: 300 MB streamed, 1.5 GB kept), where a relayed
// stream keeps none of it.
func TestStreamDecoderBoundsThinking(t *testing.T) {
	t.Parallel()
	start := `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}`
	chunk := strings.Repeat("x", 1000)
	for name, events := range map[string]func(i int) string{
		"thinking text": func(i int) string {
			if i == 0 {
				return `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`
			}
			return `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"` + chunk + `"}}`
		},
		"signature": func(i int) string {
			if i == 0 {
				return `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`
			}
			return `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"` + chunk + `"}}`
		},
		// 20 KB of text, under the bound, that its block's escaping at its
		// end takes over it (a review).
		"escaped at its end": func(i int) string {
			switch {
			case i == 0:
				return `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`
			case i <= 20:
				return `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"` + strings.Repeat(`\u0001`, 1000) + `"}}`
			case i == 21:
				return `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}`
			case i == 22:
				return `{"type":"content_block_stop","index":0}`
			}
			return `{"type":"ping"}`
		},
		"redacted blocks": func(i int) string {
			return `{"type":"content_block_start","index":` + strconv.Itoa(i) + `,"content_block":{"type":"redacted_thinking","data":"` + chunk + `"}}`
		},
	} {
		th := pipeline.Thinking{Max: 64 << 10}
		d := NewStreamDecoder("a", wire.Header{Model: "claude"})
		d.NoteThinking(&th)
		if err := d.Feed([]byte(start)); err != nil {
			t.Fatal(err)
		}
		var err error
		i := 0
		for ; i < 1000 && err == nil; i++ {
			err = d.Feed([]byte(events(i)))
			for _, ok := d.Pop(); ok; _, ok = d.Pop() {
			}
		}
		var ue *pipeline.UpstreamError
		if !errors.As(err, &ue) || !errors.Is(err, pipeline.ErrResponseTooLarge) || i > 70 {
			t.Errorf("%s: %v after %d events", name, err, i)
		}
	}
}
