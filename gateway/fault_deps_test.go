package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testredis"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// The fault cases for the gateway's other dependencies: Redis (response
// cache and mixed-turn state), an MCP server over Streamable HTTP, and an
// http tool. See fault_test.go.

var (
	latency200  = toxic{Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": 200}}
	latency3s   = toxic{Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": 3000}}
	halfOpenIn  = toxic{Name: "half-open-in", Type: "timeout", Stream: "downstream", Attributes: map[string]any{"timeout": 0}}
	halfOpenOut = toxic{Name: "half-open-out", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}}
	resetPeer   = toxic{Type: "reset_peer", Stream: "downstream", Attributes: map[string]any{"timeout": 0}}
)

// faultRedisConfig keeps the response cache and the mixed-turn state in
// Redis behind the fault proxy, with a 100 ms deadline per Redis call.
const faultRedisConfig = mixedConfig + `
[redis]
addr = "{{REDIS}}"
timeout = "100ms"
prefix = "fault:"
[middleware.cache]
enabled = true
store = "redis"
`

// redisResponder answers mixed turns like mixedResponder and anything else
// with a text that differs on every call, so a cached answer shows.
func redisResponder(c *mockllm.Call) mockllm.Turn {
	if c.Offers("lookup_city") {
		return mixedResponder(c)
	}
	return mockllm.Turn{Text: "answer number " + strconv.Itoa(c.N)}
}

// cachedAsk sends a temperature-0 request and returns x-gateway-cache and
// the answer.
func cachedAsk(t *testing.T, h *harness, prompt string) (string, string) {
	t.Helper()
	p := userMsg(prompt)
	p.Temperature = openai.Float(0)
	var hr *http.Response
	resp, err := h.client.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&hr))
	if err != nil {
		t.Fatalf("request with Redis impaired failed: %v", err)
	}
	return hr.Header.Get("X-Gateway-Cache"), resp.Choices[0].Message.Content
}

// wantBypass asserts that a slow or unreachable Redis is bypassed: the
// request is answered by the model every time, x-gateway-cache: bypass.
func wantBypass(t *testing.T, h *harness, prompt string) {
	t.Helper()
	before := h.mock.TotalCalls()
	for i := 0; i < 2; i++ {
		if hv, _ := cachedAsk(t, h, prompt); hv != "bypass" {
			t.Fatalf("request %d with Redis impaired: x-gateway-cache %q, want bypass", i+1, hv)
		}
	}
	if n := h.mock.TotalCalls() - before; n != 2 {
		t.Fatalf("%d upstream calls for 2 requests with the cache bypassed", n)
	}
}

// wantCacheBack asserts that the cache serves hits again once Redis heals.
func wantCacheBack(t *testing.T, h *harness, prompt string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var first string
	for {
		hv, content := cachedAsk(t, h, prompt)
		if hv == "hit" && content == first {
			return
		}
		if hv == "miss" {
			first = content
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache never served a hit after Redis healed (last x-gateway-cache %q)", hv)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mixedTurn runs a mixed turn and its follow-up; between them, between
// runs. It returns the follow-up's answer and the upstream history the mock
// saw for it.
func mixedTurn(t *testing.T, h *harness, between func()) (string, string) {
	t.Helper()
	p := userMsg("go")
	p.Tools = cityTool()
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatalf("mixed turn: %v", err)
	}
	msg := resp.Choices[0].Message
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup_city" {
		t.Fatalf("mixed turn returned %+v", msg.ToolCalls)
	}
	if between != nil {
		between()
	}
	final, err := h.client.Chat.Completions.New(context.Background(), followUp(p, msg))
	if err != nil {
		t.Fatalf("follow-up: %v", err)
	}
	return final.Choices[0].Message.Content, upstreamShape(lastUpstream(h))
}

// redisFaults puts the fault proxy between the gateway and a real
// redis-server.
func redisFaults(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, h *harness, fp *faultProxy)
	}{
		{"healthy: miss then hit", func(t *testing.T, h *harness, fp *faultProxy) {
			wantCacheBack(t, h, "healthy")
		}},
		{"latency past the deadline: bypass, then hits again", func(t *testing.T, h *harness, fp *faultProxy) {
			name := fp.add(latency200)
			wantBypass(t, h, "slow")
			fp.remove(name)
			wantCacheBack(t, h, "slow")
		}},
		{"half-open: bypass, then hits again", func(t *testing.T, h *harness, fp *faultProxy) {
			in, out := fp.add(halfOpenIn), fp.add(halfOpenOut)
			wantBypass(t, h, "half-open")
			fp.remove(in)
			fp.remove(out)
			wantCacheBack(t, h, "half-open")
		}},
		{"reset: bypass, then hits again", func(t *testing.T, h *harness, fp *faultProxy) {
			name := fp.add(resetPeer)
			wantBypass(t, h, "reset")
			fp.remove(name)
			wantCacheBack(t, h, "reset")
		}},
		{"data limit mid-reply: bypass", func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(toxic{Type: "limit_data", Stream: "downstream", Attributes: map[string]any{"bytes": 3}})
			wantBypass(t, h, "cut")
		}},
		{"down: bypass, then hits again", func(t *testing.T, h *harness, fp *faultProxy) {
			fp.down()
			wantBypass(t, h, "down")
			fp.up()
			wantCacheBack(t, h, "down")
		}},
		{"mixed turn, state unreachable at the follow-up: sent as the client sent it", func(t *testing.T, h *harness, fp *faultProxy) {
			answer, shape := mixedTurn(t, h, func() { fp.add(halfOpenIn); fp.add(halfOpenOut) })
			if shape != "user assistant(lookup_city) tool" || !strings.Contains(answer, "420000") {
				t.Fatalf("follow-up with Redis half-open: upstream history %q, answer %q", shape, answer)
			}
		}},
		{"mixed turn, Redis down throughout: sent as the client sent it", func(t *testing.T, h *harness, fp *faultProxy) {
			fp.down()
			answer, shape := mixedTurn(t, h, nil)
			if shape != "user assistant(lookup_city) tool" || !strings.Contains(answer, "420000") {
				t.Fatalf("follow-up with Redis down: upstream history %q, answer %q", shape, answer)
			}
			fp.up()
			// The calls of an outage pause after the last failed one still
			// skip Redis (see outage); then a call finds it back, and a
			// turn started after that is kept.
			deadline := time.Now().Add(5 * time.Second)
			for {
				time.Sleep(outagePause)
				answer, shape = mixedTurn(t, h, nil)
				if shape == "user assistant(calculator,lookup_city) tool tool" && strings.Contains(answer, `"result":42`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("follow-up after Redis came back: upstream history %q, answer %q", shape, answer)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			redisAddr := testredis.Start(t).Addr()
			fp := newFaultProxy(t, t.Name()+"/redis", redisAddr)
			h, _ := faultHarness(t, faultRedisConfig, mockllm.Options{Respond: redisResponder}, "{{REDIS}}", fp.addr())
			tc.run(t, h, fp)
		})
	}
}

// mcpFaultResponder calls the MCP server's get-sum while it is offered, then
// answers with the tool results.
func mcpFaultResponder(c *mockllm.Call) mockllm.Turn {
	switch {
	case c.LastRole == "tool":
		return mockllm.Turn{Text: "Final: " + strings.Join(c.ToolResults, " | ")}
	case c.Offers("web_get-sum"):
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "web_get-sum", Arguments: `{"a":2,"b":3}`}}}
	default:
		return mockllm.Turn{Text: "no tools offered"}
	}
}

// mcpFaults puts the fault proxy between the gateway and the real
// @modelcontextprotocol/server-everything over Streamable HTTP.
func mcpFaults(t *testing.T) {
	t.Parallel()
	web := startHTTPEverything(t, everythingEntry(t))
	fp := newFaultProxy(t, t.Name()+"/mcp", "127.0.0.1:"+strconv.Itoa(web.port))
	h, _ := faultHarness(t, baseConfig+`
[[mcp_servers]]
name = "web"
url = "http://{{MCP}}/mcp"
prefix = "web_"
allow = ["get-sum"]
timeout = "500ms"
[tool_loop]
keepalive_interval = "100ms"
`, mockllm.Options{Respond: mcpFaultResponder}, "{{MCP}}", fp.addr())
	ask := func() (string, []string) {
		t.Helper()
		resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("add"))
		if err != nil {
			t.Fatalf("request failed while the MCP server is impaired: %v", err)
		}
		reqs := h.mock.Requests()
		var offered []string
		gjson.GetBytes(reqs[len(reqs)-1].Body, "tools.#.function.name").ForEach(func(_, v gjson.Result) bool {
			offered = append(offered, v.String())
			return true
		})
		return resp.Choices[0].Message.Content, offered
	}
	waitState := func(prefix string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.HasPrefix(readyz(t, h)["mcp:web"], prefix) {
			if time.Now().After(deadline) {
				t.Fatalf("mcp:web never became %q: %v", prefix, readyz(t, h))
			}
			// Requests keep succeeding meanwhile.
			ask()
			time.Sleep(50 * time.Millisecond)
		}
	}
	wantWorking := func() {
		t.Helper()
		waitState("up")
		if text, _ := ask(); !strings.Contains(text, "The sum of 2 and 3 is 5") {
			t.Fatalf("with the MCP server reachable: %s", text)
		}
	}
	wantHidden := func() {
		t.Helper()
		waitState("down")
		text, offered := ask()
		if len(offered) != 0 || text != "no tools offered" {
			t.Fatalf("with the MCP server down: offered %v, answer %s", offered, text)
		}
	}
	wantWorking()

	// Half-open: the call times out into an error result the model sees,
	// the ping that follows fails, the server's tools are hidden; once the
	// link heals the gateway reconnects.
	in, out := fp.add(halfOpenIn), fp.add(halfOpenOut)
	if text, _ := ask(); !strings.Contains(text, `"status":"error"`) {
		t.Fatalf("a call to a half-open MCP server: %s", text)
	}
	wantHidden()
	fp.remove(in)
	fp.remove(out)
	wantWorking()

	// Unreachable (connection refused): hidden; back when it listens again.
	fp.down()
	wantHidden()
	fp.up()
	wantWorking()
}

// toolFaultResponder calls lookup_stock once, then answers with its result.
func toolFaultResponder(c *mockllm.Call) mockllm.Turn {
	if c.LastRole == "tool" {
		return mockllm.Turn{Text: "Final: " + strings.Join(c.ToolResults, " | ")}
	}
	return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "lookup_stock", Arguments: `{"sku":"A1"}`}}}
}

const faultToolConfig = baseConfig + `
[[tools]]
name = "lookup_stock"
kind = "http"
url = "http://{{TOOL}}/lookup"
parameters = '{"type":"object","properties":{"sku":{"type":"string"}},"required":["sku"]}'
timeout = "1s"
`

// httpToolFaults puts the fault proxy between the gateway and an http tool.
func httpToolFaults(t *testing.T) {
	padding := strings.Repeat("x", 1500) // a result within gpt-x's 1000-token window
	cases := []struct {
		name   string
		toxics []toxic
		want   []string // in the final answer, which holds the tool result
	}{
		{"latency under the timeout: the result", []toxic{latency200}, []string{`"stock":7`}},
		{"latency past the timeout: a timeout result", []toxic{latency3s}, []string{`"status":"error"`, `"type":"timeout"`}},
		{"half-open: a timeout result", []toxic{halfOpenIn, halfOpenOut}, []string{`"status":"error"`, `"type":"timeout"`}},
		{"bandwidth too low for the timeout: a timeout result",
			[]toxic{{Type: "bandwidth", Stream: "downstream", Attributes: map[string]any{"rate": 1}}}, []string{`"status":"error"`, `"type":"timeout"`}},
		{"reset: an error result", []toxic{resetPeer}, []string{`"status":"error"`, `"type":"tool_error"`}},
		{"data limit mid-body: an error result",
			[]toxic{{Type: "limit_data", Stream: "downstream", Attributes: map[string]any{"bytes": 400}}}, []string{`"status":"error"`, `"type":"tool_error"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"stock":7,"padding":"`+padding+`"}`)
			}))
			t.Cleanup(tool.Close)
			fp := newFaultProxy(t, t.Name()+"/tool", strings.TrimPrefix(tool.URL, "http://"))
			for _, tx := range tc.toxics {
				fp.add(tx)
			}
			h, _ := faultHarness(t, faultToolConfig, mockllm.Options{Respond: toolFaultResponder}, "{{TOOL}}", fp.addr())
			resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("stock?"))
			if err != nil {
				t.Fatalf("a tool fault failed the request: %v", err)
			}
			got := resp.Choices[0].Message.Content
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Fatalf("answer lacks %s: %.300s", w, got)
				}
			}
		})
	}
}
