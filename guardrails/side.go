package guardrails

import (
	"errors"
	"slices"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// An answer carries text beside its choices' texts and calls: the trace and
// plan the tool loop shows (x_gateway: a pending call's arguments, the to-do
// list, traced calls), a message's other members (a search model's
// annotations, OpenRouter's reasoning_details) and a provider's own
// top-level members (Perplexity's citations). The response stage judges
// every string in them as a text of its own, as it judges the content: a
// match redacted there is not shown one member further down.

// sideGuards are the guards that judge side strings: neither max_length
// (a side string is no part of the answer's length) nor http (an external
// classifier judges the answer, not each of its references, which a
// provider may repeat on every chunk).
func sideGuards(guards []*guard) []*guard {
	return slices.DeleteFunc(slices.Clone(guards), func(g *guard) bool { return g.kind == "max_length" || g.http != nil })
}

// sideEdits adds to edits the redactions of the strings of body's side
// members: the top-level ones but choices, and each choice's message (key
// "message") or delta (key "delta") members but its texts and calls.
func sideEdits(ck *checker, body []byte, key string, edits []jsonedit.Edit, what string) ([]jsonedit.Edit, error) {
	var err error
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str == "choices":
			v.ForEach(func(_, ch gjson.Result) bool {
				ch.Get(key).ForEach(func(mk, mv gjson.Result) bool {
					if !wire.OwnMember(mk.Str) {
						edits, err = leafEdits(ck, body, mv, edits, what, 0)
					}
					return err == nil
				})
				return err == nil
			})
		case !wire.OwnTop(k.Str):
			edits, err = leafEdits(ck, body, v, edits, what, 0)
		}
		return err == nil
	})
	return edits, err
}

// maxSideDepth bounds the nesting leafEdits follows (the body's own is
// bounded by jsonvalid; this keeps the recursion short whatever it is).
const maxSideDepth = 32

// opaqueKey reports whether a side member named k holds no text a person
// wrote (an id the client sends back, a type, a signature a provider
// checks): its strings are not judged, at any depth.
func opaqueKey(k string) bool {
	switch k {
	case "id", "call_id", "tool_call_id", "type", "status", "name", "signature", "data", "index", "encrypted_content":
		return true
	}
	return false
}

// leafEdits adds the redactions of every string in v (an object, an array
// or a string of body) to edits; a string under "arguments" is a call's
// JSON text, judged as arguments are (judgeArgs: a redaction that would
// break its JSON is an error).
func leafEdits(ck *checker, body []byte, v gjson.Result, edits []jsonedit.Edit, what string, depth int) ([]jsonedit.Edit, error) {
	var err error
	switch {
	case v.Type == gjson.String:
		return checkText(ck, body, v, edits, what)
	case depth >= maxSideDepth:
		return edits, pipeline.Internal(errors.New("guardrails: a side member nests too deep"), what)
	case v.IsObject():
		v.ForEach(func(k, c gjson.Result) bool {
			switch {
			case opaqueKey(k.Str):
			case k.Str == "arguments" && c.Type == gjson.String:
				edits, err = argsEdit(ck, body, c, edits, what)
			default:
				edits, err = leafEdits(ck, body, c, edits, what, depth+1)
			}
			return err == nil
		})
	case v.IsArray():
		v.ForEach(func(_, c gjson.Result) bool {
			edits, err = leafEdits(ck, body, c, edits, what, depth+1)
			return err == nil
		})
	}
	return edits, err
}

// argsEdit judges a call's arguments v (a JSON text in a string of body)
// as the answer's calls' are, and adds the edit of its redaction.
func argsEdit(ck *checker, body []byte, v gjson.Result, edits []jsonedit.Edit, what string) ([]jsonedit.Edit, error) {
	out, err := judgeArgs(ck, []byte(v.Str))
	if err != nil || string(out) == v.Str {
		return edits, err
	}
	edits, ok := jsonedit.ReplaceValue(edits, body, v, jsonstring.Append(nil, string(out)))
	if !ok {
		return edits, pipeline.Internal(errors.New("guardrails: a text's position is unknown"), what)
	}
	return edits, nil
}

// checkSide returns chunk (or an answer) with its side members' strings
// judged: nil when nothing changed.
func checkSide(ck *checker, body []byte, key string) ([]byte, error) {
	const what = "the answer could not be redacted"
	edits, err := sideEdits(ck, body, key, nil, what)
	return applyEdits(body, edits, err, what)
}
