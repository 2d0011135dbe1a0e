package guardrails

import (
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/pipeline"
)

// Side texts are what a model reads of a request besides its messages and
// the descriptions of its tools: the JSON schema of a structured output
// (response_format.json_schema.schema, the Responses API's
// text.format.schema), the names and parameter schemas of the client's
// tools, and retrieved documents (vLLM's and llama.cpp's top-level
// documents, with a rerank's query). The request stage judges them as it
// judges the messages.
//
// A text is prose or fixed. Prose (a document, a schema's description,
// title or $comment) is free text: a redaction rewrites it in place, as a
// message's. A fixed text is a name or value something acts on: a
// schema's property names, enum and const values, defaults, examples,
// patterns and $refs, a tool's name. Rewritten, the schema would accept
// other output or refer to nothing, and a tool would be called by another
// name: a redaction there refuses the request instead (fixedRedacted), and
// a block blocks as anywhere.

// errFixedRedacted is the cause of the 400 of a redaction in a fixed text.
var errFixedRedacted = errors.New("guardrails: a redaction would change a schema's or tool's names or values")

// fixedRedacted is the 400 content_blocked of a redaction in a fixed text:
// the request cannot be sent redacted, and is not sent as it is.
func fixedRedacted() error {
	e := pipeline.Invalid(400, pipeline.CodeContentBlocked,
		"a guardrail's redaction would change a JSON schema's or a tool's names or values; the request was not sent")
	e.Err = errFixedRedacted
	return e
}

// visitSideTexts calls visit with each side text of body, a JSON object,
// in order, until it returns false; fixed marks a fixed text. Top-level
// and nested member names are matched without regard to case, and every
// member of a repeated name is visited: an upstream that decodes with Go's
// encoding/json matches names so, and one that keeps the last of two
// equal names reads the one gjson's Get would not.
func visitSideTexts(body []byte, visit func(v gjson.Result, fixed bool) bool) {
	jsonedit.Root(body).ForEach(func(k, v gjson.Result) bool {
		switch {
		case strings.EqualFold(k.Str, "response_format"):
			// {"type":"json_schema","json_schema":{"name","description","schema"}}
			return members(v, "json_schema", func(js gjson.Result) bool {
				return members(js, "description", func(d gjson.Result) bool { return d.Type != gjson.String || visit(d, false) }) &&
					members(js, "schema", func(s gjson.Result) bool { return walkSchema(s, false, visit) })
			})
		case strings.EqualFold(k.Str, "text"):
			// The Responses API's {"format":{"type":"json_schema","name","description","schema"}}.
			return members(v, "format", func(f gjson.Result) bool {
				return members(f, "description", func(d gjson.Result) bool { return d.Type != gjson.String || visit(d, false) }) &&
					members(f, "schema", func(s gjson.Result) bool { return walkSchema(s, false, visit) })
			})
		case strings.EqualFold(k.Str, "tools"):
			ok := true
			v.ForEach(func(_, t gjson.Result) bool { ok = visitTool(t, visit); return ok })
			return ok
		case strings.EqualFold(k.Str, "documents"):
			return walkStrings(v, visit)
		case strings.EqualFold(k.Str, "query"):
			return v.Type != gjson.String || visit(v, false)
		}
		return true
	})
}

// visitTool calls visit with the side texts of tool t: its name, its
// parameter schema and a custom tool's format (a grammar), in the chat
// form ({"function":{...}}, {"custom":{...}}) and the Responses form (at
// the top), and a chat custom tool's description. A function's
// description, and any tool's in the Responses form, is judged with the
// messages already (visitToolDescriptions, walkTexts).
func visitTool(t gjson.Result, visit func(v gjson.Result, fixed bool) bool) bool {
	if !t.IsObject() {
		return true
	}
	fn := func(f gjson.Result) bool {
		return members(f, "name", func(n gjson.Result) bool { return n.Type != gjson.String || visit(n, true) }) &&
			members(f, "parameters", func(s gjson.Result) bool { return walkSchema(s, false, visit) }) &&
			members(f, "format", func(s gjson.Result) bool { return walkSchema(s, true, visit) })
	}
	return fn(t) && members(t, "function", fn) &&
		members(t, "custom", func(c gjson.Result) bool {
			return fn(c) && members(c, "description", func(d gjson.Result) bool { return d.Type != gjson.String || visit(d, false) })
		})
}

// members calls f with the value of every member of obj named name
// (compared without regard to case) until it returns false; true when
// obj is not an object.
func members(obj gjson.Result, name string, f func(gjson.Result) bool) bool {
	if !obj.IsObject() {
		return true
	}
	ok := true
	obj.ForEach(func(k, v gjson.Result) bool {
		if strings.EqualFold(k.Str, name) {
			ok = f(v)
		}
		return ok
	})
	return ok
}

// walkSchema calls visit with every text of the JSON schema s, in order:
// every member name as fixed, a description, title or $comment as prose,
// and every other string as fixed (fixed also inside enum, const, default
// and examples, whose values are data however they are named); except
// JSON Schema's own words (schemaWord), which are the same in every
// schema. The depth is the body's, which ingress bounds (jsonvalid).
func walkSchema(s gjson.Result, fixed bool, visit func(v gjson.Result, fixed bool) bool) bool {
	switch {
	case s.Type == gjson.String:
		return schemaWord(s.Str) || visit(s, true)
	case s.IsArray():
		ok := true
		s.ForEach(func(_, item gjson.Result) bool { ok = walkSchema(item, fixed, visit); return ok })
		return ok
	case s.IsObject():
		ok := true
		s.ForEach(func(k, v gjson.Result) bool {
			if ok = schemaWord(k.Str) || visit(k, true); !ok {
				return false
			}
			switch {
			case !fixed && v.Type == gjson.String && isProse(k.Str):
				ok = visit(v, false)
			default:
				ok = walkSchema(v, fixed || isData(k.Str), visit)
			}
			return ok
		})
		return ok
	}
	return true
}

// schemaWord reports whether s is one of JSON Schema's keywords or type
// names: the structure of a schema, not the client's words. Judging each
// of them cost a typical tool schema most of its request stage.
func schemaWord(s string) bool {
	switch s {
	case "type", "properties", "required", "items", "enum", "const", "default", "examples",
		"description", "title", "additionalProperties", "anyOf", "oneOf", "allOf", "not",
		"$ref", "$defs", "definitions", "$schema", "$id", "$comment", "format", "pattern",
		"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
		"minLength", "maxLength", "minItems", "maxItems", "uniqueItems", "prefixItems",
		"minProperties", "maxProperties", "patternProperties", "propertyNames", "nullable", "strict",
		"object", "string", "number", "integer", "boolean", "array", "null":
		return true
	}
	return false
}

// isProse reports whether a schema keyword's string value is free text.
func isProse(keyword string) bool {
	return strings.EqualFold(keyword, "description") || strings.EqualFold(keyword, "title") || strings.EqualFold(keyword, "$comment")
}

// isData reports whether a schema keyword's value is data (instances,
// not schemas), whose member names are no keywords.
func isData(keyword string) bool {
	for _, k := range [...]string{"enum", "const", "default", "examples"} {
		if strings.EqualFold(keyword, k) {
			return true
		}
	}
	return false
}

// walkStrings calls visit with every string in v, as prose, in order:
// a document's text and its other fields (a title, a snippet) alike, as a
// chat template renders them.
func walkStrings(v gjson.Result, visit func(v gjson.Result, fixed bool) bool) bool {
	switch {
	case v.Type == gjson.String:
		return visit(v, false)
	case v.IsArray() || v.IsObject():
		ok := true
		v.ForEach(func(_, item gjson.Result) bool { ok = walkStrings(item, visit); return ok })
		return ok
	}
	return true
}
