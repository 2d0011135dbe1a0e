package toolloop

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
