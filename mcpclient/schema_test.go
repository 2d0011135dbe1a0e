package mcpclient

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"

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
	toolDescriptions = map[string]string{"typed": "Ré" + strings.Repeat("é", 3000)}
	stdioServer("odd", []string{"boolean", "string", "untyped", "typed"}, nil, nil)
}

// toolDescriptions are the descriptions stdioServer lists its tools with.
var toolDescriptions map[string]string

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
	// A description over OpenAI's 1024 characters (which fails every
	// request offering the tool) is cut, at a character's start.
	if d := m.Lookup("typed").Description; len(d) > config.MaxToolDescription || len(d) < config.MaxToolDescription-1 ||
		!utf8.ValidString(d) || !strings.HasPrefix(d, "Réé") {
		t.Errorf("description of %d bytes (valid UTF-8 %v): %.20q", len(d), utf8.ValidString(d), d)
	}
}
