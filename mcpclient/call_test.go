package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/gateway/config"
)

// answersServerEnv makes the test binary a stdio MCP server whose tools
// answer in ways the SDK's own server does not: "rpcerr" with a JSON-RPC
// error, "huge" with one line over the client's bound.
const answersServerEnv = "LLMGW_TEST_ANSWERS_MCP_SERVER"

func answersServer() {
	stdioServer("answers", []string{"rpcerr", "huge", "badshape"}, func(tool string, reply map[string]any) {
		switch tool {
		case "badshape":
			reply["result"] = map[string]any{"content": "just a string"} // content must be a list
		case "rpcerr":
			reply["error"] = map[string]any{"code": -32602, "message": "Invalid params: widget not found"}
		case "huge":
			text := strings.Repeat("x", 20<<20)
			reply["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}}
		}
	}, nil)
}

// calls is the gateway_mcp_calls_total count of server and result.
func calls(server, result string) float64 {
	return testutil.ToFloat64(metricCalls.WithLabelValues(server, result))
}

// TestCallJSONRPCErrorOverStdio: a JSON-RPC error answer to tools/call is
// an error result with the server's message, counted as rpc_error, not as
// a transport error; an answer over the bound on one stdio line is an
// error result saying so.
func TestCallJSONRPCErrorOverStdio(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Counts since this run's start: -count=N runs share the counters.
	rpc0, err0 := calls("answers-stdio", "rpc_error"), calls("answers-stdio", "error")
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "answers-stdio", Command: exe, Env: map[string]string{answersServerEnv: "1"}}),
		Logger:  testLogger(t),
	})
	defer m.Close()
	if tools := toolNames(m); tools != "badshape,huge,rpcerr" {
		t.Fatalf("tools %q (status %v)", tools, m.Status())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, isErr, err := m.Call(ctx, "rpcerr", nil)
	if err != nil || !isErr || string(data) != "Invalid params: widget not found" {
		t.Fatalf("JSON-RPC error: %q isErr=%v err=%v", data, isErr, err)
	}
	if calls("answers-stdio", "rpc_error")-rpc0 != 1 || calls("answers-stdio", "error")-err0 != 0 {
		t.Errorf("counted rpc_error %v, error %v", calls("answers-stdio", "rpc_error")-rpc0, calls("answers-stdio", "error")-err0)
	}
	// A result of the wrong shape is the server's answer: the model is
	// told it could not be read, counted unreadable, and the server is not
	// taken for unreachable (it was: an MCP probe).
	unread0 := calls("answers-stdio", "unreadable")
	data, isErr, err = m.Call(ctx, "badshape", nil)
	if err != nil || !isErr || string(data) != string(msgUnreadable) || calls("answers-stdio", "unreadable")-unread0 != 1 {
		t.Fatalf("a result of the wrong shape: %q isErr=%v err=%v", data, isErr, err)
	}
	data, isErr, err = m.Call(ctx, "huge", nil)
	if err != nil || !isErr || string(data) != string(msgTooLarge) {
		t.Fatalf("answer over the bound: %q isErr=%v err=%v", data, isErr, err)
	}
	// The answer broke the connection: the next call is not told its own
	// output was too large, and the server is back moments later.
	data, _, err = m.Call(ctx, "rpcerr", nil)
	if string(data) == string(msgTooLarge) {
		t.Fatalf("the call after the broken connection: %q err=%v", data, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		data, _, err = m.Call(ctx, "rpcerr", nil)
		if err == nil && string(data) == "Invalid params: widget not found" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the broken connection: %q err=%v", data, err)
		}
	}
}

// rpcServer is an SDK server whose "widget" and "long" tools answer with
// JSON-RPC errors and "huge" over the bound on one message; pings counts
// the pings it gets.
func rpcServer() (s *mcp.Server, pings *atomic.Int64) {
	obj := json.RawMessage(`{"type":"object"}`)
	long := strings.Repeat("é", 2000)
	s = mcp.NewServer(&mcp.Implementation{Name: "rpc", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "widget", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Invalid params: widget not found"}
	})
	s.AddTool(&mcp.Tool{Name: "long", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: -32000, Message: long}
	})
	s.AddTool(&mcp.Tool{Name: "huge", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", maxMessageBytes+1)}}}, nil
	})
	pings = new(atomic.Int64)
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "ping" {
				pings.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	return s, pings
}

// TestCallJSONRPCErrorOverHTTP: the same through the SDK's own server over
// Streamable HTTP (JSON and SSE answers): the server's message, bounded,
// and no ping, since the server answered; an answer over the bound says
// so.
func TestCallJSONRPCErrorOverHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		json bool
	}{{"answers-sse", false}, {"answers-json", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, pings := rpcServer()
			srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
				&mcp.StreamableHTTPOptions{JSONResponse: tc.json}))
			defer srv.Close()
			rpc0, err0 := calls(tc.name, "rpc_error"), calls(tc.name, "error") // -count=N runs share the counters
			m := Start(Options{Servers: defaulted(config.MCPServer{Name: tc.name, URL: srv.URL}), KeepAlive: time.Hour, Logger: testLogger(t)})
			defer m.Close()
			if tools := toolNames(m); tools != "huge,long,widget" {
				t.Fatalf("tools %q (status %v)", tools, m.Status())
			}
			ctx := context.Background()
			data, isErr, err := m.Call(ctx, "widget", []byte(`{}`))
			if err != nil || !isErr || string(data) != "Invalid params: widget not found" {
				t.Fatalf("JSON-RPC error: %q isErr=%v err=%v", data, isErr, err)
			}
			data, isErr, err = m.Call(ctx, "long", nil)
			if err != nil || !isErr || len(data) > maxRPCMessage+len("…") || !utf8.Valid(data) || !strings.HasSuffix(string(data), "é…") {
				t.Fatalf("long message: %d bytes %q isErr=%v err=%v", len(data), data[:min(len(data), 20)], isErr, err)
			}
			time.Sleep(300 * time.Millisecond) // a probe pings at once
			if pings.Load() != 0 || calls(tc.name, "rpc_error")-rpc0 != 2 || calls(tc.name, "error")-err0 != 0 {
				t.Errorf("pings %d, counted rpc_error %v, error %v", pings.Load(), calls(tc.name, "rpc_error")-rpc0, calls(tc.name, "error")-err0)
			}
			data, isErr, err = m.Call(ctx, "huge", nil)
			if err != nil || !isErr || string(data) != string(msgTooLarge) {
				t.Fatalf("answer over the bound: %q isErr=%v err=%v", data[:min(len(data), 100)], isErr, err)
			}
		})
	}
}

// TestCallHugeAnswerFromNodeHTTP: a Node MCP server over Streamable HTTP
// (the TypeScript SDK's transport) whose answer is over the bound on one
// message: the call is told its output was too large, as over stdio. The
// SDK takes the session down as it fails the call, and a probe found the
// call then told "the server is unreachable", taken for a bystander of a
// connection broken by another call; over HTTP each call reads its own
// answer, so the error is the call's own.
func TestCallHugeAnswerFromNodeHTTP(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed")
	}
	script, _ := filepath.Abs("../test/node/huge-mcp.mjs")
	if _, err := os.Stat("../test/node/node_modules/@modelcontextprotocol/sdk"); err != nil {
		t.Skip("@modelcontextprotocol/sdk not installed: run `npm ci` in test/node")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command("node", script, port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 100*time.Millisecond); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Node MCP server did not listen")
		}
	}
	m := Start(Options{Servers: defaulted(config.MCPServer{Name: "node-huge", URL: "http://127.0.0.1:" + port + "/mcp", Timeout: config.Duration(20 * time.Second)}),
		KeepAlive: time.Hour, Logger: testLogger(t)})
	defer m.Close()
	if tools := toolNames(m); tools != "huge,small" {
		t.Fatalf("tools %q (status %v)", tools, m.Status())
	}
	data, isErr, err := m.Call(context.Background(), "huge", []byte(`{"n":`+strconv.Itoa(maxMessageBytes+1024)+`}`))
	if err != nil || !isErr || string(data) != string(msgTooLarge) {
		t.Fatalf("answer over the bound: %.100q isErr=%v err=%v", data, isErr, err)
	}
}

// TestCallHugeAnswerBystanderOverHTTP: only the call whose answer was over
// the bound is told its output was too large; a call that was waiting for
// its own answer is not (the review of the first fix found it told "too
// large" too, when the SDK failed every call in flight on the connection
// with the one error; now it gets its answer: see
// TestCallBadAnswerSparesOthersOverHTTP).
func TestCallHugeAnswerBystanderOverHTTP(t *testing.T) {
	t.Parallel()
	for _, jsonAnswers := range []bool{false, true} {
		t.Run(fmt.Sprint("json=", jsonAnswers), func(t *testing.T) {
			t.Parallel()
			s, _ := rpcServer()
			started := make(chan struct{}, 1)
			s.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				started <- struct{}{}
				select {
				case <-time.After(3 * time.Second):
				case <-ctx.Done():
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
			srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
				&mcp.StreamableHTTPOptions{JSONResponse: jsonAnswers}))
			defer srv.Close()
			name := fmt.Sprint("bystander-", jsonAnswers)
			m := Start(Options{Servers: defaulted(config.MCPServer{Name: name, URL: srv.URL, Timeout: config.Duration(20 * time.Second)}), KeepAlive: time.Hour, Logger: testLogger(t)})
			defer m.Close()
			if tools := toolNames(m); tools != "huge,long,slow,widget" {
				t.Fatalf("tools %q (status %v)", tools, m.Status())
			}
			type result struct {
				data []byte
				err  error
			}
			slow := make(chan result, 1)
			go func() {
				data, _, err := m.Call(context.Background(), "slow", nil)
				slow <- result{data, err}
			}()
			<-started
			data, isErr, err := m.Call(context.Background(), "huge", nil)
			if err != nil || !isErr || string(data) != string(msgTooLarge) {
				t.Fatalf("the call whose answer was too large: %.100q isErr=%v err=%v", data, isErr, err)
			}
			if r := <-slow; string(r.data) == string(msgTooLarge) {
				t.Fatalf("the call in flight beside it was told its own output was too large (err %v)", r.err)
			}
		})
	}
}
