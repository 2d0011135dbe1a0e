package proxy

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// answerKeys counts the keys of a JSON answer that its checks look for
// (callsFinish, addFinish, addNulls), found in one pass (keysOfAnswer), so
// that the usual answer, which needs none of their edits, is read once and
// never parsed. Only keys count: a name in quotes after '{' or ',' and
// before ':' (a string's own quotes are escaped, and a value such as
// "content":"refusal" has ':' before it), so a count is never too high,
// which would skip an edit the answer needs.
type answerKeys struct {
	message, finish, calls, logprobs, content, refusal int
	logprobsObject                                     bool // a "logprobs" whose value is an object (with keys "content" and "refusal" of its own)
}

// keysOfAnswer counts answerKeys in b, hopping from quote to quote.
func keysOfAnswer(b []byte) (k answerKeys) {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return k
		}
		i += j + 1
		if i >= len(b) {
			return k
		}
		if !opensKey(b, i-1) {
			continue
		}
		switch b[i] {
		case 'm':
			if named(b, i, "message") {
				k.message++
			}
		case 'f':
			if named(b, i, "finish_reason") {
				k.finish++
			}
		case 't':
			if named(b, i, "tool_calls") {
				k.calls++
			}
		case 'l':
			if named(b, i, "logprobs") {
				k.logprobs++
				if v := skipSpace(b, i+len("logprobs")+1); v < len(b) && b[v] == ':' {
					if v = skipSpace(b, v+1); v < len(b) && b[v] == '{' {
						k.logprobsObject = true
					}
				}
			}
		case 'c':
			if named(b, i, "content") {
				k.content++
			}
		case 'r':
			if named(b, i, "refusal") {
				k.refusal++
			}
		}
	}
}

// named reports whether b holds, at i, name, its closing quote and then
// a colon: the rest of a key whose opening quote is at i-1 (opensKey).
func named(b []byte, i int, name string) bool {
	if len(b)-i <= len(name) || string(b[i:i+len(name)]) != name || b[i+len(name)] != '"' {
		return false
	}
	c := skipSpace(b, i+len(name)+1)
	return c < len(b) && b[c] == ':'
}

// opensKey reports whether the quote at q may open a key: what comes
// before it, past any whitespace, is '{' or ','.
func opensKey(b []byte, q int) bool {
	for q--; q >= 0; q-- {
		switch b[q] {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', ',':
			return true
		}
		return false
	}
	return false
}

// addNulls gives each choice of a JSON answer that has a message the
// members OpenAI's answer always has, null when there is none: the
// choice's logprobs, its message's content and refusal. Some servers (vLLM,
// Ollama, llama.cpp) leave them out, a message of tool calls its content
// too; the chat schema requires them, and a typed client may too. body
// itself when nothing is missing (nearly always: one pass of keysOfAnswer,
// no parse); an answer with a logprobs object, whose own "content" and
// "refusal" the counts cannot tell apart, is parsed.
func addNulls(body []byte) []byte { return addNullsKeys(body, keysOfAnswer(body)) }

// addNullsKeys is addNulls with body's keys counted (or, after edits that
// add none of the keys it counts, those of the body before them).
func addNullsKeys(body []byte, k answerKeys) []byte {
	n := k.message
	if n == 0 || (k.logprobs >= n && k.content >= n && k.refusal >= n && !k.logprobsObject) {
		return body
	}
	var edits []string
	i := 0
	gjson.GetBytes(body, "choices").ForEach(func(_, c gjson.Result) bool {
		at := "choices." + strconv.Itoa(i)
		i++
		m := c.Get("message")
		if !m.IsObject() {
			return true
		}
		if !c.Get("logprobs").Exists() {
			edits = append(edits, at+".logprobs")
		}
		for _, key := range [...]string{"content", "refusal"} {
			if !m.Get(key).Exists() {
				edits = append(edits, at+".message."+key)
			}
		}
		return true
	})
	for _, p := range edits {
		if out, err := sjson.SetRawBytes(body, p, nullJSON); err == nil {
			body = out
		}
	}
	return body
}

var nullJSON = []byte("null")
