package toolloop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/llmgw/gateway/internal/fold"
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
	var dup *repeatedKeyError
	switch {
	case errors.As(err, &dup):
		return &ToolError{Kind: "invalid_arguments", Message: "the arguments repeat the key " + strconv.Quote(string(*dup)) + "; send each key once"}
	case err != nil:
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
//
// Arguments nested deeper than jsonvalid allows are not JSON to the
// gateway, and a key repeated in one object is refused (repeatedKeyError):
// the validator would judge one of its values and the tool might read the
// other, so that a value the schema refuses would reach the tool.
func argsInstance(args []byte) (any, error) {
	if !jsonvalid.Bytes(args) {
		return nil, errInvalidArgs
	}
	v := view(args)
	if !utf8.Valid(args) || bytes.Contains(args, unicodeEscape) {
		if k, ok := repeatedKey(v); ok {
			e := repeatedKeyError(k)
			return nil, &e
		}
		return jsonschema.UnmarshalJSON(bytes.NewReader(args))
	}
	var dup *repeatedKeyError
	inst := instanceOf(v, &dup)
	if dup != nil {
		return nil, dup
	}
	return inst, nil
}

var errInvalidArgs = errors.New("toolloop: tool arguments are not JSON")

// repeatedKeyError names a key an object of the arguments repeats.
type repeatedKeyError string

func (e *repeatedKeyError) Error() string {
	return "toolloop: the arguments repeat the key " + string(*e)
}

// repeatedKey finds a key that an object in v repeats, comparing keys as
// the schema validator's reader decodes them (each byte of invalid UTF-8
// as U+FFFD).
func repeatedKey(v gjson.Result) (string, bool) {
	var found string
	dup := false
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		if v.IsArray() {
			v.ForEach(func(_, e gjson.Result) bool {
				walk(e)
				return !dup
			})
			return
		}
		if !v.IsObject() {
			return
		}
		seen := map[string]bool{}
		v.ForEach(func(k, e gjson.Result) bool {
			key := decodedKey(k.Str)
			folded := fold.Key(key)
			if seen[folded] {
				found, dup = key, true
				return false
			}
			seen[folded] = true
			walk(e)
			return !dup
		})
	}
	walk(v)
	return found, dup
}

// decodedKey is s with each byte of invalid UTF-8 replaced by U+FFFD, as
// encoding/json reads a string.
func decodedKey(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // an invalid byte ranges as U+FFFD, one byte at a time
	}
	return b.String()
}

var unicodeEscape = []byte(`\u`)

// instanceOf converts one valid JSON value found by gjson; a repeated key
// of an object is set in *dup (the first found).
func instanceOf(v gjson.Result, dup **repeatedKeyError) any {
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
			a = append(a, instanceOf(e, dup))
			return true
		})
		return a
	}
	m := map[string]any{}
	plain := true // every key ASCII without capitals: none can fold into another
	v.ForEach(func(k, e gjson.Result) bool {
		if _, ok := m[k.Str]; ok && *dup == nil {
			e := repeatedKeyError(k.Str)
			*dup = &e
		}
		plain = plain && fold.Plain(k.Str)
		m[k.Str] = instanceOf(e, dup)
		return true
	})
	if !plain && *dup == nil {
		if k, ok := foldedTwice(m); ok {
			e := repeatedKeyError(k)
			*dup = &e
		}
	}
	return m
}

// A key that differs from another of its object only in case is a repeated
// key too: a tool that reads its arguments with encoding/json (Go's
// default) matches keys without regard to case, so {"q":"safe","Q":"evil"}
// would pass a schema's check on "q" and reach the tool as "evil".

// foldedTwice returns a key of m whose fold another key of m shares.
func foldedTwice(m map[string]any) (string, bool) {
	seen := make(map[string]struct{}, len(m))
	for k := range m {
		f := fold.Key(k)
		if _, ok := seen[f]; ok {
			return k, true
		}
		seen[f] = struct{}{}
	}
	return "", false
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
