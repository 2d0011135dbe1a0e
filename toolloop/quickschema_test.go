package toolloop

import (
	"testing"
)

// quickSchemas are schemas in the quick form's reach (and the builtins'),
// each with arguments the full validator accepts and rejects.
var quickSchemas = []string{
	builtins["calculator"].params,
	builtins["current_time"].params,
	`{"type":"object","properties":{}}`,
	`{"type":"object","properties":{"n":{"type":"integer"},"x":{"type":"number"},"b":{"type":"boolean"},"z":{"type":"null"},"o":{"type":"object"},"a":{"type":"array"},"any":{"description":"anything"}},"required":["n","b"]}`,
	`{"type":"object","title":"t","description":"d","properties":{"s":{"type":"string","title":"S"}},"required":["s"],"additionalProperties":true}`,
}

// The quick form covers the common tool schemas and nothing it cannot
// decide: any other keyword leaves the tool to the full validator.
func TestCompileQuick(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, schema string
		quick        bool
	}{
		{"calculator", builtins["calculator"].params, true},
		{"current_time", builtins["current_time"].params, true},
		{"write_todos", todosParams, false},
		{"agent", agentParams, true},
		{"no parameters", `{"type":"object","properties":{}}`, true},
		{"every type", quickSchemas[3], true},
		{"enum", `{"type":"object","properties":{"u":{"type":"string","enum":["c","f"]}}}`, false},
		{"pattern", `{"type":"object","properties":{"u":{"type":"string","pattern":"^a"}}}`, false},
		{"type list", `{"type":"object","properties":{"u":{"type":["string","null"]}}}`, false},
		{"nested properties", `{"type":"object","properties":{"o":{"type":"object","properties":{"d":{"type":"integer"}}}}}`, false},
		{"additionalProperties schema", `{"type":"object","additionalProperties":{"type":"string"}}`, false},
		{"required outside properties", `{"type":"object","properties":{},"required":["x"]}`, false},
		{"$ref", `{"type":"object","properties":{"x":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}}}`, false},
		{"not an object schema", `{"type":"string"}`, false},
		{"repeated property", `{"type":"object","properties":{"x":{"type":"string"},"x":{"type":"number"}}}`, false},
		{"repeated keyword", `{"type":"object","properties":{"x":{"type":"string","type":"number"}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := compileSchema(tc.schema); err != nil {
				t.Fatalf("the schema does not compile: %v", err)
			}
			if got := compileQuick(tc.schema) != nil; got != tc.quick {
				t.Fatalf("quick form %v, want %v", got, tc.quick)
			}
		})
	}
}

// The quick check accepts what the full validator accepts in the common
// cases (so they skip it) and leaves everything else to it.
func TestQuickValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, args string
		schema     int  // in quickSchemas
		quick      bool // the quick check accepts args
	}{
		{"calculator", `{"expression":"1+2"}`, 0, true},
		{"calculator, spaces", " {\"expression\" : \"1\"}\n", 0, true},
		{"calculator, missing", `{}`, 0, false},
		{"calculator, extra", `{"expression":"1","x":1}`, 0, false},
		{"calculator, number", `{"expression":1}`, 0, false},
		{"current_time, empty", `{}`, 1, true},
		{"current_time", `{"timezone":"Europe/Oslo"}`, 1, true},
		{"no parameters", `{}`, 2, true},
		{"no parameters, extra allowed", `{"x":[1,{"y":null}]}`, 2, true},
		{"array", `[]`, 2, false},
		{"not JSON", `{"x":}`, 2, false},
		{"trailing data", `{} {}`, 2, false},
		{"every type", `{"n":-12,"x":1.5e3,"b":false,"z":null,"o":{},"a":[1],"any":"s"}`, 3, true},
		{"integer written as a float", `{"n":1.0,"b":true}`, 3, false},
		{"required boolean missing", `{"n":1}`, 3, false},
		{"null for a number", `{"n":1,"b":true,"x":null}`, 3, false},
		{"open schema, unknown key", `{"s":"a","other":1}`, 4, true},
		{"repeated key, both valid", `{"expression":"1","expression":"2"}`, 0, true},
		{"repeated key, one invalid", `{"expression":"1","expression":2}`, 0, false},
		{"control character", "{\"expression\":\"a\x01\"}", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := quickSchemas[tc.schema]
			sch, err := compileSchema(s)
			if err != nil {
				t.Fatal(err)
			}
			q := compileQuick(s)
			if q == nil {
				t.Fatal("no quick form")
			}
			if got := q.valid([]byte(tc.args)); got != tc.quick {
				t.Fatalf("quick %v, want %v", got, tc.quick)
			}
			if full := validateArgs(sch, []byte(tc.args)); tc.quick && full != nil {
				t.Fatalf("the full validator refuses what the quick check accepts: %v", full)
			}
		})
	}
}
