package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
)

// goServer is an MCP server written with the Go SDK, served over
// Streamable HTTP on a loopback port that survives a stop/start.
type goServer struct {
	t    *testing.T
	mcp  *mcp.Server
	addr string
	srv  *http.Server
}

func newGoServer(t *testing.T) *goServer {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)
	s.AddTool(&mcp.Tool{Name: "hello", Description: "says hello", InputSchema: obj},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			x := gjson.GetBytes(r.Params.Arguments, "x").String()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + x}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "broken", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "disk on fire"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "weather", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: "22 degrees"}, &mcp.ImageContent{MIMEType: "image/png", Data: []byte{1, 2, 3}}},
				StructuredContent: map[string]any{"celsius": 22},
			}, nil
		})
	s.AddTool(&mcp.Tool{Name: "secret_admin", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	g := &goServer{t: t, mcp: s}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	g.serve(ln)
	t.Cleanup(g.stop)
	return g
}

func (g *goServer) serve(ln net.Listener) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.mcp }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Token") != "t0ken" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux}
	g.srv = srv
	go func() { _ = srv.Serve(ln) }()
}

func (g *goServer) stop() {
	if g.srv != nil {
		_ = g.srv.Close()
		g.srv = nil
	}
}

func (g *goServer) restart() {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", g.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	g.serve(ln)
}

func testLogger(t *testing.T) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	}
	return zerolog.Nop()
}

// waitFor polls ok until d has passed, calling poke (when set) between polls.
func waitFor(t *testing.T, what string, d time.Duration, poke func(), ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if poke != nil {
			poke()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func toolNames(m *Manager) string {
	var n []string
	for _, t := range m.Tools() {
		n = append(n, t.Name)
	}
	sort.Strings(n)
	return strings.Join(n, ",")
}

// defaulted returns servers with config's defaults applied, as Start gets them.
func defaulted(servers ...config.MCPServer) []config.MCPServer {
	c := config.Config{MCPServers: servers}
	c.ApplyDefaults()
	return c.MCPServers
}

func TestManagerHTTP(t *testing.T) {
	t.Parallel()
	g := newGoServer(t)
	// The keepalive pings with a timeout of half its period and drops the
	// session on one late answer, so a short one flakes on a loaded
	// machine. Nothing below waits on it: the Call poke in the wait for the
	// tools to disappear makes the manager ping the stopped server.
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "go", URL: "http://" + g.addr + "/mcp", Prefix: "go_",
			Headers: map[string]string{"X-Test-Token": "t0ken"}, Deny: []string{"secret_*"}, MaxCalls: 3, Approval: []string{"br*"}}),
		MaxBackoff: 300 * time.Millisecond, KeepAlive: 2 * time.Second, Logger: testLogger(t),
	})
	defer m.Close()
	if got := toolNames(m); got != "go_broken,go_hello,go_weather" {
		t.Fatalf("tools after start: %q (status %v)", got, m.Status())
	}
	if def := m.Lookup("go_hello"); def == nil || def.Remote != "hello" || def.Description != "says hello" || !gjson.Get(def.Parameters, "properties.x").Exists() || def.MaxCalls != 3 {
		t.Fatalf("definition: %+v", def)
	}
	// approval globs match the server's own names (before the prefix).
	if a, b := m.Lookup("go_broken").Approval, m.Lookup("go_hello").Approval; a != "always" || b != "" {
		t.Fatalf("approval: go_broken %q, go_hello %q", a, b)
	}
	cases := []struct {
		name, tool, args string
		want             string
		isErr            bool
	}{
		{name: "text", tool: "go_hello", args: `{"x":"bob"}`, want: "hello bob"},
		{name: "empty args", tool: "go_hello", args: ``, want: "hello "},
		{name: "isError", tool: "go_broken", args: `{}`, want: "disk on fire", isErr: true},
		{name: "structured wins", tool: "go_weather", args: `{}`, want: `{"celsius":22}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, isErr, err := m.Call(context.Background(), tc.tool, []byte(tc.args))
			if err != nil || isErr != tc.isErr || string(data) != tc.want {
				t.Fatalf("got %q isErr=%v err=%v", data, isErr, err)
			}
		})
	}
	if _, _, err := m.Call(context.Background(), "go_secret_admin", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("denied tool callable: %v", err)
	}

	// The server goes away: its tools disappear, /readyz says why.
	v := m.Version()
	g.stop()
	waitFor(t, "tools to disappear", 10*time.Second, func() { _, _, _ = m.Call(context.Background(), "go_hello", nil) }, func() bool { return len(m.Tools()) == 0 })
	if m.Version() == v || !strings.HasPrefix(m.Status()["mcp:go"], "down") {
		t.Fatalf("version %d→%d status %v", v, m.Version(), m.Status())
	}
	// It comes back: reconnect with backoff.
	g.restart()
	waitFor(t, "reconnect", 10*time.Second, nil, func() bool { return len(m.Tools()) == 3 })
	if data, _, err := m.Call(context.Background(), "go_hello", []byte(`{"x":"again"}`)); err != nil || string(data) != "hello again" {
		t.Fatalf("after reconnect: %q %v", data, err)
	}

	// tools/list_changed: a tool added at run time shows up.
	g.mcp.AddTool(&mcp.Tool{Name: "late", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil
		})
	waitFor(t, "list_changed", 10*time.Second, nil, func() bool { return m.Lookup("go_late") != nil })
}

// everything returns the entry point of @modelcontextprotocol/server-everything
// installed by `npm ci` in test/node, or skips.
func everything(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed: skipping the test against @modelcontextprotocol/server-everything")
	}
	p, _ := filepath.Abs("../test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(p); err != nil {
		t.Skip("@modelcontextprotocol/server-everything not installed: run `npm ci` in test/node")
	}
	return p
}

// processesWithEnv counts live processes whose environment holds kv.
func processesWithEnv(kv string) int {
	n := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		for _, e := range strings.Split(string(b), "\x00") {
			if e == kv {
				n++
				break
			}
		}
	}
	return n
}

func TestManagerStdioEverything(t *testing.T) {
	t.Parallel()
	entry := everything(t)
	marker := "LLMGW_TEST_MARKER=" + strings.ReplaceAll(t.Name(), "/", "_") + time.Now().Format("150405.000000")
	kv := strings.SplitN(marker, "=", 2)
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "every", Command: "node", Args: []string{entry, "stdio"},
			Env: map[string]string{kv[0]: kv[1]}, Allow: []string{"get-*", "echo"}, Deny: []string{"get-env", "get-tiny-image"}}),
		Logger: testLogger(t),
	})
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()
	tools := toolNames(m)
	for _, want := range []string{"echo", "get-sum", "get-structured-content"} {
		if !strings.Contains(","+tools+",", ","+want+",") {
			t.Fatalf("tool %s missing from %q (status %v)", want, tools, m.Status())
		}
	}
	if strings.Contains(tools, "get-env") || strings.Contains(tools, "trigger-") {
		t.Fatalf("allow/deny not applied: %q", tools)
	}
	if data, isErr, err := m.Call(context.Background(), "get-sum", []byte(`{"a":2,"b":3}`)); err != nil || isErr || !strings.Contains(string(data), "is 5") {
		t.Fatalf("get-sum: %q %v %v", data, isErr, err)
	}
	data, _, err := m.Call(context.Background(), "get-structured-content", []byte(`{"location":"Chicago"}`))
	if err != nil || gjson.GetBytes(data, "temperature").Int() != 36 {
		t.Fatalf("structured: %q %v", data, err)
	}
	if runtimeGOOS() == "linux" && processesWithEnv(marker) == 0 {
		t.Fatal("the stdio server process was not found by its marker")
	}
	m.Close()
	closed = true
	if runtimeGOOS() == "linux" {
		if n := processesWithEnv(marker); n != 0 {
			t.Fatalf("%d stdio server processes left after Close", n)
		}
	}
	if len(m.Tools()) != 0 {
		t.Fatal("tools still offered after Close")
	}
}

// A server that takes longer to start than its calls' timeout still
// connects: the attempt is not cut at the call timeout (an npx cold start
// is seconds, a call's timeout may be less).
func TestManagerSlowStartBeyondCallTimeout(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "hello", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gjson.GetBytes(peekBody(r), "method").String() == "initialize" {
			time.Sleep(700 * time.Millisecond) // a server still starting
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = slow.Serve(ln) }()
	t.Cleanup(func() { _ = slow.Close() })
	m := Start(Options{
		Servers:    defaulted(config.MCPServer{Name: "slow", URL: "http://" + ln.Addr().String() + "/mcp", Timeout: config.Duration(200 * time.Millisecond)}),
		StartWait:  3 * time.Second,
		MaxBackoff: 300 * time.Millisecond, Logger: testLogger(t),
	})
	defer m.Close()
	if got := toolNames(m); got != "hello" {
		t.Fatalf("tools of a server slower to start than the call timeout: %q (status %v)", got, m.Status())
	}
}

// peekBody reads r's body and puts it back for the handler.
func peekBody(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// A Streamable HTTP server that no longer knows the session (it expired
// there, a restart behind a load balancer) answers 404, and the SDK fails
// every call in flight on the session with it, whichever met the 404: a call
// of a tool the server says only reads is sent again on a new session; any
// other is reported unavailable (it may have run), and the next call goes
// to the new session.
func TestManagerCallAfterTheServerEndedTheSession(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	var reads, writes atomic.Int64
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			reads.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "read"}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "write", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			writes.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "written"}}}, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var mu sync.Mutex
	seen, forgotten := map[string]bool{}, map[string]bool{} // session ids
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		mu.Lock()
		seen[id] = true
		gone := forgotten[id]
		mu.Unlock()
		if gone {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	forget := func() { // every session known so far is gone
		mu.Lock()
		defer mu.Unlock()
		for id := range seen {
			forgotten[id] = id != ""
		}
	}
	m := Start(Options{
		Servers:    defaulted(config.MCPServer{Name: "s", URL: "http://" + ln.Addr().String() + "/mcp", Timeout: config.Duration(5 * time.Second)}),
		MaxBackoff: 300 * time.Millisecond, Logger: testLogger(t),
	})
	defer m.Close()
	call := func(tool string) (string, error) {
		data, isErr, err := m.Call(context.Background(), tool, nil)
		if isErr {
			return "", fmt.Errorf("error result %s", data)
		}
		return string(data), err
	}
	if got, err := call("read"); err != nil || got != "read" {
		t.Fatalf("first call: %q %v", got, err)
	}
	forget()
	if got, err := call("read"); err != nil || got != "read" || reads.Load() != 2 {
		t.Fatalf("a read-only call after the server ended the session: %q %v, %d runs (status %v)", got, err, reads.Load(), m.Status())
	}
	forget()
	if _, err := call("write"); !errors.Is(err, ErrUnavailable) || writes.Load() != 0 {
		t.Fatalf("another call after the server ended the session: %v, %d runs, want unavailable and not sent again", err, writes.Load())
	}
	waitFor(t, "the new session", 5*time.Second, nil, func() bool { return strings.HasPrefix(m.Status()["mcp:s"], "up") })
	if got, err := call("write"); err != nil || got != "written" || writes.Load() != 1 {
		t.Fatalf("the next call: %q %v, %d runs", got, err, writes.Load())
	}
}

// A repeatable call that met the 404 of a lost session, on a server that
// then does not come back, fails as unavailable once the reconnect has
// failed: it waited for a new session until its timeout.
func TestManagerCallAfterTheSessionEndedAndTheServerWentAway(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "read"}}}, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var gone atomic.Bool
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gone.Load() {
			// No new connection gets in, and none is reused (no
			// keep-alive): the reconnect is refused.
			_ = ln.Close()
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})}
	hs.SetKeepAlivesEnabled(false)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	const timeout = 30 * time.Second
	m := Start(Options{
		Servers:    defaulted(config.MCPServer{Name: "s", URL: "http://" + ln.Addr().String() + "/mcp", Timeout: config.Duration(timeout)}),
		MaxBackoff: 300 * time.Millisecond, Logger: testLogger(t),
	})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if data, isErr, err := m.Call(ctx, "read", nil); err != nil || isErr || string(data) != "read" {
		t.Fatalf("first call: %q %v %v", data, isErr, err)
	}
	gone.Store(true)
	start := time.Now()
	data, isErr, err := m.Call(ctx, "read", nil)
	if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took > 10*time.Second {
		t.Fatalf("a read-only call after the server ended the session and went away: %q %v %v after %v, want unavailable at once (status %v)",
			data, isErr, err, took.Round(time.Millisecond), m.Status())
	}
}

// A result with a content block of a type the SDK does not know (a server
// on a later revision of the protocol), or an image whose data is not
// base64, is the server's answer: an error result saying so, and the
// server stays up; it was reported as "the tool's server is unreachable"
// and made the connection check itself (the image: an MCP probe).
func TestManagerUnknownContentType(t *testing.T) {
	t.Parallel()
	// A Streamable HTTP server written by hand: JSON answers, no session.
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		req := gjson.ParseBytes(peekBody(r))
		var result string
		switch req.Get("method").String() {
		case "initialize":
			result = `{"protocolVersion":` + req.Get("params.protocolVersion").Raw + `,"capabilities":{"tools":{}},"serverInfo":{"name":"future","version":"1"}}`
		case "tools/list":
			result = `{"tools":[{"name":"look","inputSchema":{"type":"object"}},{"name":"picture","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			result = `{"content":[{"type":"text","text":"seen"},{"type":"hologram","frames":3}]}`
			if req.Get("params.name").Str == "picture" {
				result = `{"content":[{"type":"image","data":"not base64!!","mimeType":"image/png"}]}`
			}
		case "ping":
			result = `{}`
		}
		if !req.Get("id").Exists() { // a notification
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if result == "" {
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+req.Get("id").Raw+`,"error":{"code":-32601,"message":"method not found"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+req.Get("id").Raw+`,"result":`+result+`}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "future", URL: "http://" + ln.Addr().String() + "/mcp"}),
		Logger:  testLogger(t),
	})
	defer m.Close()
	if got := toolNames(m); got != "look,picture" {
		t.Fatalf("tools %q (status %v)", got, m.Status())
	}
	for _, tool := range []string{"look", "picture"} {
		data, isErr, err := m.Call(context.Background(), tool, nil)
		if err != nil || !isErr || string(data) != string(msgUnreadable) {
			t.Fatalf("call %s: %q %v %v", tool, data, isErr, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a probe, were one made, would have run
	if st := m.Status()["mcp:future"]; !strings.HasPrefix(st, "up") {
		t.Fatalf("status after the answer: %q", st)
	}
}

// A break signal left for an earlier connection does not keep a later
// one's out: the connection loop would wait on a session already taken
// out of use, and the server would stay down for good (review).
func TestBreakSessionReplacesAStaleSignal(t *testing.T) {
	t.Parallel()
	s := newServer(&Manager{log: zerolog.Nop()}, config.MCPServer{Name: "x"})
	old, cur := new(mcp.ClientSession), new(mcp.ClientSession)
	s.broken <- old
	s.session = cur
	if !s.breakSession(cur) {
		t.Fatal("the current session was not broken")
	}
	if got := <-s.broken; got != cur {
		t.Fatal("the signal for the current session was dropped for a stale one")
	}
}

// A call the server never answers is counted when its deadline ends it
// (timeout) or its request does (cancelled): a server that hangs on every
// call showed nothing in gateway_mcp_calls_total.
func TestManagerCallsEndedFirstAreCounted(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	release := make(chan struct{})
	srv.AddTool(&mcp.Tool{Name: "hang", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select { // until the test ends: the server closes only then
			case <-ctx.Done():
			case <-release:
			}
			return nil, errors.New("hung")
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(release) }) // first
	m := Start(Options{Servers: defaulted(config.MCPServer{Name: "hangs", URL: ts.URL, Timeout: config.Duration(30 * time.Second)}),
		Logger: testLogger(t)})
	defer m.Close()
	waitFor(t, "the server", 10*time.Second, nil, func() bool { return strings.HasPrefix(m.Status()["mcp:hangs"], "up") })
	timeout0, cancelled0 := calls("hangs", "timeout"), calls("hangs", "cancelled")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	if _, _, err := m.Call(ctx, "hang", nil); err == nil {
		t.Fatal("a call past its deadline succeeded")
	}
	cancel()
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, _, err := m.Call(ctx, "hang", nil); err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	if d := calls("hangs", "timeout") - timeout0; d != 1 {
		t.Errorf("%v calls counted as timeout, want 1", d)
	}
	if d := calls("hangs", "cancelled") - cancelled0; d != 1 {
		t.Errorf("%v calls counted as cancelled, want 1", d)
	}
}

// A tool name two servers offer (neither with a prefix) is the first
// listed server's, up or down: while it is down, the second server's tool
// of that name is not offered in its place (its approval gate, its effects
// are another tool's), and it is the first's again when it is back.
func TestManagerSameNameStaysTheFirstServers(t *testing.T) {
	t.Parallel()
	first, second := newGoServer(t), newGoServer(t)
	hdr := map[string]string{"X-Test-Token": "t0ken"}
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "a", URL: "http://" + first.addr + "/mcp", Headers: hdr, Approval: []string{"hello"}},
			config.MCPServer{Name: "b", URL: "http://" + second.addr + "/mcp", Headers: hdr, Deny: []string{"broken", "weather", "secret_*"}}),
		MaxBackoff: 300 * time.Millisecond, KeepAlive: 2 * time.Second, Logger: testLogger(t),
	})
	defer m.Close()
	if got := toolNames(m); got != "broken,hello,secret_admin,weather" || m.Lookup("hello").Server != "a" || m.Lookup("hello").Approval != "always" {
		t.Fatalf("tools after start: %q (status %v)", got, m.Status())
	}
	first.stop()
	waitFor(t, "the first server's tools to go", 10*time.Second, func() { _, _, _ = m.Call(context.Background(), "hello", nil) },
		func() bool { return m.Lookup("broken") == nil })
	if def := m.Lookup("hello"); def != nil {
		t.Fatalf("with the first server down, hello is offered by %q (approval %q)", def.Server, def.Approval)
	}
	first.restart()
	waitFor(t, "the first server back", 10*time.Second, nil, func() bool { return m.Lookup("broken") != nil })
	if def := m.Lookup("hello"); def == nil || def.Server != "a" {
		t.Fatalf("back: hello is %+v", def)
	}
}

// Until a server without a prefix has listed its tools once, a later one
// without a prefix offers none: any of its names may be the earlier one's
// (a start or a reload while the gated server is down offered the other
// server's tool of its name, without its approval).
func TestManagerHoldsALaterServerUntilTheFirstLists(t *testing.T) {
	t.Parallel()
	first, second := newGoServer(t), newGoServer(t)
	first.stop()
	hdr := map[string]string{"X-Test-Token": "t0ken"}
	m := Start(Options{
		Servers: defaulted(config.MCPServer{Name: "a", URL: "http://" + first.addr + "/mcp", Headers: hdr, Approval: []string{"hello"}},
			config.MCPServer{Name: "b", URL: "http://" + second.addr + "/mcp", Headers: hdr, Deny: []string{"broken", "weather", "secret_*"}},
			config.MCPServer{Name: "c", URL: "http://" + second.addr + "/mcp", Headers: hdr, Prefix: "c_", Allow: []string{"weather"}}),
		MaxBackoff: 300 * time.Millisecond, KeepAlive: 2 * time.Second, Logger: testLogger(t),
	})
	defer m.Close()
	waitFor(t, "the prefixed server's tools", 10*time.Second, nil, func() bool { return m.Lookup("c_weather") != nil })
	if def := m.Lookup("hello"); def != nil {
		t.Fatalf("with the first server never listed, hello is offered by %q (approval %q)", def.Server, def.Approval)
	}
	first.restart()
	waitFor(t, "the first server listed", 10*time.Second, nil, func() bool { return m.Lookup("broken") != nil })
	if def := m.Lookup("hello"); def == nil || def.Server != "a" || def.Approval != "always" {
		t.Fatalf("hello after the first server listed: %+v", def)
	}
}
