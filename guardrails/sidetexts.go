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
// tools and of chat's legacy functions (with a function's description),
// retrieved documents (vLLM's and llama.cpp's top-level documents, with a
// rerank's query), vLLM's chat_template_kwargs, whose values a chat
// template may print (its documents, say), and vLLM's chat_template, the
// template itself, whose literal text the model reads verbatim. The
// request stage judges them as it judges the messages.
//
// A text is prose or fixed. Prose (a document, a schema's description,
// title or $comment) is free text: a redaction rewrites it in place, as a
// message's. A fixed text is a name or value something acts on: a
// schema's property names, enum and const values, defaults, examples,
// patterns and $refs, a tool's name, the member names of a document or of
// chat_template_kwargs, a chat_template. Rewritten, the schema would
// accept other output or refer to nothing, a tool would be called by
// another name, a template would find no variable or no longer parse (a
// redaction's replacement inside a {{ ... }} or {% ... %} tag): a
// redaction there refuses the request instead (fixedRedacted), and a
// block blocks as anywhere.

// errFixedRedacted is the cause of the 400 of a redaction in a fixed text.
var errFixedRedacted = errors.New("guardrails: a redaction would change a schema's, tool's or template's names or values")

// fixedRedacted is the 400 content_blocked of a redaction in a fixed text:
// the request cannot be sent redacted, and is not sent as it is.
func fixedRedacted() error {
	e := pipeline.Invalid(400, pipeline.CodeContentBlocked,
		"a guardrail's redaction would change a JSON schema's, a tool's or a chat template's names or values; the request was not sent")
	e.Err = errFixedRedacted
	return e
}

// maxTextDepth is how many arrays and objects deep below a top-level
// member the walks of the texts guardrails judge go (side texts, and a
// pass-through body's texts: walkTexts). Each level reads the bytes below
// it again: walked to the body's own nesting limit (jsonvalid's 1000), a
// body of 1 MiB nested 999 deep cost half a second of CPU per request. A
// text deeper than this is not judged: the request is refused (tooDeep).
// A tool's parameter schema reaches it at about 14 levels of nested
// properties.
const maxTextDepth = 32

// errTooDeep is the cause of the 400 of a text nested past maxTextDepth.
var errTooDeep = errors.New("guardrails: a text is nested too deep to judge")

// tooDeep is the 400 of a request whose member param holds a text nested
// past maxTextDepth: the guardrails cannot judge it, so it is not sent.
func tooDeep(param string) error {
	e := pipeline.BadRequest(param,
		"'%s' nests arrays and objects more than %d levels deep, deeper than the gateway's guardrails judge texts; the request was not sent",
		param, maxTextDepth)
	e.Err = errTooDeep
	return e
}

// sideWalk is one walk of a body's side texts: visit, and whether the walk
// met a container past maxTextDepth.
type sideWalk struct {
	visit func(v gjson.Result, fixed bool) bool
	deep  bool
}

// container reports whether v is an array or an object at depth, and
// notes a walk too deep when depth is past maxTextDepth.
func (w *sideWalk) container(v gjson.Result, depth int) bool {
	if !v.IsArray() && !v.IsObject() {
		return false
	}
	if depth >= maxTextDepth {
		w.deep = true
	}
	return true
}

// visitSideTexts calls visit with each side text of body, a JSON object,
// in order, until it returns false; fixed marks a fixed text. Top-level
// and nested member names are matched without regard to case, and every
// member of a repeated name is visited: an upstream that decodes with Go's
// encoding/json matches names so, and one that keeps the last of two
// equal names reads the one gjson's Get would not. It returns tooDeep when
// a side text is nested past maxTextDepth (the texts before it were
// visited).
func visitSideTexts(body []byte, visit func(v gjson.Result, fixed bool) bool) error {
	w := &sideWalk{visit: visit}
	var param string
	jsonedit.Root(body).ForEach(func(k, v gjson.Result) bool {
		param = k.Str
		switch {
		case strings.EqualFold(k.Str, "response_format"):
			// {"type":"json_schema","json_schema":{"name","description","schema"}}
			return members(v, "json_schema", func(js gjson.Result) bool {
				return members(js, "description", func(d gjson.Result) bool { return d.Type != gjson.String || visit(d, false) }) &&
					members(js, "schema", func(s gjson.Result) bool { return w.schema(s, false, 2) })
			})
		case strings.EqualFold(k.Str, "text"):
			// The Responses API's {"format":{"type":"json_schema","name","description","schema"}}.
			return members(v, "format", func(f gjson.Result) bool {
				return members(f, "description", func(d gjson.Result) bool { return d.Type != gjson.String || visit(d, false) }) &&
					members(f, "schema", func(s gjson.Result) bool { return w.schema(s, false, 2) })
			})
		case strings.EqualFold(k.Str, "tools"):
			ok := true
			v.ForEach(func(_, t gjson.Result) bool { ok = w.tool(t); return ok })
			return ok
		case strings.EqualFold(k.Str, "functions"):
			// Chat's legacy function calling: [{"name","description","parameters"}].
			ok := true
			v.ForEach(func(_, f gjson.Result) bool {
				ok = !f.IsObject() || (w.function(f, 1) &&
					members(f, "description", func(d gjson.Result) bool { return d.Type != gjson.String || visit(d, false) }))
				return ok
			})
			return ok
		case strings.EqualFold(k.Str, "documents"), strings.EqualFold(k.Str, "chat_template_kwargs"):
			return w.strings(v, 0)
		case strings.EqualFold(k.Str, "chat_template"):
			// vLLM's request-level Jinja template: the model reads its
			// literal text; a redaction could break its syntax.
			return v.Type != gjson.String || visit(v, true)
		case strings.EqualFold(k.Str, "query"):
			return v.Type != gjson.String || visit(v, false)
		case strings.EqualFold(k.Str, "prediction"):
			// Predicted output: {"type":"content","content": a string or
			// text parts}, text the model reads and largely repeats.
			return members(v, "content", func(c gjson.Result) bool {
				if c.Type == gjson.String {
					return visit(c, false)
				}
				ok := true
				c.ForEach(func(_, p gjson.Result) bool {
					ok = members(p, "text", func(t gjson.Result) bool { return t.Type != gjson.String || visit(t, false) })
					return ok
				})
				return ok
			})
		}
		return true
	})
	if w.deep {
		return tooDeep(param)
	}
	return nil
}

// tool visits the side texts of tool t: its name, its parameter schema
// and a custom tool's format (a grammar), in the chat form
// ({"function":{...}}, {"custom":{...}}) and the Responses form (at the
// top), and a chat custom tool's description. A function's description,
// and any tool's in the Responses form, is judged with the messages
// already (visitToolDescriptions, walkTexts).
func (w *sideWalk) tool(t gjson.Result) bool {
	if !t.IsObject() {
		return true
	}
	return w.function(t, 1) && members(t, "function", func(f gjson.Result) bool { return w.function(f, 2) }) &&
		members(t, "custom", func(c gjson.Result) bool {
			return w.function(c, 2) && members(c, "description", func(d gjson.Result) bool { return d.Type != gjson.String || w.visit(d, false) })
		})
}

// function visits the name, parameter schema and format of f, a function
// or tool at depth.
func (w *sideWalk) function(f gjson.Result, depth int) bool {
	return members(f, "name", func(n gjson.Result) bool { return n.Type != gjson.String || w.visit(n, true) }) &&
		members(f, "parameters", func(s gjson.Result) bool { return w.schema(s, false, depth+1) }) &&
		members(f, "format", func(s gjson.Result) bool { return w.schema(s, true, depth+1) })
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

// schema visits every text of the JSON schema s at depth, in order: every
// member name as fixed, a description, title or $comment as prose, and
// every other string as fixed (fixed also inside enum, const, default and
// examples, whose values are data however they are named); except JSON
// Schema's own words (schemaWord), which are the same in every schema. It
// stops at maxTextDepth (w.deep).
func (w *sideWalk) schema(s gjson.Result, fixed bool, depth int) bool {
	switch {
	case s.Type == gjson.String:
		return schemaWord(s.Str) || w.visit(s, true)
	case !w.container(s, depth):
		return true
	case w.deep:
		return false
	case s.IsArray():
		ok := true
		s.ForEach(func(_, item gjson.Result) bool { ok = w.schema(item, fixed, depth+1); return ok })
		return ok
	}
	ok := true
	s.ForEach(func(k, v gjson.Result) bool {
		if ok = schemaWord(k.Str) || w.visit(k, true); !ok {
			return false
		}
		switch {
		case !fixed && v.Type == gjson.String && isProse(k.Str):
			ok = w.visit(v, false)
		default:
			ok = w.schema(v, fixed || isData(k.Str), depth+1)
		}
		return ok
	})
	return ok
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

// strings visits every string in v at depth, in order: a value as prose
// (a document's text and its other fields, a title, a snippet, alike, as a
// chat template renders them), a member name as fixed (a template prints
// a document's names too, and looks its variables up by them). It stops at
// maxTextDepth (w.deep).
func (w *sideWalk) strings(v gjson.Result, depth int) bool {
	switch {
	case v.Type == gjson.String:
		return w.visit(v, false)
	case !w.container(v, depth):
		return true
	case w.deep:
		return false
	}
	ok := true
	v.ForEach(func(k, item gjson.Result) bool {
		if k.Type == gjson.String {
			if ok = w.visit(k, true); !ok {
				return false
			}
		}
		ok = w.strings(item, depth+1)
		return ok
	})
	return ok
}
