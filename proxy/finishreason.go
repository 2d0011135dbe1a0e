package proxy

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Some upstreams (Ollama, SGLang) send "finish_reason":"" on every chunk
// before the last, and may in a JSON answer's choice. The gateway reads ""
// as no finish (wire.FinishReason), but the OpenAI schema allows only a
// reason or null in a chunk, and only a reason in an answer, and a typed
// client (a generated SDK, a schema check) rejects "" or takes it for a
// reason. A relayed chunk gets null instead (not finished yet); a JSON
// answer, which is finished, gets "stop", the reason the gateway gives an
// answer it turns into a stream without one (wire.ChatSSE).

// finishHead and finishTail are the key "finish_reason" with its quotes,
// split at its '_': the search looks for that byte, which is rare in a
// chunk (a few key names), where bytes.Index would stop at every quote.
var finishHead, finishTail = []byte(`"finish`), []byte(`_reason"`)

// Replacements for an empty finish_reason: in a chunk, in an answer.
var (
	finishNull = []byte("null")
	finishStop = []byte(`"stop"`)
)

// fillFinish appends to dst[:0] body with every "finish_reason" member whose
// value is the empty string given the value with instead (finishNull or
// finishStop; with finishStop, a JSON answer's, a null one too: an answer
// is finished), and reports true; when body has none (nearly always: one
// byte search per chunk, no parse) it returns body itself and false, and
// dst is untouched. body is only read.
func fillFinish(dst, body, with []byte) ([]byte, bool) {
	answer := bytes.Equal(with, finishStop)
	at, n := emptyFinishAt(body, 0, answer)
	if at < 0 {
		return body, false
	}
	dst = dst[:0]
	from := 0
	for at >= 0 {
		dst = append(dst, body[from:at]...)
		dst = append(dst, with...)
		from = at + n
		at, n = emptyFinishAt(body, from, answer)
	}
	return append(dst, body[from:]...), true
}

// emptyFinishAt returns the index in body, from from on, of the value ""
// (or, with null, null) of a "finish_reason" member and the value's
// length, or -1. A match is a key: its opening quote follows '{' or ','
// (inside a string a quote is escaped), and ':' and the value follow it,
// with any whitespace between.
func emptyFinishAt(body []byte, from int, null bool) (int, int) {
	for {
		i := bytes.IndexByte(body[from:], '_')
		if i < 0 {
			return -1, 0
		}
		k := from + i // at '_'
		from = k + 1
		if k < len(finishHead) || !bytes.HasPrefix(body[k:], finishTail) || !bytes.Equal(body[k-len(finishHead):k], finishHead) {
			continue
		}
		j := k - len(finishHead) // at the opening quote
		for j > 0 && isSpace(body[j-1]) {
			j--
		}
		if j == 0 || (body[j-1] != '{' && body[j-1] != ',') {
			continue
		}
		v := skipSpace(body, k+len(finishTail))
		if v == len(body) || body[v] != ':' {
			continue
		}
		v = skipSpace(body, v+1)
		if v+1 < len(body) && body[v] == '"' && body[v+1] == '"' {
			return v, len(`""`)
		}
		if null && bytes.HasPrefix(body[v:], finishNull) {
			return v, len(finishNull)
		}
	}
}

// skipSpace returns the index of the first byte of body from i on that is
// not JSON whitespace, or len(body).
func skipSpace(body []byte, i int) int {
	for i < len(body) && isSpace(body[i]) {
		i++
	}
	return i
}

// finishKey is the member fillFinish rewrites, quoted.
var finishKey = []byte(`"finish_reason"`)

// addFinish gives each choice of a JSON answer that has no finish_reason
// member "stop", as a stream without one ends (wire.ChatSSE); body itself
// when it names the member as often as it has messages (nearly always: two
// byte counts; a quote inside a string is escaped, so neither counts text).
// An answer without the member fails the schema, and an SDK that reads it
// gets no reason.
func addFinish(body []byte) []byte {
	if namesEveryFinish(body) {
		return body
	}
	var missing []int
	i := 0
	gjson.GetBytes(body, "choices").ForEach(func(_, ch gjson.Result) bool {
		if !ch.Get("finish_reason").Exists() {
			missing = append(missing, i)
		}
		i++
		return true
	})
	for _, i := range missing {
		if out, err := sjson.SetRawBytes(body, "choices."+strconv.Itoa(i)+".finish_reason", finishStop); err == nil {
			body = out
		}
	}
	return body
}

var messageKey = []byte(`"message"`)

// namesEveryFinish reports whether body names the finish_reason member as
// often as it has messages: two byte counts (a quote inside a string is
// escaped, so neither counts text).
func namesEveryFinish(body []byte) bool {
	n := bytes.Count(body, finishKey)
	return n > 0 && n >= bytes.Count(body, messageKey)
}

var toolCallsKey = []byte(`"tool_calls"`)

// callsFinish gives each choice of a JSON answer that made tool calls and
// has no finish reason (none, null or "": Ollama, SGLang) "tool_calls", as
// the same answer streamed through the tool loop ends; body itself when no
// choice needs it (nearly always: byte searches, no parse). fillFinish and
// addFinish then give the others "stop".
func callsFinish(body []byte) []byte {
	if !bytes.Contains(body, toolCallsKey) {
		return body
	}
	if i, _ := emptyFinishAt(body, 0, true); i < 0 && namesEveryFinish(body) {
		return body
	}
	choices := gjson.GetBytes(body, "choices")
	if !choices.IsArray() {
		return body
	}
	var fix []int
	i := 0
	choices.ForEach(func(_, ch gjson.Result) bool {
		calls := ch.Get("message.tool_calls")
		if f := ch.Get("finish_reason"); (!f.Exists() || f.Type == gjson.Null || f.Type == gjson.String && f.Str == "") &&
			calls.IsArray() && len(calls.Array()) > 0 {
			fix = append(fix, i)
		}
		i++
		return true
	})
	for _, i := range fix {
		if out, err := sjson.SetBytes(body, "choices."+strconv.Itoa(i)+".finish_reason", "tool_calls"); err == nil {
			body = out
		}
	}
	return body
}
