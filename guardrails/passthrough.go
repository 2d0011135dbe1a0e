package guardrails

import (
	"context"
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/pipeline"
)

// passFields are the top-level members of a pass-through body whose texts
// reach the model: completions' prompt and suffix (and the variables of
// the Responses API's saved prompt), the input of embeddings,
// moderations, speech and the Responses API, its instructions, and
// messages.
var passFields = []string{"prompt", "suffix", "input", "instructions", "messages", "tools"}

// itemTexts are the members of an item in those fields that hold its text
// (a message's content, a part's text, a refusal part's or an assistant
// message's refusal, a tool output, a tool call's arguments (a JSON value
// or its text), a custom tool call's input, a tool's
// description, a reasoning item's summary (its summary_text parts' text:
// a server that runs the model itself, vLLM's Responses API say, reads it
// back as the reasoning of that turn, as it reads the item's content) and
// a chat message's reasoning_content or reasoning, a thinking part's
// thinking (a string, or parts of its own), the chat form's tool_calls,
// function and legacy function_call objects that hold calls' arguments,
// an MCP tool's server_description (shown to the model with its tools),
// and a tool call item's action (a web search's query or queries, the
// text a computer call typed) and a file search's queries, which the
// model reads back); other members (type, role, ids, names, parameter schemas,
// image data) are not text the guardrails judge, as on chat.
var itemTexts = []string{"text", "content", "refusal", "output", "arguments", "input", "description", "summary",
	"reasoning_content", "reasoning", "thinking", "tool_calls", "function", "function_call",
	"server_description", "action", "query", "queries"}

// CheckBody runs t's request-stage guardrails over the texts of r, a JSON
// body sent outside the chat pipeline (a pass-through call of a model), as
// the middleware runs them over a chat request's messages and side texts
// (a structured output's schema, the tools' names and parameter schemas,
// documents and a rerank's query): each text on
// its own, except that an http classifier is asked once, about the texts
// joined (an embeddings input of thousands of strings is one question, not
// thousands). A block is the same 400 content_blocked; redactions replace
// r.Body. A nil Engine, or a tenant without request guardrails, passes.
func (e *Engine) CheckBody(t *pipeline.Tenant, r *pipeline.Request) error {
	if e == nil {
		return nil
	}
	local, remote := splitRemote(e.guards(t, StageRequest))
	ctx := context.Background() // each classifier call is bounded by its guard's timeout
	if len(remote) > 0 {
		texts, err := bodyTexts(r.Body)
		if err != nil {
			return err
		}
		if err := askOnce(ctx, remote, r.Meta, texts); err != nil {
			return err
		}
	}
	if len(local) == 0 {
		return nil
	}
	body, err := checkTexts(newChecker(ctx, local, r.Meta), r.Body)
	if err != nil {
		return err
	}
	if body != nil {
		r.Body = body
	}
	return nil
}

// RedactBody applies t's request-stage redacting guards (pattern and PII
// guards whose action is redact) to r.Body, a Responses request the chat
// pipeline judges again once translated: what the gateway stores and
// echoes of the request (its input items, instructions, tools) then holds
// no text they redact, as the upstream never sees it. Blocks, flags and
// classifiers are left to that judgement, so each counts, and each
// classifier is asked, once. A nil Engine passes.
func (e *Engine) RedactBody(t *pipeline.Tenant, r *pipeline.Request) error {
	if e == nil {
		return nil
	}
	var redacting []*guard
	for _, g := range e.guards(t, StageRequest) {
		if g.http == nil && g.action == "redact" {
			redacting = append(redacting, g)
		}
	}
	if len(redacting) == 0 {
		return nil
	}
	body, err := checkTexts(newChecker(context.Background(), redacting, r.Meta), r.Body)
	if err != nil {
		return err
	}
	if body != nil {
		r.Body = body
	}
	return nil
}

// bodyTexts returns every text of a pass-through body that CheckBody
// judges (walkTexts, visitSideTexts), each followed by a newline; or
// tooDeep.
func bodyTexts(body []byte) ([]byte, error) {
	var out []byte
	add := func(v gjson.Result, _ bool) bool {
		out = append(append(out, argText(v)...), '\n')
		return true
	}
	if err := walkTexts(body, add); err != nil {
		return nil, err
	}
	err := visitSideTexts(body, add)
	return out, err
}

// walkTexts calls visit with each text of body's passFields, in order,
// until it returns false; args is set for a tool call's arguments (a JSON
// text that must stay one). It returns tooDeep when a text is nested past
// maxTextDepth (an input of arrays in arrays: each level would read the
// bytes below it again).
func walkTexts(body []byte, visit func(v gjson.Result, args bool) bool) error {
	deep := false
	var walk func(v gjson.Result, args bool, depth int) bool
	walk = func(v gjson.Result, args bool, depth int) bool {
		switch {
		case v.Type == gjson.String:
			return visit(v, args)
		case !v.IsArray() && !v.IsObject():
			return true
		case depth >= maxTextDepth:
			deep = true
			return false
		case v.IsArray():
			ok := true
			v.ForEach(func(_, item gjson.Result) bool { ok = walk(item, false, depth+1); return ok })
			return ok
		}
		ok := true
		v.ForEach(func(k, m gjson.Result) bool {
			switch name := named(k.Str, itemTexts); {
			case name == "arguments" && (m.IsObject() || m.IsArray()):
				ok = visit(m, true) // arguments sent as a JSON value: judged whole, as their text
			case name == "" && strings.EqualFold(k.Str, "custom") && m.IsObject():
				// A chat tool call's custom object: its input is free text
				// (a custom tool's definition, also "custom", has none).
				ok = members(m, "input", func(in gjson.Result) bool { return walk(in, false, depth+1) })
			default:
				ok = name == "" || walk(m, name == "arguments", depth+1)
			}
			return ok
		})
		return ok
	}
	var param string
	jsonedit.Root(body).ForEach(func(k, v gjson.Result) bool {
		// Names compare without regard to case, as an upstream decoding
		// with Go's encoding/json matches them ("Prompt" is its prompt).
		// A top-level tools string is no text the model reads.
		param = k.Str
		switch name := named(k.Str, passFields); {
		case name == "" || (name == "tools" && v.Type == gjson.String):
			return true
		case name == "prompt" && v.IsObject():
			// The Responses API's saved prompt {"id","version","variables"}:
			// a variable is a string or an input item (input_text's text).
			return members(v, "variables", func(vars gjson.Result) bool {
				ok := true
				vars.ForEach(func(_, x gjson.Result) bool { ok = walk(x, false, 2); return ok })
				return ok
			})
		}
		return walk(v, false, 0)
	})
	if deep {
		return tooDeep(param)
	}
	return nil
}

// named returns the name of names that k is, compared as Go's
// encoding/json compares them (strings.EqualFold), or "".
func named(k string, names []string) string {
	for _, n := range names {
		if strings.EqualFold(k, n) {
			return n
		}
	}
	return ""
}

// checkTexts judges each text of body's passFields, then each side text
// (visitSideTexts), on its own; it returns the body with redactions, or
// nil when nothing changed.
func checkTexts(ck *checker, body []byte) ([]byte, error) {
	var edits []jsonedit.Edit
	var failed error
	deep := walkTexts(body, func(v gjson.Result, args bool) bool {
		if !args {
			edits, failed = checkText(ck, body, v, edits, "the request could not be redacted")
			return failed == nil
		}
		src := argText(v)
		out, err := ck.Check([]byte(src))
		valid := true
		if err == nil {
			out, valid, err = judgeJSON(ck, []byte(src), out) // arguments.go
		}
		switch {
		case err != nil:
			failed = err
		case string(out) == src:
		case !valid:
			failed = brokenArguments()
		default:
			var ok bool
			if edits, ok = jsonedit.ReplaceValue(edits, body, v, replacement(v, out)); !ok {
				failed = pipeline.Internal(errors.New("guardrails: a text's position is unknown"), "the request could not be redacted")
			}
		}
		return failed == nil
	})
	if failed == nil {
		failed = deep
	}
	if failed == nil {
		edits, failed = checkSideTexts(ck, body, edits)
	}
	return applyEdits(body, edits, failed, "the request could not be redacted")
}

// splitRemote parts guards into those judged here and the http
// classifiers.
func splitRemote(guards []*guard) (local, remote []*guard) {
	for _, g := range guards {
		if g.http != nil {
			remote = append(remote, g)
		} else {
			local = append(local, g)
		}
	}
	return local, remote
}

// askOnce asks the classifiers remote about text, one call each; a block
// is the 400 content_blocked envelope.
func askOnce(ctx context.Context, remote []*guard, meta *pipeline.Meta, text []byte) error {
	if len(text) == 0 {
		return nil
	}
	if _, err := newChecker(ctx, remote, meta).Check(text); err != nil {
		return asClientError(err)
	}
	return nil
}
