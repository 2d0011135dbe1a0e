package mockllm

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
)

// selectionSchema is the response_format.json_schema.name of the gateway's
// tool-selection requests (toolselect.SchemaName; a test there keeps the two
// equal).
const selectionSchema = "tool_selection"

// ToolSelection reports whether c is the gateway asking which tools fit the
// user's message (LLM tool selection), and returns the names it may pick
// from, in order. The user's message is c.LastText.
func (c *Call) ToolSelection() (candidates []string, ok bool) {
	rf := gjson.GetBytes(c.Body, "response_format.json_schema")
	if rf.Get("name").Str != selectionSchema {
		return nil, false
	}
	rf.Get("schema.properties.tools.items.enum").ForEach(func(_, v gjson.Result) bool {
		candidates = append(candidates, v.Str)
		return true
	})
	return candidates, true
}

// SelectTools is the answer of a selector that picks names, as the gateway
// expects it: {"tools":[...]}.
func SelectTools(names ...string) Turn {
	b := []byte(`{"tools":[`)
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstring.Append(b, n)
	}
	return Turn{Text: string(append(b, "]}"...))}
}

// demoSelect is the demo model as a tool selector: it picks every
// candidate a word of whose name (split at '_' and '-', three letters or
// more) the user's message holds, and the calculator when it holds
// arithmetic; the first candidate when nothing matches.
func demoSelect(c *Call, candidates []string) Turn {
	text := strings.ToLower(c.LastText)
	var picks []string
	for _, name := range candidates {
		hit := name == "calculator" && findExpression(c.LastText) != ""
		for _, w := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '_' || r == '-' }) {
			hit = hit || len(w) >= 3 && strings.Contains(text, w)
		}
		if hit {
			picks = append(picks, name)
		}
	}
	if len(picks) == 0 && len(candidates) > 0 {
		picks = candidates[:1]
	}
	return SelectTools(picks...)
}
