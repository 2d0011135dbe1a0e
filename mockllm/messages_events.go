package mockllm

import (
	"strconv"

	"github.com/llmgw/gateway/jsonstring"
)

// messagesChunker produces the events of one answer in Anthropic's stream
// form, following the published examples: message_start, a ping after the
// first content_block_start, a thinking block (thinking_delta, then a
// signature_delta), a text block (text_delta of TextRunes runes), a
// tool_use block per call (an empty input_json_delta first, then fragments
// of about ArgBytes bytes, cut inside JSON strings), message_delta with the
// stop reason and output tokens, message_stop. It builds them all up front:
// this mode serves tests, not load. Not safe for concurrent use.
type messagesChunker struct {
	events [][]byte
	i      int
}

// eventSource yields one SSE event at a time (ending in "\n\n"); ok is
// false after the last.
type eventSource interface {
	next(dst []byte) (out []byte, ok bool)
}

var (
	_ eventSource = (*chunker)(nil)
	_ eventSource = (*messagesChunker)(nil)
)

func (c *messagesChunker) next(dst []byte) ([]byte, bool) {
	if c.i >= len(c.events) {
		return dst, false
	}
	c.i++
	return append(dst, c.events[c.i-1]...), true
}

func newMessagesChunker(a *answer) *messagesChunker {
	c := &messagesChunker{}
	add := func(typ string, data []byte) {
		ev := make([]byte, 0, len(data)+len(typ)+16)
		ev = append(ev, "event: "...)
		ev = append(ev, typ...)
		ev = append(ev, "\ndata: "...)
		ev = append(ev, data...)
		c.events = append(c.events, append(ev, "\n\n"...))
	}
	start := append([]byte(`{"type":"message_start","message":`), appendMessageHead(nil, a)...)
	start = append(start, `"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	start = appendMessagesUsage(start, a.usage, 1)
	add("message_start", append(start, "}}"...))

	index := 0
	block := func(startJSON string, deltas []string, deltaType, key string, extra []byte) {
		i := strconv.Itoa(index)
		add("content_block_start", []byte(`{"type":"content_block_start","index":`+i+`,"content_block":`+startJSON+`}`))
		if index == 0 {
			add("ping", []byte(`{"type": "ping"}`))
		}
		for _, d := range deltas {
			b := []byte(`{"type":"content_block_delta","index":` + i + `,"delta":{"type":"` + deltaType + `","` + key + `":`)
			b = jsonstring.Append(b, d)
			add("content_block_delta", append(b, "}}"...))
		}
		if extra != nil {
			add("content_block_delta", extra)
		}
		add("content_block_stop", []byte(`{"type":"content_block_stop","index":`+i+`}`))
		index++
	}
	ch := a.chunking
	if t := a.turn.Thinking; t != "" {
		sig := []byte(`{"type":"content_block_delta","index":` + strconv.Itoa(index) + `,"delta":{"type":"signature_delta","signature":"` + signatureMock + `"}}`)
		block(`{"type":"thinking","thinking":""}`, runeChunks(t, ch.TextRunes), "thinking_delta", "thinking", sig)
	}
	if t := a.turn.Text; t != "" {
		block(`{"type":"text","text":""}`, runeChunks(t, ch.TextRunes), "text_delta", "text", nil)
	}
	for _, tc := range a.turn.ToolCalls {
		head := []byte(`{"type":"tool_use","id":`)
		head = jsonstring.Append(head, tc.ID)
		head = append(head, `,"name":`...)
		head = jsonstring.Append(head, tc.Name)
		head = append(head, `,"input":{}}`...)
		frags := []string{""}
		for pos := 0; pos < len(tc.Arguments); {
			end := cutRunes(tc.Arguments, pos, ch.ArgBytes)
			frags = append(frags, tc.Arguments[pos:end])
			pos = end
		}
		block(string(head), frags, "input_json_delta", "partial_json", nil)
	}
	if index == 0 {
		add("ping", []byte(`{"type": "ping"}`))
	}
	d := []byte(`{"type":"message_delta","delta":{"stop_reason":"` + stopReason(a.finish) + `","stop_sequence":null},"usage":{"output_tokens":`)
	d = strconv.AppendInt(d, int64(a.usage.Completion), 10)
	add("message_delta", append(d, "}}"...))
	add("message_stop", []byte(`{"type":"message_stop"}`))
	return c
}

// runeChunks cuts s into pieces of n runes.
func runeChunks(s string, n int) []string {
	var out []string
	r := []rune(s)
	for i := 0; i < len(r); i += n {
		out = append(out, string(r[i:min(i+n, len(r))]))
	}
	return out
}

// stopReason maps a chat finish_reason to Anthropic's stop_reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls":
		return "tool_use"
	case "content_filter":
		return "refusal"
	default:
		return "end_turn"
	}
}

// appendMessageHead appends `{"id":..,"type":"message","role":"assistant","model":..,`.
func appendMessageHead(dst []byte, a *answer) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonstring.Append(dst, a.id)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = jsonstring.Append(dst, a.model)
	return append(dst, ',')
}

// appendMessagesUsage appends Anthropic's usage: input tokens exclude the
// cached (read) and cache-write tokens, which have their own counts.
func appendMessagesUsage(dst []byte, u Usage, output int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(max(0, u.Prompt-u.Cached-u.CacheWrite)), 10)
	dst = append(dst, `,"cache_creation_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CacheWrite), 10)
	dst = append(dst, `,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Cached), 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(output), 10)
	return append(dst, '}')
}

// appendMessage appends a whole Messages response.
func appendMessage(dst []byte, a *answer) []byte {
	dst = appendMessageHead(dst, a)
	dst = append(dst, `"content":[`...)
	n := 0
	sep := func() {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
	}
	if t := a.turn.Thinking; t != "" {
		sep()
		dst = append(dst, `{"type":"thinking","thinking":`...)
		dst = jsonstring.Append(dst, t)
		dst = append(dst, `,"signature":"`+signatureMock+`"}`...)
	}
	if t := a.turn.Text; t != "" {
		sep()
		dst = append(dst, `{"type":"text","text":`...)
		dst = jsonstring.Append(dst, t)
		dst = append(dst, '}')
	}
	for _, tc := range a.turn.ToolCalls {
		sep()
		dst = append(dst, `{"type":"tool_use","id":`...)
		dst = jsonstring.Append(dst, tc.ID)
		dst = append(dst, `,"name":`...)
		dst = jsonstring.Append(dst, tc.Name)
		dst = append(dst, `,"input":`...)
		if tc.Arguments == "" {
			dst = append(dst, "{}"...)
		} else {
			dst = append(dst, tc.Arguments...)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"stop_reason":"`...)
	dst = append(dst, stopReason(a.finish)...)
	dst = append(dst, `","stop_sequence":null,"usage":`...)
	dst = appendMessagesUsage(dst, a.usage, a.usage.Completion)
	return append(dst, '}')
}
