package anthropic

import (
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

// Anthropic wants the signed thinking blocks of an assistant turn that
// called tools back at the start of that turn while thinking is on. The
// chat form has no place for them, so the decoders hand them to the
// request's pipeline.Thinking, the tool loop keeps them on the assistant
// message it appends (pipeline.ThinkingMember), and the translation turns
// that member back into blocks (thinkingBlocks).

// appendThinking appends a thinking block (text and signature) to the JSON
// array arr ("" when nil).
func appendThinking(arr []byte, text, signature string) []byte {
	arr = openArray(arr)
	arr = append(arr, `{"type":"thinking","thinking":`...)
	arr = jsonstring.Append(arr, text)
	arr = append(arr, `,"signature":`...)
	arr = jsonstring.Append(arr, signature)
	return append(arr, "}]"...)
}

// appendRedacted appends a redacted_thinking block to the JSON array arr.
func appendRedacted(arr []byte, data string) []byte {
	arr = openArray(arr)
	arr = append(arr, `{"type":"redacted_thinking","data":`...)
	arr = jsonstring.Append(arr, data)
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
	gjson.GetBytes(body, "content").ForEach(func(_, b gjson.Result) bool {
		switch b.Get("type").Str {
		case "thinking":
			if sig := b.Get("signature").Str; sig != "" {
				arr = appendThinking(arr, b.Get("thinking").Str, sig)
			}
		case "redacted_thinking":
			if d := b.Get("data").Str; d != "" {
				arr = appendRedacted(arr, d)
			}
		}
		return true
	})
	return arr
}

// thinkingBlocks reads an assistant message's pipeline.ThinkingMember back
// into blocks, in order; entries that are not a signed thinking block or a
// redacted_thinking block with data are left out.
func thinkingBlocks(m gjson.Result) []block {
	var out []block
	m.Get(pipeline.ThinkingMember).ForEach(func(_, b gjson.Result) bool {
		switch b.Get("type").Str {
		case "thinking":
			text, sig := b.Get("thinking"), b.Get("signature").Str
			if text.Type == gjson.String && sig != "" {
				out = append(out, block{Type: "thinking", Thinking: &text.Str, Signature: sig})
			}
		case "redacted_thinking":
			if d := b.Get("data").Str; d != "" {
				out = append(out, block{Type: "redacted_thinking", Data: d})
			}
		}
		return true
	})
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
