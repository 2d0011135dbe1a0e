package guardrails

import (
	"bytes"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// A JSON text (a tool call's arguments, a tool's result) can spell a value
// with escapes: "bob\u0040example.com" is bob@example.com to whoever
// decodes it, but not to a pattern run over the JSON text. So after the
// JSON text is judged, the decoded text of each string in it (member names
// too) that has an escape is judged again by the pattern guards (regex,
// pii): a match in either counts. A block blocks; a redaction of a decoded
// string writes the string back, rewritten, as a JSON string literal in the
// same place, so the JSON stays valid. An http classifier is asked about
// the JSON text only (once, not once per string).

// maxHeldArgs bounds the tool-call arguments of one answer the response
// stage judges (all its choices' calls together, legacy function_call and
// custom tools' input included): a stream holds them whole until their
// choice ends, so past it the answer cannot be judged whole and is
// withheld (400 content_blocked, or the stream's error event), in a JSON
// answer and a stream alike.
const maxHeldArgs = 1 << 20

// maxHeldCalls bounds the calls of one answer the response stage judges,
// as maxHeldArgs bounds their arguments (a stream keeps each call's first
// entry and its chunk's envelope until it goes out).
const maxHeldCalls = 1024

// tooLongArguments is the error of an answer whose tool calls' arguments
// pass maxHeldArgs.
func tooLongArguments() error {
	return pipeline.Invalid(http.StatusBadRequest, pipeline.CodeContentBlocked,
		"the answer's tool calls exceed the 1024 calls or 1 MiB of arguments the response guardrails judge; the answer was withheld")
}

// patternChecker returns a checker of c's pattern guards (regex, pii)
// that shares c's record of the guards that fired; nil when c has none.
// The caller hands its fired list back (c.fired = p.fired).
func (c *checker) patternChecker() *checker {
	var gs []*guard
	for _, g := range c.guards {
		if g.kind == "regex" || g.kind == "pii" {
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		return nil
	}
	p := newChecker(c.ctx, gs, c.meta)
	p.fired = c.fired
	return p
}

// judgeDecoded judges the decoded text of every string literal of text
// that has an escape with ck's pattern guards, and returns text with the
// redacted ones rewritten (text itself when none is). Text that is not
// valid JSON is left to the judgement of its text: no client decodes it,
// and what looks like a string in it may be none.
func judgeDecoded(ck *checker, text []byte) ([]byte, error) {
	if bytes.IndexByte(text, '\\') < 0 || !jsonvalid.Bytes(text) {
		return text, nil
	}
	return judgeValues(ck, text, false)
}

// judgeJSON finishes the judgement of JSON text, which ck judged whole
// into out: the decoded strings are judged too (judgeDecoded) and the
// JSON is kept valid (keepValid). valid is false when it cannot be.
func judgeJSON(ck *checker, text, out []byte) (judged []byte, valid bool, err error) {
	if out, err = judgeDecoded(ck, out); err != nil {
		return nil, false, err
	}
	return keepValid(ck, text, out)
}

// keepValid returns out, JSON text as ck judged it whole, when it is
// still the valid JSON text was. A redaction that broke it (a pattern
// matched a number: {"card":4111111111111111} became {"card":[REDACTED]})
// is done again value by value over text: each string, decoded, and each
// number is judged on its own, and a changed one is written back as a
// string literal ({"card":"[REDACTED]"}). That is kept only if the
// pattern guards, run over it whole again, find nothing more: a match
// that spans values or their quotes (a pattern `secret"`) cannot be
// redacted this way, and neither can a max_length cut (a cut text is not
// the text with values replaced). ok is false when the result is not
// valid JSON or not clean (kept is then out, the redaction that broke the
// JSON).
func keepValid(ck *checker, text, out []byte) (kept []byte, ok bool, err error) {
	if bytes.Equal(out, text) || jsonvalid.Bytes(out) || !jsonvalid.Bytes(text) {
		return out, true, nil
	}
	if ck.cutoff {
		return out, false, nil
	}
	if kept, err = judgeValues(ck, text, true); err != nil {
		return nil, false, err
	}
	p := ck.patternChecker() // after judgeValues: it takes the guards that fired so far
	if p == nil {
		return out, false, nil // the break was no pattern guard's
	}
	again, err := p.Check(kept)
	ck.fired = p.fired
	if err != nil {
		return nil, false, err
	}
	if !jsonvalid.Bytes(kept) || !bytes.Equal(again, kept) {
		return out, false, nil
	}
	return kept, true, nil
}

// judgeValues judges the strings of JSON text with ck's pattern guards
// (their decoded text; with all false, only those with an escape) and,
// with all, its numbers too, and returns text with every changed value
// rewritten as a JSON string literal (text itself when none is). text
// must be valid JSON.
func judgeValues(ck *checker, text []byte, all bool) ([]byte, error) {
	var p *checker
	var out []byte
	last := 0 // text[last:] is not copied to out yet
scan:
	for i := 0; i < len(text); i++ {
		var lit []byte // the value at i, if any
		var s string   // its text to judge
		switch c := text[i]; {
		case c == '"':
			end, esc := i+1, false
			for end < len(text) && text[end] != '"' {
				if text[end] == '\\' {
					esc = true
					end++
				}
				end++
			}
			if end >= len(text) {
				break scan // unterminated: not in valid JSON, but cheap to keep safe
			}
			lit = text[i : end+1]
			if !esc && !all {
				i = end
				continue
			}
			s = gjson.ParseBytes(lit).Str
		case all && (c == '-' || isDigit(c)):
			end := i + 1
			for end < len(text) && bytes.IndexByte([]byte("0123456789.eE+-"), text[end]) >= 0 {
				end++
			}
			lit = text[i:end]
			s = string(lit)
		default:
			continue
		}
		start := i
		i += len(lit) - 1
		if p == nil {
			if p = ck.patternChecker(); p == nil {
				return text, nil
			}
		}
		judged, err := p.Check([]byte(s))
		ck.fired = p.fired
		if err != nil {
			return nil, err
		}
		if string(judged) == s {
			continue
		}
		out = append(out, text[last:start]...)
		out = jsonstring.Append(out, string(judged))
		last = start + len(lit)
	}
	if out == nil {
		return text, nil
	}
	return append(out, text[last:]...), nil
}
