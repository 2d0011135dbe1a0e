package guardrails

import (
	"bytes"
	"context"
	"errors"
	"net/http"

	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// checkRequest runs the request stage over every message's text (a string
// content, or the text of its parts, an assistant message's refusal and
// reasoning, and the arguments of its tool calls, which the model reads as
// much as its content: visitMessage),
// every tool's description and the side texts (sidetexts.go: a structured
// output's schema, the tools' names and parameter schemas, documents). It returns the body with redactions, or nil
// when nothing changed; a block is the 400 content_blocked envelope.
func checkRequest(ctx context.Context, ck *checker, body []byte) ([]byte, error) {
	var edits []jsonedit.Edit
	var failed error
	var outs map[int][]byte // the texts the judging changed, by position (checkAcrossParts)
	check := func(v gjson.Result, more, args bool) bool {
		judge := ck.Check
		if more {
			judge = ck.CheckMore
		}
		src := argText(v)
		out, err := judge([]byte(src))
		valid := true
		switch {
		case err != nil:
		case args:
			out, valid, err = judgeJSON(ck, []byte(src), out) // arguments.go
		default:
			// A text that is JSON (a tool's result) hides no value in
			// an escape either; it need not stay JSON.
			out, err = judgeDecoded(ck, out)
		}
		if err != nil {
			failed = err
			return false
		}
		if !bytes.Equal(out, []byte(src)) {
			if outs == nil {
				outs = map[int][]byte{}
			}
			outs[v.Index] = bytes.Clone(out) // the checker reuses its buffer for the next text
			if !valid {
				// A redaction that breaks the call's JSON cannot be sent.
				failed = brokenArguments()
				return false
			}
			var ok bool
			if edits, ok = jsonedit.ReplaceValue(edits, body, v, replacement(v, out)); !ok {
				failed = pipeline.Internal(errors.New("guardrails: a text's position is unknown"), "the request could not be redacted")
				return false
			}
		}
		return true
	}
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		// The texts of one message: max_length counts them together.
		more := false
		if visitMessage(m, func(t gjson.Result, args bool) bool {
			ok := check(t, more, args)
			more = true
			return ok
		}) && failed == nil {
			failed = tooDeep("messages")
		}
		return failed == nil
	})
	if failed == nil {
		failed = checkAcrossParts(ck, body, outs)
	}
	if failed == nil {
		visitToolDescriptions(body, func(t gjson.Result) bool { return check(t, false, false) })
	}
	if failed == nil {
		edits, failed = checkSideTexts(ck, body, edits)
	}
	return applyEdits(body, edits, failed, "the request could not be redacted")
}

// checkAcrossParts looks, for each message whose content is a list of
// parts, at the texts of its text parts joined as the per-part judging
// left them (outs, by the texts' positions in body: redacted, cut by a
// max_length), run together and with line breaks between them, as an
// upstream reads them (OpenAI runs them together, a chat template may
// break lines). A regex or pii match there that crosses from one part
// into the next (a value split over them, "bob@" and "example.com") was
// seen by no part's judging: it fires its guardrail, and blocks the
// request whether the guardrail blocks or redacts (a redaction cannot be
// made within the parts; spanningBlocked). Matches within a part were
// judged already, and a match of digits alone (numeric) is not taken.
func checkAcrossParts(ck *checker, body []byte, outs map[int][]byte) error {
	guards := sideGuards(ck.guards)
	if len(guards) == 0 {
		return nil
	}
	var failed error
	var texts [][]byte
	var joined []byte
	var spans []span
	var regions []int
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		return members(m, "content", func(c gjson.Result) bool {
			if !c.IsArray() {
				return true
			}
			texts = texts[:0]
			c.ForEach(func(_, p gjson.Result) bool {
				return members(p, "text", func(t gjson.Result) bool {
					if t.Type == gjson.String {
						out, ok := outs[t.Index]
						if !ok {
							out = []byte(t.Str)
						}
						texts = append(texts, out)
					}
					return true
				})
			})
			if len(texts) < 2 {
				return true
			}
			for _, sep := range [...]string{"", "\n"} {
				joined = joined[:0]
				var ends []int // where each part but the last ends in joined
				for i, t := range texts {
					if i > 0 {
						joined = append(joined, sep...)
					}
					joined = append(joined, t...)
					ends = append(ends, len(joined))
				}
				ends = ends[:len(ends)-1]
				for _, g := range guards {
					spans = spans[:0]
					spans, regions = g.find(joined, spans, regions)
					for _, sp := range spans {
						if !spansParts(sp, ends, len(sep)) || numeric(joined[sp.start:sp.end]) {
							continue
						}
						if err := ck.fire(g); err != nil {
							failed = err
							return false
						}
						if g.action == actionRedact {
							failed = spanningBlocked()
							return false
						}
					}
				}
			}
			return true
		})
	})
	return failed
}

// numeric reports whether b holds no letter: digits that meet at the
// edges of two parts (a date, then a year; a list of prices) run together
// into what reads as a phone or card number far more often than a number
// is split on purpose, so such a match across parts is not taken.
func numeric(b []byte) bool {
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '@' || c >= 0x80 {
			return false
		}
	}
	return true
}

// spansParts reports whether sp takes in text of two parts: it starts before
// one part's end (ends) and ends after the separator that follows it.
func spansParts(sp span, ends []int, sep int) bool {
	for _, e := range ends {
		if sp.start < e && sp.end > e+sep {
			return true
		}
	}
	return false
}

// spanningBlocked is the 400 of a request whose guardrail match spans the
// text parts of one message, which a redaction cannot be made in.
func spanningBlocked() error {
	return pipeline.Invalid(http.StatusBadRequest, pipeline.CodeContentBlocked,
		"a guardrail matched text that spans a message's content parts; the request was not sent")
}

// checkSideTexts judges each side text of body on its own (visitSideTexts)
// and adds the edits that redact its prose to edits; a redaction of a
// fixed text is fixedRedacted.
func checkSideTexts(ck *checker, body []byte, edits []jsonedit.Edit) ([]jsonedit.Edit, error) {
	var failed error
	deep := visitSideTexts(body, func(v gjson.Result, fixed bool) bool {
		if !fixed {
			edits, failed = checkText(ck, body, v, edits, "the request could not be redacted")
			return failed == nil
		}
		out, err := ck.Check([]byte(v.Str))
		switch {
		case err != nil:
			failed = err
		case string(out) != v.Str:
			failed = fixedRedacted()
		}
		return failed == nil
	})
	if failed == nil {
		failed = deep
	}
	return edits, failed
}

// brokenArguments is the 400 of a redaction that would leave a tool call's
// arguments invalid JSON: they cannot be sent, redacted or not.
func brokenArguments() error {
	return pipeline.Invalid(http.StatusBadRequest, pipeline.CodeContentBlocked,
		"a guardrail's redaction of a tool call's arguments would break their JSON; the request was not sent")
}

// visitMessage calls visit with each text of chat message m, in order: a
// string content or its parts' texts (a text part's text, a refusal
// part's refusal, a thinking part's thinking, a string or parts of its
// own, as Anthropic and Mistral take reasoning back), the message's refusal, its reasoning (vLLM's and
// DeepSeek's reasoning_content, or reasoning, which a chat template may
// print back into the prompt), then each tool call's arguments and a
// legacy function_call's (args set: a JSON text that must stay one).
// visit returns false to stop. A message's name is not visited: it names
// the participant (OpenAI allows no whitespace in it), as a tool call's
// name and id name what it calls, none of them prose the guardrails judge.
// Names compare without regard to case, and every member of a repeated
// name is visited (members): an upstream decoding with Go's encoding/json
// reads "Content" as the content.
func visitMessage(m gjson.Result, visit func(t gjson.Result, args bool) bool) (deep bool) {
	text := func(t gjson.Result) bool { return t.Type != gjson.String || visit(t, false) }
	var parts func(c gjson.Result, depth int) bool
	part := func(p gjson.Result, depth int) bool {
		// A thinking part holds a string (Anthropic's form) or parts of
		// its own (Mistral's).
		return members(p, "text", text) && members(p, "refusal", text) &&
			members(p, "thinking", func(t gjson.Result) bool { return parts(t, depth+1) })
	}
	parts = func(c gjson.Result, depth int) bool {
		switch {
		case c.Type == gjson.String:
			return visit(c, false)
		case c.IsArray() || c.IsObject():
			if depth > maxThinkingDepth {
				deep = true
				return false
			}
			if c.IsObject() {
				return part(c, depth) // one part, not in a list: an upstream may read it so
			}
			ok := true
			c.ForEach(func(_, p gjson.Result) bool {
				ok = part(p, depth)
				return ok
			})
			return ok
		}
		return true
	}
	ok := members(m, "content", func(c gjson.Result) bool { return parts(c, 0) }) && members(m, "refusal", text)
	// Reasoning as a string, as text parts (a list, as content is), or as
	// one object of such a part: a chat template prints any of them.
	reasoning := func(r gjson.Result) bool {
		if r.IsObject() {
			return members(r, "text", text) && members(r, "thinking", text)
		}
		return parts(r, 0)
	}
	for _, key := range [...]string{"reasoning_content", "reasoning"} {
		ok = ok && members(m, key, reasoning)
	}
	if !ok {
		return
	}
	// Arguments are a JSON text in a string, or (Ollama's form) the JSON
	// value itself.
	arguments := func(f gjson.Result) bool {
		return members(f, "arguments", func(a gjson.Result) bool {
			return (a.Type != gjson.String && !a.IsObject() && !a.IsArray()) || visit(a, true)
		})
	}
	ok = members(m, "tool_calls", func(calls gjson.Result) bool {
		ok := true
		calls.ForEach(func(_, tc gjson.Result) bool {
			// A custom tool's call holds free text as its input.
			ok = members(tc, "function", arguments) &&
				members(tc, "custom", func(c gjson.Result) bool { return members(c, "input", text) })
			return ok
		})
		return ok
	})
	if ok {
		// The legacy function calling's {"function_call":{"name","arguments"}}.
		members(m, "function_call", arguments)
	}
	return deep
}

// replacement is the JSON that takes v's place once its text was judged
// into out: a string literal for a string, and for arguments sent as a
// JSON value, out itself, copied (out is the checker's buffer, which the
// next text's judging reuses).
func replacement(v gjson.Result, out []byte) []byte {
	if v.Type == gjson.String {
		return jsonstring.Append(nil, string(out))
	}
	return bytes.Clone(out)
}

// argText is the text of a visited value: a string's, or the JSON of
// arguments sent as a JSON value rather than in a string.
func argText(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.Str
	}
	return v.Raw
}

// maxThinkingDepth bounds how deep visitMessage follows thinking parts in
// thinking parts (Mistral's holds text parts, one level). Each level is
// read again from its start, so a deeper chain is refused (tooDeep), as
// side texts nested past maxTextDepth are, rather than walked at a cost
// that grows with the square of its depth.
const maxThinkingDepth = 4

// visitToolDescriptions calls visit with each tool's description (the
// model reads them as it reads the messages); visit returns false to stop.
// Names compare as visitMessage's do.
func visitToolDescriptions(body []byte, visit func(gjson.Result) bool) {
	members(jsonedit.Root(body), "tools", func(tools gjson.Result) bool {
		ok := true
		tools.ForEach(func(_, t gjson.Result) bool {
			ok = members(t, "function", func(f gjson.Result) bool {
				return members(f, "description", func(d gjson.Result) bool { return d.Type != gjson.String || visit(d) })
			})
			return ok
		})
		return ok
	})
}

// messageTexts returns the text of every message of a chat body (as
// visitMessage reads it), every tool's description and every side text
// (visitSideTexts), each followed by a newline; or tooDeep.
func messageTexts(body []byte) ([]byte, error) {
	var out []byte
	add := func(t gjson.Result) bool {
		out = append(append(out, argText(t)...), '\n')
		return true
	}
	var err error
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		if visitMessage(m, func(t gjson.Result, _ bool) bool { return add(t) }) {
			err = tooDeep("messages")
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	visitToolDescriptions(body, add)
	err = visitSideTexts(body, func(t gjson.Result, _ bool) bool { return add(t) })
	return out, err
}

// checkAnswer runs the response stage over every choice's reasoning,
// content, refusal and tool calls' arguments of a chat.completion, each text on its
// own, and rewrites the logprobs of the first two as they are rewritten
// (logprobs.go, toolcalls.go); nil when nothing changed. The first choice's content, when calls ran among it, is judged
// in the pieces they cut it into (checkPieces).
func checkAnswer(ck *checker, body []byte, calls []pipeline.ServerCall) ([]byte, error) {
	const what = "the answer could not be redacted"
	var edits []jsonedit.Edit
	var failed error
	var args *checker // the tool calls' (toolcalls.go)
	argBytes, nCalls := 0, 0
	n := 0
	gjson.GetBytes(body, "choices").ForEach(func(_, ch gjson.Result) bool {
		first := n == 0
		n++
		judge := func(a gjson.Result, k callKind) bool {
			if a.Type == gjson.Null {
				return true
			}
			text := argsText(a) // toolcalls.go: not a string, its JSON text
			if argBytes, nCalls = argBytes+len(text), nCalls+1; argBytes > maxHeldArgs || nCalls > maxHeldCalls {
				failed = tooLongArguments() // as a stream, which holds them, fails
				return false
			}
			if args == nil {
				args = newChecker(ck.ctx, argGuards(ck.guards), ck.meta)
			}
			var out []byte
			if out, failed = judgeCall(args, k, []byte(text)); failed != nil || (string(out) == text && a.Type == gjson.String) {
				return failed == nil
			}
			var ok bool
			if edits, ok = jsonedit.ReplaceValue(edits, body, a, jsonstring.Append(nil, string(out))); !ok {
				failed = pipeline.Internal(errors.New("guardrails: a tool call's position is unknown"), what)
			}
			return failed == nil
		}
		ch.Get("message.tool_calls").ForEach(func(_, tc gjson.Result) bool {
			if c := tc.Get("custom"); c.Exists() {
				return judge(c.Get("input"), callCustom)
			}
			return judge(tc.Get("function.arguments"), callFunction)
		})
		if failed == nil {
			judge(ch.Get("message.function_call.arguments"), callLegacy)
		}
		if failed != nil {
			return false
		}
		for _, key := range textKeys {
			v := ch.Get("message." + key)
			if v.Type != gjson.String {
				continue
			}
			var out []byte
			if first && key == "content" && len(calls) > 0 {
				out, failed = checkPieces(ck, []byte(v.Str), calls)
			} else {
				out, failed = ck.Check([]byte(v.Str))
			}
			if failed != nil {
				return false
			}
			if string(out) == v.Str {
				continue
			}
			var ok bool
			if edits, ok = jsonedit.ReplaceValue(edits, body, v, jsonstring.Append(nil, string(out))); !ok {
				failed = pipeline.Internal(errors.New("guardrails: a text's position is unknown"), what)
				return false
			}
			list := ch.Get("logprobs." + key)
			if items, changed := rewriteList(list, ck); changed {
				if edits, ok = jsonedit.ReplaceValue(edits, body, list, items); !ok {
					failed = pipeline.Internal(errors.New("guardrails: a logprobs list's position is unknown"), what)
					return false
				}
			}
		}
		return true
	})
	if side := sideGuards(ck.guards); failed == nil && len(side) > 0 {
		edits, failed = sideEdits(newChecker(ck.ctx, side, ck.meta), body, "message", edits, what)
	}
	return applyEdits(body, edits, failed, what)
}

// checkText judges v, a string of body, and adds the edit that redacts it
// to edits when the guards changed it; what names the failure of an edit.
func checkText(ck *checker, body []byte, v gjson.Result, edits []jsonedit.Edit, what string) ([]jsonedit.Edit, error) {
	text, err := ck.Check([]byte(v.Str))
	if err == nil {
		text, err = judgeDecoded(ck, text) // a text that is JSON hides no value in an escape
	}
	if err != nil {
		return edits, err
	}
	if !bytes.Equal(text, []byte(v.Str)) {
		var ok bool
		if edits, ok = jsonedit.ReplaceValue(edits, body, v, jsonstring.Append(nil, string(text))); !ok {
			return edits, pipeline.Internal(errors.New("guardrails: a text's position is unknown"), what)
		}
	}
	return edits, nil
}

// applyEdits returns body with the redactions made in one copy (one sjson
// write per text copied the whole body per text: a request of thousands of
// redacted parts cost seconds), nil when there is none, or failed.
func applyEdits(body []byte, edits []jsonedit.Edit, failed error, what string) ([]byte, error) {
	if failed != nil {
		return nil, asClientError(failed)
	}
	if len(edits) == 0 {
		return nil, nil
	}
	out, ok := jsonedit.Apply(body, edits)
	if !ok {
		return nil, pipeline.Internal(errors.New("guardrails: overlapping redactions"), what)
	}
	return out, nil
}

// asClientError turns a *Blocked into its envelope; other errors pass.
func asClientError(err error) error {
	var b *Blocked
	if errors.As(err, &b) {
		return b.clientError()
	}
	return err
}
