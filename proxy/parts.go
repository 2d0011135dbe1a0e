package proxy

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/jsonstring"
)

// Some upstreams (Mistral's reasoning models) send an answer's content as a
// list of parts, [{"type":"thinking","thinking":[{"type":"text","text":…}]},
// {"type":"text","text":…}], in a stream's deltas and in a JSON answer's
// message. The chat form's content is a string: an SDK took the list's JSON
// for the text, and the tool loop, which reads strings only, lost it. Such
// content becomes the string of its text parts, and its thinking parts the
// choice's reasoning_content, as the gateway's other reasoning upstreams
// give it.

var contentName = []byte(`"content"`)

// hasPartsContent reports whether body may hold a "content" member whose
// value is a list; false means it holds none (but for a key spelt with
// escapes, which no encoder writes). A byte scan for '[', which is rare in
// a chunk (its choices, a tool call), not for the key: quotes are
// everywhere in JSON, and nearly every chunk has a string content.
func hasPartsContent(body []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '[')
		if j < 0 {
			return false
		}
		k := i + j
		i = k + 1
		for k > 0 && isSpace(body[k-1]) {
			k--
		}
		if k == 0 || body[k-1] != ':' {
			continue
		}
		k--
		for k > 0 && isSpace(body[k-1]) {
			k--
		}
		if bytes.HasSuffix(body[:k], contentName) {
			return true
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// flattenParts returns body, a chunk (key "delta") or a JSON answer (key
// "message"), with each choice's list content made a string (its text
// parts) and its thinking parts moved to reasoning_content (unless the
// choice has one already); body itself when no choice has list content or
// body is not what it should be.
func flattenParts(body []byte, key string) []byte {
	if !hasPartsContent(body) {
		return body
	}
	var edits []jsonedit.Edit
	ok := true
	jsonedit.Root(body).Get("choices").ForEach(func(_, ch gjson.Result) bool {
		msg := ch.Get(key)
		c := msg.Get("content")
		if !c.IsArray() {
			return true
		}
		var text, thinking []byte
		c.ForEach(func(_, p gjson.Result) bool {
			switch p.Get("type").Str {
			case "text":
				text = append(text, p.Get("text").Str...)
			case "thinking":
				t := p.Get("thinking")
				if t.Type == gjson.String {
					thinking = append(thinking, t.Str...)
				}
				t.ForEach(func(_, q gjson.Result) bool {
					if q.Get("type").Str == "text" {
						thinking = append(thinking, q.Get("text").Str...)
					}
					return true
				})
			}
			return true
		})
		// No text part (a list of thinking alone): no content, as a
		// stream that sent none shows it, not "" (which the JSON answer
		// and a relayed chunk would show and the tool loop's stream not).
		repl := []byte("null")
		if len(text) > 0 {
			repl = jsonstring.Append(nil, string(text))
		}
		if len(thinking) > 0 && !msg.Get("reasoning_content").Exists() {
			repl = append(repl, `,"reasoning_content":`...)
			repl = jsonstring.Append(repl, string(thinking))
		}
		edits, ok = jsonedit.ReplaceValue(edits, body, c, repl)
		return ok
	})
	if !ok || len(edits) == 0 {
		return body
	}
	out, _ := jsonedit.Apply(body, edits)
	return out
}
