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
// "content":"refusal" has ':' before it). The pass does not know how deep
// a key is, so a key inside another object would count as the choice's or
// the message's and skip an edit the answer needs: an answer with an
// object where the usual answer has a string or null (logprobs, a content
// of parts, which hold "content" and "refusal" keys of their own; call
// arguments as an object, whose keys are anyone's) is nested, and parsed.
type answerKeys struct {
	message, finish, calls, logprobs, content, refusal int
	nested                                             bool
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
		var n *int
		var v int
		switch b[i] {
		case 'm':
			n, v = &k.message, valueOf(b, i, "message")
		case 'f':
			n, v = &k.finish, valueOf(b, i, "finish_reason")
		case 't':
			n, v = &k.calls, valueOf(b, i, "tool_calls")
		case 'l':
			n, v = &k.logprobs, valueOf(b, i, "logprobs")
		case 'c':
			n, v = &k.content, valueOf(b, i, "content")
		case 'r':
			n, v = &k.refusal, valueOf(b, i, "refusal")
		case 'a':
			if v = valueOf(b, i, "arguments"); v >= 0 && (b[v] == '{' || b[v] == '[') {
				k.nested = true
			}
			continue
		default:
			continue
		}
		if v < 0 {
			continue
		}
		*n++
		if (b[v] == '{' || b[v] == '[') && n != &k.message && n != &k.calls {
			k.nested = true
		}
	}
}

// valueOf returns where the value of a key whose opening quote is at i-1
// (opensKey) begins, when b holds at i name, its closing quote and a
// colon; else -1.
func valueOf(b []byte, i int, name string) int {
	if len(b)-i <= len(name) || string(b[i:i+len(name)]) != name || b[i+len(name)] != '"' {
		return -1
	}
	c := skipSpace(b, i+len(name)+1)
	if c >= len(b) || b[c] != ':' {
		return -1
	}
	if c = skipSpace(b, c+1); c >= len(b) {
		return -1
	}
	return c
}

// opensKey reports whether the quote at q may open a key: what comes
// before it, past any whitespace, is '{' or ',' (inside a string a quote
// is escaped).
func opensKey(b []byte, q int) bool {
	for q > 0 && isSpace(b[q-1]) {
		q--
	}
	return q > 0 && (b[q-1] == '{' || b[q-1] == ',')
}

// addNulls gives each choice of a JSON answer that has a message the
// members OpenAI's answer always has, null when there is none: the
// choice's logprobs, its message's content and refusal. Some servers (vLLM,
// Ollama, llama.cpp) leave them out, a message of tool calls its content
// too; the chat schema requires them, and a typed client may too. body
// itself when nothing is missing (nearly always: one pass of keysOfAnswer,
// no parse); a nested answer (answerKeys) is parsed.
func addNulls(body []byte) []byte { return addNullsKeys(body, keysOfAnswer(body)) }

// addNullsKeys is addNulls with body's keys counted (or, after edits that
// add none of the keys it counts, those of the body before them).
func addNullsKeys(body []byte, k answerKeys) []byte {
	n := k.message
	if n == 0 || (k.logprobs >= n && k.content >= n && k.refusal >= n && !k.nested) {
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
