package toolloop

import (
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// quickSchema is the shape most tool schemas have: an object whose
// properties each allow one JSON type (or any), some of them required, and
// maybe no others. It checks arguments without building a JSON instance;
// it only ever answers "certainly valid". Anything else, including every
// invalid argument, goes to the full validator, which words the error. Built
// once per tool (compileQuick); immutable.
type quickSchema struct {
	props    []quickProp
	required uint64 // bit i: props[i] is required
	closed   bool   // additionalProperties false
	nested   bool   // a property may hold an object or array (see valid)
}

const maxQuickNested = 10000

type quickProp struct {
	name string
	typ  quickType
}

type quickType uint8

const (
	qAny quickType = iota
	qString
	qNumber
	qInteger
	qBoolean
	qNull
	qObject
	qArray
)

var quickTypes = map[string]quickType{
	"string": qString, "number": qNumber, "integer": qInteger, "boolean": qBoolean,
	"null": qNull, "object": qObject, "array": qArray,
}

// compileQuick returns the quick form of params (a schema that compiled),
// or nil when the schema uses any keyword beyond type, properties,
// required, additionalProperties (a boolean) and annotations.
func compileQuick(params string) *quickSchema {
	root := gjson.Parse(params)
	if !root.IsObject() || !uniqueKeys(root) {
		return nil
	}
	q := &quickSchema{}
	ok := true
	var required gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			ok = v.Type == gjson.String && v.Str == "object"
		case "properties":
			ok = v.IsObject() && uniqueKeys(v) && q.readProps(v)
		case "required":
			ok, required = v.IsArray(), v
		case "additionalProperties":
			ok = v.IsBool()
			q.closed = v.Type == gjson.False
		case "description", "title":
		default:
			ok = false
		}
		return ok
	})
	if !ok || root.Get("type").Str != "object" {
		return nil
	}
	required.ForEach(func(_, v gjson.Result) bool {
		i := q.index(v.Str)
		ok = v.Type == gjson.String && i >= 0
		if ok {
			q.required |= 1 << i
		}
		return ok
	})
	if !ok {
		return nil
	}
	return q
}

// readProps reads properties, each a schema of at most one type keyword
// and annotations.
func (q *quickSchema) readProps(props gjson.Result) bool {
	ok := true
	props.ForEach(func(k, v gjson.Result) bool {
		if len(q.props) == 64 || !v.IsObject() || !uniqueKeys(v) || !utf8.ValidString(k.Str) {
			ok = false
			return false
		}
		p := quickProp{name: k.Str}
		v.ForEach(func(kk, vv gjson.Result) bool {
			switch kk.Str {
			case "type":
				t, known := quickTypes[vv.Str]
				ok, p.typ = known && vv.Type == gjson.String, t
			case "description", "title":
			default:
				ok = false
			}
			return ok
		})
		q.props = append(q.props, p)
		q.nested = q.nested || p.typ == qAny || p.typ == qObject || p.typ == qArray
		return ok
	})
	return ok
}

// uniqueKeys reports whether no key of object o repeats (a decoder keeps
// the last, gjson the first: the quick form must not depend on which).
func uniqueKeys(o gjson.Result) bool {
	var keys []string
	dup := false
	o.ForEach(func(k, _ gjson.Result) bool {
		for _, s := range keys {
			if s == k.Str {
				dup = true
				return false
			}
		}
		keys = append(keys, k.Str)
		return true
	})
	return !dup
}

func (q *quickSchema) index(name string) int {
	for i := range q.props {
		if q.props[i].name == name {
			return i
		}
	}
	return -1
}

// valid reports whether args certainly satisfy the schema. false means
// "ask the full validator", not "invalid".
func (q *quickSchema) valid(args []byte) bool {
	// The decoder behind the full validator refuses nesting deeper than
	// 10000; gjson has no such limit. Arguments that short cannot nest that
	// deep, longer ones with nested values are left to the full validator.
	if q.nested && len(args) >= maxQuickNested || !gjson.ValidBytes(args) {
		return false
	}
	r := gjson.ParseBytes(args)
	if !r.IsObject() {
		return false
	}
	var seen uint64
	ok := true
	r.ForEach(func(k, v gjson.Result) bool {
		i := q.index(k.Str)
		switch {
		case i < 0:
			ok = !q.closed && utf8.ValidString(k.Str)
		case !q.props[i].typ.accepts(v):
			ok = false
		default:
			seen |= 1 << i
		}
		return ok
	})
	return ok && seen&q.required == q.required
}

func (t quickType) accepts(v gjson.Result) bool {
	switch t {
	case qAny:
		return true
	case qString:
		return v.Type == gjson.String
	case qNumber:
		return v.Type == gjson.Number
	case qInteger:
		// Only the plain form: 1.0 and 1e2 are integers too, but the full
		// validator decides those.
		return v.Type == gjson.Number && !strings.ContainsAny(v.Raw, ".eE")
	case qBoolean:
		return v.Type == gjson.True || v.Type == gjson.False
	case qNull:
		return v.Type == gjson.Null
	case qObject:
		return v.IsObject()
	case qArray:
		return v.IsArray()
	}
	return false
}
