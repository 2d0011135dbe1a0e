package toolselect

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
)

// SchemaName names the structured-output format of the selector's request:
// a model (mockllm's demo model) recognises the gateway's selection request
// by response_format.json_schema.name.
const SchemaName = "tool_selection"

// candidate is one tool the selector may pick: a client tool or a server
// tool of the request.
type candidate struct {
	name, description string
}

// selectionPrompt opens the selector's system message; the tool list
// follows it.
const selectionPrompt = "You choose the tools an AI assistant is offered for the user's message below. " +
	"Pick the tools the assistant may need to answer it: at least %MIN% and at most %MAX%, the most useful first. " +
	"Use only names from this list. Answer with JSON only, like {\"tools\":[\"name\"]}.\n\nTools:\n"

// requestBody is the selector's chat completion request: the tool list in
// the system message, the user's latest turn as the user message, and a
// JSON schema whose enum lists every name.
func requestBody(model string, cands []candidate, text string, minTools, maxTools int) []byte {
	sys := strings.NewReplacer("%MIN%", strconv.Itoa(minTools), "%MAX%", strconv.Itoa(maxTools)).Replace(selectionPrompt)
	var list strings.Builder
	list.WriteString(sys)
	for _, c := range cands {
		list.WriteString("- ")
		list.WriteString(c.name)
		if d := strings.TrimSpace(clip(c.description, maxDescription)); d != "" {
			list.WriteString(": ")
			list.WriteString(strings.ReplaceAll(d, "\n", " "))
		}
		list.WriteByte('\n')
	}
	b := make([]byte, 0, list.Len()+len(text)+64*len(cands)+512)
	b = append(b, `{"model":`...)
	b = jsonstring.Append(b, model)
	b = append(b, `,"stream":false,"messages":[{"role":"system","content":`...)
	b = jsonstring.Append(b, list.String())
	b = append(b, `},{"role":"user","content":`...)
	b = jsonstring.Append(b, clip(text, maxTurnText))
	b = append(b, `}],"response_format":{"type":"json_schema","json_schema":{"name":"`+SchemaName+`","strict":true,`+
		`"schema":{"type":"object","properties":{"tools":{"type":"array","items":{"type":"string","enum":[`...)
	for i, c := range cands {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstring.Append(b, c.name)
	}
	return append(b, `]}}},"required":["tools"],"additionalProperties":false}}}}`...)
}

// parseAnswer returns the names in a selector's answer: a JSON object
// {"tools":[...]} or a bare array of strings, possibly inside a Markdown
// code fence. ok is false for anything else (a malformed answer).
func parseAnswer(content string) (names []string, ok bool) {
	s := strings.TrimSpace(content)
	if rest, fenced := strings.CutPrefix(s, "```"); fenced {
		rest = strings.TrimPrefix(rest, "json")
		if end := strings.LastIndex(rest, "```"); end >= 0 {
			s = strings.TrimSpace(rest[:end])
		}
	}
	if !jsonvalid.String(s) {
		return nil, false
	}
	v := gjson.Parse(s)
	if v.IsObject() {
		v = v.Get("tools")
	}
	if !v.IsArray() {
		return nil, false
	}
	ok = true
	v.ForEach(func(_, n gjson.Result) bool {
		if n.Type != gjson.String {
			ok = false
			return false
		}
		names = append(names, n.Str)
		return true
	})
	return names, ok
}

// validNames keeps the names of cands, each once, in the answer's order,
// at most max of them: the selector's picks. Unknown names are dropped.
func validNames(names []string, cands []candidate, max int) []string {
	known := make(map[string]bool, len(cands))
	for _, c := range cands {
		known[c.name] = true
	}
	out := make([]string, 0, min(len(names), max))
	for _, n := range names {
		if len(out) == max {
			break
		}
		if known[n] {
			out = append(out, n)
			known[n] = false // once
		}
	}
	return out
}

// appendNames appends names as a JSON array (what the cache keeps).
func appendNames(dst []byte, names []string) []byte {
	dst = append(dst, '[')
	for i, n := range names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonstring.Append(dst, n)
	}
	return append(dst, ']')
}
