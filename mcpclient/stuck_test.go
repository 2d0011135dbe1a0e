package mcpclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
)

// stuckServerEnv makes the test binary a stdio MCP server that answers the
// handshake and tools/list, then stops reading its stdin for good.
const stuckServerEnv = "LLMGW_TEST_STUCK_MCP_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(stuckServerEnv) == "1" {
		stuckServer()
		return
	}
	if os.Getenv(answersServerEnv) == "1" {
		answersServer()
		return
	}
	if os.Getenv(chattyServerEnv) == "1" {
		chattyServer()
		return
	}
	if os.Getenv(oddSchemasServerEnv) == "1" {
		oddSchemasServer()
		return
	}
	if v := os.Getenv(manyToolsServerEnv); v == "1" || v == "skipped" || v == "repeated" {
		manyToolsServer()
		return
	}
	os.Exit(m.Run())
}

func stuckServer() {
	stdioServer("stuck", []string{"stuck"}, nil, func() { select {} }) // never reads stdin again
}

// toolSchemas, in a test's stdio server process, is the inputSchema
// tools/list gives a tool instead of {"type":"object"}.
var toolSchemas map[string]any

// stdioServer serves MCP on stdin and stdout, as the test binary does when
// it is a test's stdio server: the handshake, tools/list of tools (then
// listed, if set; schemas from toolSchemas), tools/call answered by call (which fills reply; an empty
// result if nil), and an empty result to anything else.
func stdioServer(name string, tools []string, call func(tool string, reply map[string]any), listed func()) {
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Name            string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &msg) != nil || len(msg.ID) == 0 {
			continue // a notification
		}
		reply := map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": map[string]any{}}
		switch msg.Method {
		case "initialize":
			reply["result"] = map[string]any{"protocolVersion": msg.Params.ProtocolVersion,
				"capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": name, "version": "1"}}
		case "tools/list":
			var list []any
			for _, t := range tools {
				schema, ok := toolSchemas[t]
				if !ok {
					schema = map[string]any{"type": "object"}
				}
				list = append(list, map[string]any{"name": t, "inputSchema": schema, "description": toolDescriptions[t]})
			}
			reply["result"] = map[string]any{"tools": list}
			_ = out.Encode(reply)
			if listed != nil {
				listed()
			}
			continue
		case "tools/call":
			if call != nil {
				delete(reply, "result")
				call(msg.Params.Name, reply)
			}
		}
		_ = out.Encode(reply)
	}
}

// TestStuckStdioServer: a stdio server that stops reading its stdin holds
// neither a tool call past its deadline (the SDK's write of a request
// larger than the pipe ignores contexts) nor the manager's Close, which
// kills it.
func TestStuckStdioServer(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "stuck", Command: exe, Env: map[string]string{stuckServerEnv: "1"}}),
		Logger:  testLogger(t),
	})
	if tools := toolNames(m); tools != "stuck" {
		m.Close()
		t.Fatalf("tools %q (status %v)", tools, m.Status())
	}
	args := []byte(`{"pad":"` + strings.Repeat("x", 1<<20) + `"}`) // over the pipe's buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	start := time.Now()
	_, _, err = m.Call(ctx, "stuck", args)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("the call to a stuck server returned %v after %v; want its deadline's error within 2 s", err, time.Since(start))
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still waiting on the stuck server after 30 s")
	}
}
