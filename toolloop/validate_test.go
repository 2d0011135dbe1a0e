package toolloop

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/llmgw/gateway/jsonvalid"
)

// A schema error names the deepest failing property as a JSON pointer: the
// missing or unexpected property itself, not the object holding it.
func TestValidateArgsNamesFailingProperty(t *testing.T) {
	t.Parallel()
	sch, err := compileSchema(`{"type":"object","properties":{
		"city":{"type":"string"},
		"unit":{"type":"string","enum":["c","f"]},
		"opts":{"type":"object","properties":{"days":{"type":"integer","minimum":1},"a/b~c":{"type":"string"}},"required":["days"],"additionalProperties":false}},
		"required":["city","unit"],"additionalProperties":false}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, args, field, msg string
	}{
		{"missing property", `{"city":"Oslo"}`, "/unit", "unit"},
		{"wrong enum value", `{"city":"Oslo","unit":"k"}`, "/unit", "one of"},
		{"wrong type", `{"city":"Oslo","unit":5}`, "/unit", "string"},
		{"unexpected property", `{"city":"Oslo","unit":"c","zz":1}`, "/zz", "zz"},
		{"missing nested property", `{"city":"Oslo","unit":"c","opts":{}}`, "/opts/days", "days"},
		{"deepest of several", `{"city":"Oslo","opts":{"days":0}}`, "/opts/days", "minimum"},
		{"pointer escaping", `{"city":"Oslo","unit":"c","opts":{"days":1,"a/b~c":1}}`, "/opts/a~1b~0c", "string"},
		{"unexpected nested property", `{"city":"Oslo","unit":"c","opts":{"days":1,"x/y":1}}`, "/opts/x~1y", "x/y"},
		{"not an object", `[]`, "/", "object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var te *ToolError
			if err := validateArgs(sch, []byte(tc.args)); !errors.As(err, &te) {
				t.Fatalf("err %v", err)
			}
			if te.Kind != "invalid_arguments" || te.Field != tc.field || !strings.Contains(te.Message, tc.msg) {
				t.Fatalf("kind %q field %q (want %q) message %q", te.Kind, te.Field, tc.field, te.Message)
			}
		})
	}
}

// Tool schemas may come from MCP servers: a $ref never reads local files.
func TestSchemaRefsNeverReadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "s.json")
	if err := os.WriteFile(secret, []byte(`{"const":"SECRET-FROM-DISK"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	schema := `{"type":"object","properties":{"x":{"$ref":"file://` + secret + `"}}}`
	if _, err := compileSchema(schema); err == nil {
		t.Fatal("a schema with a file $ref compiled: local files are readable through tool schemas")
	}
}

// argsInstance gives the schema validator what the library's own reader
// gives it, for every input: the same instance, or an error for both.
func FuzzArgsInstance(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `{"n":1.50e+3,"s":"x\"y\n","b":[true,false,null]}`, `[1,{"k":[]}]`,
		`"\u00e9\ud800"`, "{\"bad\xff\":1}", `{"\u0071":1,"q":2}`, "{\"q\":\"\xff\",\"q\":1}", `{"a":`, `1 2`, ` 7 `, `-0.0`, `{"a":{"b":{"c":[[[]]]}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := argsInstance(b)
		want, werr := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		var dup *repeatedKeyError
		switch {
		case errors.As(gerr, &dup):
			return // refused where the library keeps the last value
		case errors.Is(gerr, errInvalidArgs) && werr == nil:
			if bytes.Count(b, []byte("["))+bytes.Count(b, []byte("{")) <= jsonvalid.MaxDepth {
				t.Fatalf("%q: refused, not deep", b)
			}
			return // deeper than the gateway takes
		}
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("%q: error %v, library's %v", b, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: instance %#v, library's %#v", b, got, want)
		}
	})
}

// Arguments deeper than the gateway takes JSON, or repeating a key in one
// object, are invalid arguments: the schema would judge one value of a
// repeated key and the tool might read the other.
func TestValidateArgsRepeatedKeyAndDepth(t *testing.T) {
	t.Parallel()
	sch, err := compileSchema(`{"type":"object","properties":{"q":{"type":"string","enum":["safe"]}},"required":["q"]}`)
	if err != nil {
		t.Fatal(err)
	}
	deep := `{"q":"safe","x":` + strings.Repeat("[", 1500) + strings.Repeat("]", 1500) + `}`
	for args, refused := range map[string]bool{
		`{"q":"evil","q":"safe"}`:                        true,
		`{"\u0071":"evil","q":"safe"}`:                   true,
		"{\"q\":\"safe\",\"x\":{\"\xff\":1,\"\xfe\":2}}": true,
		`{"q":"safe","x":{"a":1,"a":1}}`:                 true,
		deep:                                             true,
		`{"q":"safe","Q":"evil"}`:                        true,
		`{"Q":"evil","q":"safe"}`:                        true,
		`{"q":"safe","x":{"Ab":1,"aB":2}}`:               true,
		`{"q":"safe","x":{"\u212a":1,"k":2}}`:            true, // the Kelvin sign folds to k
		"{\"q\":\"safe\",\"x\":{\"\u212a\":1,\"K\":2}}":  true,
		`{"q":"safe","x":{"Ab":1,"ac":2}}`:               false,
		`{"q":"safe","x":{"q":1}}`:                       false,
		`{"q":"safe","x":[{"a":1},{"a":2}]}`:             false,
	} {
		err := validateArgs(sch, []byte(args))
		var te *ToolError
		if refused != (err != nil) || err != nil && (!errors.As(err, &te) || te.Kind != "invalid_arguments") {
			t.Errorf("%.60q: %v, want refused %v", args, err, refused)
		}
		if refused && args != deep && te != nil && !strings.Contains(te.Message, "repeat the key") {
			t.Errorf("%.60q: %q does not say which key repeats", args, te.Message)
		}
	}
}

// A deep argument list is an invalid-arguments result, not a crash.
func TestValidateArgsDeep(t *testing.T) {
	t.Parallel()
	sch, err := compileSchema(`{"type":"object"}`)
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("[", 2<<20) + strings.Repeat("]", 2<<20)
	var te *ToolError
	if err := validateArgs(sch, []byte(deep)); !errors.As(err, &te) || te.Kind != "invalid_arguments" {
		t.Fatalf("err %v", err)
	}
}

func BenchmarkValidateArgs(b *testing.B) {
	sch, err := compileSchema(`{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}`)
	if err != nil {
		b.Fatal(err)
	}
	args := []byte(`{"expression":"2*(3+4)"}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := validateArgs(sch, args); err != nil {
			b.Fatal(err)
		}
	}
}
