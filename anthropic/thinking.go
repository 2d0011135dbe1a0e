package anthropic

import (
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

// Anthropic wants the signed thinking blocks of an assistant turn that
// called tools back in that turn, unmodified and where they were, while
// thinking is on. The chat form has no place for them, so the decoders
// hand them to the request's pipeline.Thinking, the tool loop keeps them
// on the assistant message it appends (pipeline.ThinkingMember), and the
// translation turns that member back into blocks (withThinking). Each
// entry notes how many tool_use blocks came before it ("calls", left out
// when none): with interleaved thinking a turn reads thinking, a call,
// thinking, a call, and Anthropic refuses the turn back in another order.

// appendThinking appends a thinking block (text and signature) that came
// after calls tool_use blocks to the JSON array arr ("" when nil).
func appendThinking(arr []byte, text, signature string, calls int) []byte {
	arr = openArray(arr)
	arr = append(arr, `{"type":"thinking","thinking":`...)
	arr = jsonstring.Append(arr, text)
	arr = append(arr, `,"signature":`...)
	arr = jsonstring.Append(arr, signature)
	return closeEntry(arr, calls)
}

// appendRedacted appends a redacted_thinking block that came after calls
// tool_use blocks to the JSON array arr.
func appendRedacted(arr []byte, data string, calls int) []byte {
	arr = openArray(arr)
	arr = append(arr, `{"type":"redacted_thinking","data":`...)
	arr = jsonstring.Append(arr, data)
	return closeEntry(arr, calls)
}

// closeEntry ends an entry that appendThinking or appendRedacted opened,
// and the array.
func closeEntry(arr []byte, calls int) []byte {
	if calls > 0 {
		arr = append(arr, `,"calls":`...)
		arr = strconv.AppendInt(arr, int64(calls), 10)
	}
	return append(arr, "}]"...)
}

// openArray readies arr for one more element: '[' when empty, else the
// closing ']' replaced by ','.
func openArray(arr []byte) []byte {
	if len(arr) == 0 {
		return append(arr, '[')
	}
	return append(arr[:len(arr)-1], ',')
}

// MessageThinking returns the signed thinking and redacted_thinking blocks
// of a Messages response body (as DecodeMessage reads it) as a JSON array
// for pipeline.Thinking, nil when it has none. A thinking block without a
// signature is left out: Anthropic would refuse it back. body is only
// read; the result is a new slice.
func MessageThinking(body []byte) []byte {
	var arr []byte
	calls := 0
	gjson.GetBytes(body, "content").ForEach(func(_, b gjson.Result) bool {
		switch b.Get("type").Str {
		case "thinking":
			if sig := b.Get("signature").Str; sig != "" {
				arr = appendThinking(arr, b.Get("thinking").Str, sig, calls)
			}
		case "redacted_thinking":
			if d := b.Get("data").Str; d != "" {
				arr = appendRedacted(arr, d, calls)
			}
		case "tool_use":
			calls++
		}
		return true
	})
	return arr
}

// withThinking puts the signed thinking of an assistant message's
// pipeline.ThinkingMember into blocks (its text, then its tool_use blocks),
// each entry before the tool_use that followed it in the answer: its
// "calls"-th, counting from 0, or after the last when the answer had no
// more; the entries of the answer's start (no "calls") come first. Entries
// that are not a signed thinking block or a redacted_thinking block with
// data are left out. blocks is returned as it was when m carries none.
func withThinking(m gjson.Result, blocks []block) []block {
	member := m.Get(pipeline.ThinkingMember)
	if !member.IsArray() {
		return blocks
	}
	type entry struct {
		b     block
		calls int64
	}
	var th []entry
	member.ForEach(func(_, e gjson.Result) bool {
		calls := max(e.Get("calls").Int(), 0)
		switch e.Get("type").Str {
		case "thinking":
			text, sig := e.Get("thinking"), e.Get("signature").Str
			if text.Type == gjson.String && sig != "" {
				th = append(th, entry{block{Type: "thinking", Thinking: &text.Str, Signature: sig}, calls})
			}
		case "redacted_thinking":
			if d := e.Get("data").Str; d != "" {
				th = append(th, entry{block{Type: "redacted_thinking", Data: d}, calls})
			}
		}
		return true
	})
	if len(th) == 0 {
		return blocks
	}
	out := make([]block, 0, len(th)+len(blocks))
	k, calls := 0, int64(0) // th[:k] are placed; calls tool_use blocks are
	place := func(upTo int64) {
		for ; k < len(th) && th[k].calls <= upTo; k++ {
			out = append(out, th[k].b)
		}
	}
	place(0)
	for _, b := range blocks {
		if b.Type == "tool_use" {
			place(calls) // the entries that came after the calls before this one
			calls++
		}
		out = append(out, b)
	}
	for ; k < len(th); k++ { // after the last call (or out of order): at the end
		out = append(out, th[k].b)
	}
	return out
}

// isThinking reports whether b is a thinking or redacted_thinking block.
func (b *block) isThinking() bool { return b.Type == "thinking" || b.Type == "redacted_thinking" }

// dropThinking removes the thinking blocks of every message: a request
// sent without thinking goes as it did before they were carried. No
// message is left empty, as thinking blocks go only on a message with a
// tool call (translator.message).
func dropThinking(msgs []message) {
	for i := range msgs {
		c := msgs[i].Content[:0]
		for _, b := range msgs[i].Content {
			if !b.isThinking() {
				c = append(c, b)
			}
		}
		msgs[i].Content = c
	}
}
