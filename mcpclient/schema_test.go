package mcpclient

import (
	"os"
	"testing"

	"github.com/llmgw/gateway/config"
)

// oddSchemasServerEnv makes the test binary a stdio MCP server whose tools
// have input schemas MCP does not allow, or leaves the type out.
const oddSchemasServerEnv = "LLMGW_TEST_ODD_SCHEMAS_MCP_SERVER"

func oddSchemasServer() {
	toolSchemas = map[string]any{
		"boolean": true,
		"string":  map[string]any{"type": "string"},
		"untyped": map[string]any{},
		"typed":   map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}},
	}
	stdioServer("odd", []string{"boolean", "string", "untyped", "typed"}, nil, nil)
}

// TestOddInputSchemas: a tool whose input schema is not an object schema
// is not offered (every upstream refuses a request with such a function,
// so one tool would break every request), and an object schema without
// its type gets "type":"object".
func TestOddInputSchemas(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "odd", Command: exe, Env: map[string]string{oddSchemasServerEnv: "1"}}),
		Logger:  testLogger(t),
	})
	defer m.Close()
	if tools := toolNames(m); tools != "typed,untyped" {
		t.Fatalf("tools %q (status %v)", tools, m.Status())
	}
	tests := []struct{ name, params string }{
		{"untyped", `{"type":"object"}`},
		{"typed", `{"properties":{"x":{"type":"string"}},"type":"object"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.Lookup(tc.name).Parameters; got != tc.params {
				t.Errorf("parameters %s, want %s", got, tc.params)
			}
		})
	}
}
