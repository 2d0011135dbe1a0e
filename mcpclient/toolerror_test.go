package mcpclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/config"
)

// TestCallToolErrorMessage: a tool failure (isError) gives the model a
// message to act on even when the server put it only in the structured
// content, or gave none at all.
func TestCallToolErrorMessage(t *testing.T) {
	t.Parallel()
	obj := json.RawMessage(`{"type":"object"}`)
	s := mcp.NewServer(&mcp.Implementation{Name: "errs", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "structured", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{"error": "quota exceeded"}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "silent", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true}, nil
	})
	s.AddTool(&mcp.Tool{Name: "text", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "disk on fire"}},
			StructuredContent: map[string]any{"code": 7}}, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer srv.Close()
	m := Start(Options{Servers: defaulted(config.MCPServer{Name: "errs", URL: srv.URL}), Logger: testLogger(t)})
	defer m.Close()
	if tools := toolNames(m); tools != "silent,structured,text" {
		t.Fatalf("tools %q (status %v)", tools, m.Status())
	}
	tests := []struct{ name, want string }{
		{"structured", `{"error":"quota exceeded"}`},
		{"silent", string(msgNoMessage)},
		{"text", "disk on fire"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, isErr, err := m.Call(context.Background(), tc.name, nil)
			if err != nil || !isErr || string(data) != tc.want {
				t.Errorf("%q isErr=%v err=%v, want %q", data, isErr, err, tc.want)
			}
		})
	}
}
