package toolloop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// validateMW checks the arguments against the tool's JSON schema and tells
// the model which field is wrong.
func (l *Loop) validateMW(next pipeline.ToolHandler) pipeline.ToolHandler {
	return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		t := l.lookup(ctx, c.Name)
		if t == nil {
			return next.CallTool(ctx, c)
		}
		if len(bytes.TrimSpace(c.Arguments)) == 0 {
			cc := *c
			cc.Arguments = []byte("{}")
			c = &cc
		}
		if err := validateArgs(t.schema, c.Arguments); err != nil {
			return l.errResult(c, err), nil
		}
		return next.CallTool(ctx, c)
	})
}

func validateArgs(sch *jsonschema.Schema, args []byte) error {
	inst, err := argsInstance(args)
	if err != nil {
		return &ToolError{Kind: "invalid_arguments", Message: "the arguments are not valid JSON; send one JSON object"}
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ToolError{Kind: "invalid_arguments", Message: "the arguments do not match the tool's schema"}
	}
	var msgs []string
	var field []string
	found := false
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			// The deepest failing property: the one the model must fix.
			if p := failingPath(e); !found || len(p) > len(field) {
				field, found = p, true
			}
			msgs = append(msgs, e.Error()) // "at '/field': what is wrong"
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(msgs) > 5 {
		msgs = msgs[:5]
	}
	return &ToolError{Kind: "invalid_arguments", Field: jsonPointer(field),
		Message: "invalid arguments: " + strings.Join(msgs, "; ") + ". Fix them and call the tool again."}
}

// argsInstance reads args as the schema validator's instance: what
// jsonschema.UnmarshalJSON returns (objects as map[string]any, arrays as
// []any, numbers as json.Number), without its encoding/json decoder, which
// took a tenth of a tool round's CPU. Arguments whose strings encoding/json
// would rewrite (invalid UTF-8, \u escapes, which may hold lone
// surrogates) go through the library's own reader, so both give the same
// instance for every input (FuzzArgsInstance). The instance's strings may
// be views of args (view): validateArgs uses it, and the errors that name
// its values, only while args is unchanged.
func argsInstance(args []byte) (any, error) {
	if !jsonvalid.Bytes(args) || !utf8.Valid(args) || bytes.Contains(args, unicodeEscape) {
		return jsonschema.UnmarshalJSON(bytes.NewReader(args))
	}
	return instanceOf(view(args)), nil
}

var unicodeEscape = []byte(`\u`)

// instanceOf converts one valid JSON value found by gjson.
func instanceOf(v gjson.Result) any {
	switch v.Type {
	case gjson.Null:
		return nil
	case gjson.False:
		return false
	case gjson.True:
		return true
	case gjson.Number:
		return json.Number(v.Raw)
	case gjson.String:
		return v.Str
	}
	if v.IsArray() {
		a := []any{}
		v.ForEach(func(_, e gjson.Result) bool {
			a = append(a, instanceOf(e))
			return true
		})
		return a
	}
	m := map[string]any{}
	v.ForEach(func(k, e gjson.Result) bool {
		m[k.Str] = instanceOf(e) // a repeated key: the last one, as encoding/json
		return true
	})
	return m
}

// failingPath returns the path of the property a leaf validation error is
// about: its instance location, plus the property it names when the error
// is reported on the object holding it (a missing or unexpected property).
func failingPath(e *jsonschema.ValidationError) []string {
	var prop string
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		prop = first(k.Missing)
	case *kind.DependentRequired:
		prop = first(k.Missing)
	case *kind.Dependency:
		prop = first(k.Missing)
	case *kind.AdditionalProperties:
		prop = first(k.Properties)
	case *kind.PropertyNames:
		prop = k.Property
	}
	loc := e.InstanceLocation
	if prop != "" {
		loc = append(loc[:len(loc):len(loc)], prop)
	}
	return loc
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// jsonPointer renders tokens as an RFC 6901 pointer; the whole document is
// "/" (the field of an error about the arguments as a whole).
func jsonPointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
