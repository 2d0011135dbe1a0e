package config

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

var durationType = reflect.TypeFor[Duration]()

// typeErrors reports every key of b whose value is not of the type its
// setting takes, by the key's name and line (the decoder names a Go
// struct field, or no key at all). A duration written as a bare number
// (write_timeout = 5) is one: the decoder would take it for nanoseconds,
// as a Duration is a count of them, where an operator means seconds and
// gets a timeout that fails every call. b that is not TOML is left to the
// strict decode, which says where.
func typeErrors(b []byte) error {
	var raw map[string]any
	if toml.Unmarshal(b, &raw) != nil {
		return nil
	}
	var errs []error
	walkTypes(reflect.TypeFor[Config](), raw, "", &errs)
	return errors.Join(errs...)
}

// walkTypes checks v, the decoded TOML of a setting of type t at path.
func walkTypes(t reflect.Type, v any, path string, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(want string) {
		*errs = append(*errs, &KeyError{Key: path, Msg: "want " + want + ", got " + tomlKind(v)})
	}
	if t == durationType {
		if _, ok := v.(string); !ok && v != any(int64(0)) { // 0: the default, or off, as "0s"
			*errs = append(*errs, &KeyError{Key: path, Msg: "a duration is a string with a unit, such as \"30s\" or \"500ms\" (a bare number would be read as nanoseconds)"})
		}
		return
	}
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			bad("a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			bad("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if _, ok := v.(int64); !ok {
			bad("a whole number")
		}
	case reflect.Float32, reflect.Float64:
		switch v.(type) {
		case int64, float64:
		default:
			bad("a number")
		}
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			bad("a table")
			return
		}
		miscased(t, m, path, errs)
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" {
				continue
			}
			if fv, ok := m[name]; ok {
				walkTypes(f.Type, fv, join(path, name), errs)
			}
		}
	case reflect.Slice, reflect.Array:
		list, ok := v.([]any)
		if !ok {
			bad("a list")
			return
		}
		for i, e := range list {
			walkTypes(t.Elem(), e, path+"["+strconv.Itoa(i)+"]", errs)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			bad("a table")
			return
		}
		for k, e := range m {
			walkTypes(t.Elem(), e, join(path, k), errs)
		}
	}
}

// miscased reports each key of m, a table of settings of type t, that
// names a setting in another case than its own ("Models", "[[Keys]]"). The
// decoder matches names without regard to case, so such a key would
// silently replace the setting of the right spelling written beside it (a
// second [[Keys]] list dropped the first's keys, a Models list widened a
// policy's models), where a reader of the file sees two settings.
func miscased(t reflect.Type, m map[string]any, path string, errs *[]error) {
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
			if name == k {
				break
			}
			if name != "" && name != "-" && strings.EqualFold(name, k) {
				*errs = append(*errs, &KeyError{Key: join(path, k), Msg: "setting names are lower case: write " + strconv.Quote(name)})
				break
			}
		}
	}
}

// tomlKind names the kind of a decoded TOML value.
func tomlKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}
