package mcpclient

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
)

// chattyServerEnv makes the test binary a stdio MCP server that writes
// lines that are not JSON-RPC messages to its stdout, as servers that log
// to stdout do: a banner and a JSON log line before the handshake, and
// progress and log lines before each answer of its "chatty" tool.
const chattyServerEnv = "LLMGW_TEST_CHATTY_MCP_SERVER"

func chattyServer() {
	fmt.Println("Weather MCP server running on stdio")
	fmt.Println(`{"level":"info","msg":"listening on stdio"}`)
	stdioServer("chatty", []string{"chatty"}, func(tool string, reply map[string]any) {
		fmt.Println("[info] handling", tool, "...")
		fmt.Println("")
		fmt.Println(`{"level":"debug","tool":"` + tool + `"}`)
		reply["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": "sunny"}}}
	}, nil)
}

// TestStdioServerThatLogsToStdout: lines of a stdio server's stdout that
// are not JSON are passed over, as the official TypeScript and Python
// clients pass over them: the server connects, and its calls are answered
// at once, without a broken connection.
func TestStdioServerThatLogsToStdout(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "chatty-stdio", Command: exe, Env: map[string]string{chattyServerEnv: "1"}}),
		Logger:  testLogger(t),
	})
	defer m.Close()
	waitFor(t, "the chatty server's tools", 10*time.Second, nil, func() bool { return toolNames(m) == "chatty" })
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		data, isErr, err := m.Call(ctx, "chatty", nil)
		cancel()
		if err != nil || isErr || string(data) != "sunny" {
			t.Fatalf("call %d: %q isErr=%v err=%v", i, data, isErr, err)
		}
	}
}
