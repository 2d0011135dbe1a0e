package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// everythingEntry returns the entry point of @modelcontextprotocol/server-everything
// (installed by `npm ci` in test/node), or skips.
func everythingEntry(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed: skipping the tests against @modelcontextprotocol/server-everything")
	}
	p, _ := filepath.Abs("../test/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(p); err != nil {
		t.Skip("@modelcontextprotocol/server-everything not installed: run `npm ci` in test/node")
	}
	return p
}

// httpEverything runs server-everything over Streamable HTTP on a fixed
// loopback port, so that it can be killed and started again.
type httpEverything struct {
	t     *testing.T
	entry string
	port  int
	cmd   *exec.Cmd
}

func startHTTPEverything(t *testing.T, entry string) *httpEverything {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	e := &httpEverything{t: t, entry: entry, port: port}
	e.start()
	t.Cleanup(e.kill)
	return e
}

func (e *httpEverything) url() string { return "http://127.0.0.1:" + strconv.Itoa(e.port) + "/mcp" }

func (e *httpEverything) start() {
	e.t.Helper()
	e.cmd = exec.Command("node", e.entry, "streamableHttp")
	e.cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(e.port))
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(e.port), 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatal("server-everything (streamableHttp) did not listen")
}

// kill ends the process this test started, by its own handle.
func (e *httpEverything) kill() {
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Kill()
		_, _ = e.cmd.Process.Wait()
		e.cmd = nil
	}
}

// mcpResponder calls every offered MCP tool of the test config once, then
// answers with the tool results.
func mcpResponder(c *mockllm.Call) mockllm.Turn {
	if c.LastRole == "tool" {
		return mockllm.Turn{Text: "Final: " + strings.Join(c.ToolResults, " | ")}
	}
	var calls []mockllm.ToolCall
	if c.Offers("web_get-sum") {
		calls = append(calls, mockllm.ToolCall{Name: "web_get-sum", Arguments: `{"a":2,"b":3}`})
	}
	if c.Offers("loc_get-structured-content") {
		calls = append(calls, mockllm.ToolCall{Name: "loc_get-structured-content", Arguments: `{"location":"Chicago"}`})
	}
	if c.Offers("loc_echo") {
		calls = append(calls, mockllm.ToolCall{Name: "loc_echo", Arguments: `{"mesage":"typo"}`}) // fails the schema
	}
	if len(calls) == 0 {
		return mockllm.Turn{Text: "no tools offered"}
	}
	return mockllm.Turn{ToolCalls: calls}
}

func readyz(t *testing.T, h *harness) map[string]string {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(h.base, "/v1") + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Ready   bool              `json:"ready"`
		Details map[string]string `json:"details"`
	}
	if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode != 200 || !r.Ready {
		t.Fatalf("readyz %d %s", resp.StatusCode, b)
	}
	return r.Details
}

// TestMCPServersEndToEnd runs the real @modelcontextprotocol/server-everything
// twice, over stdio (started by the gateway) and over Streamable HTTP
// (started by the test), kills the HTTP one mid-test and starts it again.
func TestMCPServersEndToEnd(t *testing.T) {
	t.Parallel()
	entry := everythingEntry(t)
	web := startHTTPEverything(t, entry)
	cfg := baseConfig + `
[[mcp_servers]]
name = "web"
url = "` + web.url() + `"
prefix = "web_"
allow = ["get-sum"]
[[mcp_servers]]
name = "local"
command = "node"
args = [` + strconv.Quote(entry) + `, "stdio"]
prefix = "loc_"
allow = ["echo", "get-structured-content"]
[tool_loop]
keepalive_interval = "100ms"
`
	h := newHarness(t, cfg, mockllm.Options{Respond: mcpResponder})
	schema := wiretest.LoadSchema(t)
	ask := func() (string, []string) {
		t.Helper()
		resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("use your tools"))
		if err != nil {
			t.Fatalf("request failed: %v", err)
		}
		reqs := h.mock.Requests()
		var offered []string
		gjson.GetBytes(reqs[len(reqs)-1].Body, "tools.#.function.name").ForEach(func(_, v gjson.Result) bool {
			offered = append(offered, v.String())
			return true
		})
		return resp.Choices[0].Message.Content, offered
	}

	t.Run("both transports through the tool chain", func(t *testing.T) {
		d := readyz(t, h)
		if d["mcp:web"] != "up: 1 tools" || d["mcp:local"] != "up: 2 tools" {
			t.Fatalf("readyz details %v", d)
		}
		p := userMsg("use your tools")
		acc, _, err := h.streamChat(p, wiretest.Options{}, schema)
		if err != nil {
			t.Fatal(err)
		}
		got := acc.Choices[0].Message.Content
		for _, want := range []string{
			"The sum of 2 and 3 is 5",    // text content, over HTTP
			`"temperature":36`,           // structured content, over stdio
			`"type":"invalid_arguments"`, // the gateway's schema validation ran first
			`"field":"/message"`,         // ... and names the missing property
		} {
			if !strings.Contains(got, want) {
				t.Errorf("answer lacks %s: %s", want, got)
			}
		}
		reqs := h.mock.Requests()
		if first := reqs[len(reqs)-2].Body; len(gjson.GetBytes(first, "tools").Array()) != 3 {
			t.Fatalf("offered tools: %s", gjson.GetBytes(first, "tools.#.function.name"))
		}
	})

	t.Run("killed server: its tools go, the rest keeps working, it comes back", func(t *testing.T) {
		web.kill()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.HasPrefix(readyz(t, h)["mcp:web"], "down") {
			if time.Now().After(deadline) {
				t.Fatalf("web never reported down: %v", readyz(t, h))
			}
			// Requests keep succeeding meanwhile (a call to the dead server is
			// an error result the model sees, not a failed request).
			if text, _ := ask(); !strings.HasPrefix(text, "Final: ") {
				t.Fatalf("answer while web is dying: %s", text)
			}
			time.Sleep(100 * time.Millisecond)
		}
		text, offered := ask()
		if strings.Contains(strings.Join(offered, ","), "web_") || !strings.Contains(text, `"temperature":36`) || strings.Contains(text, "sum of") {
			t.Fatalf("with web down: offered %v, answer %s", offered, text)
		}

		web.start()
		deadline = time.Now().Add(20 * time.Second)
		for readyz(t, h)["mcp:web"] != "up: 1 tools" {
			if time.Now().After(deadline) {
				t.Fatalf("web never came back: %v", readyz(t, h))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if text, _ := ask(); !strings.Contains(text, "The sum of 2 and 3 is 5") {
			t.Fatalf("after web came back: %s", text)
		}
	})

	t.Run("client tool named like an MCP tool is refused", func(t *testing.T) {
		p := userMsg("x")
		p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "loc_echo"})}
		_, err := h.client.Chat.Completions.New(context.Background(), p)
		var apiErr *openai.Error
		if !asAPIError(err, &apiErr) || apiErr.StatusCode != 400 {
			t.Fatalf("clash: %v", err)
		}
	})
}

// countEnv counts live processes whose environment holds kv (Linux).
func countEnv(kv string) int {
	n := 0
	files, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range files {
		b, err := os.ReadFile(f)
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

// TestMCPReloadClosesChildren: a reload builds a new runtime while the old
// one still serves; the old runtime's Close stops its stdio servers and
// leaves the new one's alone.
func TestMCPReloadClosesChildren(t *testing.T) {
	t.Parallel()
	entry := everythingEntry(t)
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to find the child processes")
	}
	build := func(marker string) func() {
		cfg, err := config.Parse([]byte(strings.ReplaceAll(baseConfig, "{{MOCK}}", "http://127.0.0.1:9/v1") + `
[[mcp_servers]]
name = "local"
command = "node"
args = [` + strconv.Quote(entry) + `, "stdio"]
env = { LLMGW_RELOAD_MARKER = "` + marker + `" }
`))
		if err != nil {
			t.Fatal(err)
		}
		rt, err := Build(cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if ok, d := rt.Ready(); !ok || !strings.HasPrefix(d["mcp:local"], "up") {
			t.Fatalf("ready %v %v", ok, d)
		}
		return rt.Close
	}
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	oldKV, newKV := "LLMGW_RELOAD_MARKER=old"+id, "LLMGW_RELOAD_MARKER=new"+id
	closeOld := build("old" + id)
	closeNew := build("new" + id)
	if countEnv(oldKV) == 0 || countEnv(newKV) == 0 {
		t.Fatal("stdio servers not found by their markers")
	}
	closeOld()
	if n := countEnv(oldKV); n != 0 {
		t.Fatalf("%d processes of the old runtime left after its Close", n)
	}
	if countEnv(newKV) == 0 {
		t.Fatal("closing the old runtime stopped the new one's server")
	}
	closeNew()
	if n := countEnv(newKV); n != 0 {
		t.Fatalf("%d processes left after Close", n)
	}
}
