package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// toolConfig adds server tools to the base config; {{HTTP}} is an http tool's URL.
const toolConfig = baseConfig + `
[[models]]
name = "expert"
provider = "up"
upstream = "up-expert"
[[tools]]
name = "calculator"
kind = "builtin"
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}'
[[tools]]
name = "slow_lookup"
kind = "http"
url = "{{HTTP}}"
parameters = '{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}'
timeout = "2s"
[[tools]]
name = "ask_expert"
kind = "agent"
model = "expert"
system = "You are the expert."
[tool_loop]
keepalive_interval = "100ms"
`

// window is one http tool execution, recorded by the test server.
type window struct{ start, end time.Time }

type toolServer struct {
	mu      sync.Mutex
	windows map[string]window
	delay   time.Duration
	// The calls of the keys in meet wait for each other (see meetCalls).
	meet    map[string]bool
	waiting int           // calls of meet's keys waiting
	met     chan struct{} // closed once len(meet) of them waited at once
	apart   []string      // keys of calls that gave up waiting
	wait    time.Duration
}

// meetCalls makes each call of one of keys wait, before the delay, until
// one call per key waits at once, for up to wait (or until the call ends):
// calls made together meet however late each is scheduled; calls made one
// after the other wait alone, and are listed in apart. wait should be less
// than the tool's timeout, so that the server, not the gateway, gives up.
// Call it before the first request.
func (ts *toolServer) meetCalls(wait time.Duration, keys ...string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.meet, ts.met, ts.wait = map[string]bool{}, make(chan struct{}), wait
	for _, k := range keys {
		ts.meet[k] = true
	}
}

// await is meetCalls' wait for a call of key.
func (ts *toolServer) await(ctx context.Context, key string) {
	ts.mu.Lock()
	if !ts.meet[key] {
		ts.mu.Unlock()
		return
	}
	if ts.waiting++; ts.waiting == len(ts.meet) {
		select {
		case <-ts.met:
		default:
			close(ts.met)
		}
	}
	met, wait := ts.met, ts.wait
	ts.mu.Unlock()
	together := false
	select {
	case <-met:
		together = true
	case <-ctx.Done():
	case <-time.After(wait):
	}
	ts.mu.Lock()
	ts.waiting--
	if !together {
		ts.apart = append(ts.apart, key)
	}
	ts.mu.Unlock()
}

func newToolServer(t *testing.T, delay time.Duration) (*toolServer, string) {
	ts := &toolServer{windows: map[string]window{}, delay: delay}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		b, _ := io.ReadAll(r.Body)
		key := gjson.GetBytes(b, "key").Str
		ts.await(r.Context(), key)
		time.Sleep(ts.delay)
		ts.mu.Lock()
		ts.windows[key] = window{start, time.Now()}
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"key":"` + key + `","value":"v-` + key + `"}`))
	}))
	t.Cleanup(srv.Close)
	return ts, srv.URL
}

func toolHarness(t *testing.T, respond func(*mockllm.Call) mockllm.Turn, chunking mockllm.Chunking) (*harness, *toolServer) {
	ts, url := newToolServer(t, 300*time.Millisecond)
	h := newHarness(t, strings.ReplaceAll(toolConfig, "{{HTTP}}", url), mockllm.Options{Respond: respond, Chunking: chunking})
	return h, ts
}

// twoRounds: round 1 calls the calculator, round 2 calls slow_lookup twice in
// parallel, round 3 answers. Usage is fixed per round so the sum is known.
func twoRounds(c *mockllm.Call) mockllm.Turn {
	tools := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array())
	u := &mockllm.Usage{Prompt: 100 * (min(tools, 2) + 1), Completion: 10, Cached: 5}
	switch tools {
	case 0:
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: u}
	case 1:
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{
			{Name: "slow_lookup", Arguments: `{"key":"a"}`}, {Name: "slow_lookup", Arguments: `{"key":"b"}`},
		}, Usage: u}
	default:
		return mockllm.Turn{Text: "Final: " + strings.Join(c.ToolResults, " | "), Usage: u}
	}
}

func TestToolLoopTwoServerRounds(t *testing.T) {
	t.Parallel()
	// The two lookups of round 2 wait for each other at the tool server for
	// up to 5 s, within the tool's timeout (10 s here), so that the server,
	// not the loop, gives up: run one after the other, they never meet.
	ts, url := newToolServer(t, 300*time.Millisecond)
	ts.meetCalls(5*time.Second, "a", "b")
	cfg := strings.Replace(strings.ReplaceAll(toolConfig, "{{HTTP}}", url), `timeout = "2s"`, `timeout = "10s"`, 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: twoRounds})
	schema := wiretest.LoadSchema(t)
	// Usage over the three rounds: prompt 100+200+300, completion 3×10, cached 3×5.
	check := func(u openai.CompletionUsage) {
		t.Helper()
		if u.PromptTokens != 600 || u.CompletionTokens != 30 || u.TotalTokens != 630 || u.PromptTokensDetails.CachedTokens != 15 {
			t.Fatalf("usage %+v", u)
		}
	}

	p := userMsg("compute and look up")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: true}, schema, option.WithHeader("x-gateway-tool-trace", "1"))
	if err != nil {
		t.Fatal(err)
	}
	last := sum.Chunks[len(sum.Chunks)-1]
	if n := len(gjson.GetBytes(last, "x_gateway.tool_calls").Array()); n != 3 {
		t.Fatalf("x_gateway on the last chunk lists %d tool calls: %s", n, last)
	}
	msg := acc.Choices[0].Message
	if len(msg.ToolCalls) != 0 || !strings.HasPrefix(msg.Content, "Final: ") || !strings.Contains(msg.Content, "v-b") || acc.Choices[0].FinishReason != "stop" {
		t.Fatalf("client saw %+v", msg)
	}
	if r := h.mock.Requests(); len(r) < 2 || !strings.Contains(gjson.GetBytes(r[1].Body, `messages.#(role=="tool").content`).Str, "42") {
		t.Fatal("the calculator result did not reach the model in round 2")
	}
	check(acc.Usage)
	if sum.KeepAlives == 0 {
		t.Error("no keep-alive comment while the 300ms tools ran")
	}
	if raw, _ := h.lastRaw(); !bytes.Contains(raw, []byte("\n\n: keep-alive\n\n")) || bytes.Contains(raw, []byte(":  ")) {
		t.Errorf("keep-alive comments are not \": keep-alive\"\n%s", raw)
	}
	// The parallel http calls overlapped: both were at the server at once.
	ts.mu.Lock()
	a, b, apart := ts.windows["a"], ts.windows["b"], ts.apart
	ts.mu.Unlock()
	if a.start.IsZero() || b.start.IsZero() || len(apart) != 0 {
		t.Fatalf("tool calls did not overlap: a=%v..%v b=%v..%v, waited alone: %v", a.start, a.end, b.start, b.end, apart)
	}
	// Every upstream request had a valid history (the mock checks pairing).
	if n := h.mock.Calls("up-model"); n != 3 {
		t.Fatalf("upstream calls %d", n)
	}

	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("compute and look up"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := h.lastRaw()
	if err := schema.Completion(raw); err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != msg.Content || len(resp.Choices[0].Message.ToolCalls) != 0 || resp.Model != "gpt-x" {
		t.Fatalf("non-stream: %+v", resp.Choices[0].Message)
	}
	check(resp.Usage)
}

func TestToolLoopClientCallsNormalized(t *testing.T) {
	t.Parallel()
	calls := []mockllm.ToolCall{
		{ID: "call_1", Name: "lookup_city", Arguments: `{"name":"Zürich 🎉 Ωmega"}`},
		{ID: "call_srv", Name: "calculator", Arguments: `{"expression":"1+1"}`},
		{ID: "call_2", Name: "local_time", Arguments: `{"tz":"Asia/東京"}`},
	}
	h, _ := toolHarness(t, func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "user" {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{calls[0], calls[2]}}
		}
		return mockllm.Turn{Text: "done"}
	}, mockllm.Chunking{ArgBytes: 2, SplitWrites: true, InterleaveToolCalls: true})
	p := userMsg("two client tools")
	p.Tools = []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup_city"}),
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "local_time"}),
	}
	acc, sum, err := h.streamChat(p, wiretest.Options{}, wiretest.LoadSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	got := acc.Choices[0].Message.ToolCalls
	if len(got) != 2 || sum.FinishReason != "tool_calls" {
		t.Fatalf("got %+v", got)
	}
	for i, want := range []mockllm.ToolCall{calls[0], calls[2]} {
		if !sameID(got[i].ID, want.ID) || got[i].Function.Name != want.Name || got[i].Function.Arguments != want.Arguments {
			t.Fatalf("call %d: %+v want %+v", i, got[i], want)
		}
	}
	// A client tool named like a server tool is refused.
	p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "calculator"}))
	_, err = h.client.Chat.Completions.New(context.Background(), p)
	var apiErr *openai.Error
	if !asAPIError(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "tools" {
		t.Fatalf("name clash: %v", err)
	}
}

func TestToolChoiceRequiredServerTool(t *testing.T) {
	t.Parallel()
	h, _ := toolHarness(t, func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"2^10"}`}}}
	}, mockllm.Chunking{})
	p := userMsg("use the calculator")
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
		Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "calculator"}}}
	resp, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Choices[0].Message.Content, "1024") || h.mock.Calls("up-model") != 1 {
		t.Fatalf("content %q after %d model calls", resp.Choices[0].Message.Content, h.mock.Calls("up-model"))
	}
}

func TestToolLoopBudgetsAndRecovery(t *testing.T) {
	t.Parallel()
	// The model keeps calling the calculator, first with bad arguments, then
	// correctly; max_iterations ends the loop with a final tool_choice none call.
	cfgTight := strings.Replace(strings.ReplaceAll(toolConfig, "{{HTTP}}", "http://127.0.0.1:1/"), "[tool_loop]", "[tool_loop]\nmax_iterations = 3", 1)
	h2 := newHarness(t, cfgTight, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if gjson.GetBytes(c.Body, "tool_choice").Str == "none" {
			return mockllm.Turn{Text: "stopping here"}
		}
		if c.N == 1 {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expr":"1+1"}`}}}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}}}
	}})
	resp, err := h2.client.Chat.Completions.New(context.Background(), userMsg("loop forever"), option.WithHeader("x-gateway-tool-trace", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "stopping here" || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("graceful end: %+v", resp.Choices[0])
	}
	raw, _ := h2.lastRaw()
	trace := gjson.GetBytes(raw, "x_gateway")
	if !strings.Contains(trace.Get("stop_reason").Str, "max_iterations") {
		t.Fatalf("trace %s", trace.Raw)
	}
	reqs := h2.mock.Requests()
	// Round 2 saw the validation error of round 1's bad call; round 3 the corrected result.
	second := gjson.GetBytes(reqs[1].Body, `messages.#(role=="tool").content`).Str
	if !strings.Contains(second, `"status":"error"`) || !strings.Contains(second, "expression") {
		t.Fatalf("validation error result: %s", second)
	}
	third := gjson.GetBytes(reqs[2].Body, `messages.#(role=="tool")#.content`).Array()
	if len(third) != 2 || !strings.Contains(third[1].Str, `"status":"ok"`) {
		t.Fatalf("corrected call result: %v", third)
	}
	if n := len(reqs); n != 3 {
		t.Fatalf("model calls %d, want 3 (the last one with tool_choice none)", n)
	}
}

func TestToolTimeoutAndAgentTool(t *testing.T) {
	t.Parallel()
	ts, url := newToolServer(t, 3*time.Second) // longer than the tool's 2s timeout
	_ = ts
	h := newHarness(t, strings.ReplaceAll(toolConfig, "{{HTTP}}", url), mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.Model == "up-expert" {
			return mockllm.Turn{Text: "expert says: " + c.LastText}
		}
		switch len(c.ToolResults) {
		case 0:
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{
				{Name: "slow_lookup", Arguments: `{"key":"t"}`},
				{Name: "ask_expert", Arguments: `{"instruction":"is 42 right?"}`},
			}}
		default:
			return mockllm.Turn{Text: "results: " + strings.Join(c.ToolResults, " | ")}
		}
	}})
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("go"))
	if err != nil {
		t.Fatal(err)
	}
	content := resp.Choices[0].Message.Content
	if !strings.Contains(content, `"status":"error"`) || !strings.Contains(content, "expert says: is 42 right?") {
		t.Fatalf("content %q", content)
	}
	if h.mock.Calls("up-expert") != 1 {
		t.Fatalf("expert calls %d", h.mock.Calls("up-expert"))
	}
	// The agent tool's own model call does not name itself as the model
	// that answered the client, nor count in its attempts (those of the
	// client's first model call, as on a stream).
	if _, hdr := h.lastRaw(); hdr.Get("X-Gateway-Model") != "gpt-x" || hdr.Get("X-Gateway-Attempts") != "1" {
		t.Fatalf("x-gateway-model %q, attempts %q after an agent tool call (the client's first model call made 1 attempt)",
			hdr.Get("X-Gateway-Model"), hdr.Get("X-Gateway-Attempts"))
	}
}

// nodeResponder calls the calculator (a server tool) first, then the
// client's get_weather, then answers with both results: "6*7=42" only when
// the calculator's result is still in the history the client's follow-up
// became upstream, "6*7=?" when it was lost.
func nodeResponder(c *mockllm.Call) mockllm.Turn {
	switch {
	case c.LastRole == "user":
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
	case strings.Contains(strings.Join(c.ToolResults, ""), "temp_c"):
		product := "?"
		if strings.Contains(string(c.Body), `\"result\":42`) {
			product = "42"
		}
		return mockllm.Turn{Text: "6*7=" + product + " and Oslo: " + strings.Join(c.ToolResults, "")}
	default:
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}
	}
}

// TestNodeSDKToolLoop runs test/node/toolloop.mjs: the openai npm package's
// stream() and runTools() against a gateway with a server and a client tool.
func TestNodeSDKToolLoop(t *testing.T) {
	t.Parallel()
	skipWithoutNode(t)
	h, _ := toolHarness(t, nodeResponder, mockllm.Chunking{})
	out := runNode(t, "toolloop.mjs", "GATEWAY_BASE_URL="+h.base, "GATEWAY_MODEL=gpt-x")
	if !strings.Contains(out, "stream: ok") || !strings.Contains(out, "runTools: ok") {
		t.Fatalf("node output: %s", out)
	}
}

// skipWithoutNode skips t unless node and test/node's node_modules are there.
func skipWithoutNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed (.ci/run installs it)")
	}
	if _, err := os.Stat("../test/node/node_modules/openai"); err != nil {
		t.Skip("test/node/node_modules missing: run npm ci in test/node (.ci/run does)")
	}
}

// runNode runs script in test/node with env added, failing t on a non-zero
// exit; it returns the combined output.
func runNode(t *testing.T, script string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir, _ = filepath.Abs("../test/node")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	return string(out)
}

func asAPIError(err error, target **openai.Error) bool { return errors.As(err, target) }

// A client that leaves a non-streamed tool loop cancels the running tool
// (and the loop): the tool server sees its request cancelled long before
// the tool would have finished.
func TestNonStreamDisconnectCancelsTools(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{}, 1)
	started := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http notices a closed client only once the body is read
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(30 * time.Second):
		}
	}))
	defer srv.Close()
	cfg := strings.ReplaceAll(toolConfig, "{{HTTP}}", srv.URL)
	cfg = strings.Replace(cfg, `timeout = "2s"`, `timeout = "60s"`, 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "slow_lookup", Arguments: `{"key":"k"}`}}}
	}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(h.base, "/v1"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"look it up"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the tool never started")
	}
	_ = conn.Close()
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the client left, but its server-side tool kept running")
	}
}

// TestForcedFinalLengthStreamAndJSONAgree is the regression test for the
// end-of-round divergence: the forced final round (max_iterations spent)
// still calls only server tools and the upstream ends it with "length".
// The stream kept "length" and the JSON answer said "stop"; both now keep
// the upstream's "length" (the answer was cut) and drop the server calls.
func TestForcedFinalLengthStreamAndJSONAgree(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(strings.ReplaceAll(toolConfig, "{{HTTP}}", "http://127.0.0.1:1/"), "[tool_loop]", "[tool_loop]\nmax_iterations = 2", 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		calc := []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}}
		if gjson.GetBytes(c.Body, "tool_choice").Str == "none" {
			return mockllm.Turn{Text: "cut", ToolCalls: calc, FinishReason: "length"}
		}
		return mockllm.Turn{ToolCalls: calc}
	}})
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("go"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].FinishReason; got != "length" || len(resp.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("JSON: finish_reason %q, tool calls %d; want length and none", got, len(resp.Choices[0].Message.ToolCalls))
	}
	acc, sum, err := h.streamChat(userMsg("go"), wiretest.Options{}, wiretest.LoadSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	if sum.FinishReason != "length" || len(sum.ToolCalls) != 0 || acc.Choices[0].FinishReason != "length" {
		t.Fatalf("stream: finish_reason %q (accumulated %q), tool calls %d; want length and none", sum.FinishReason, acc.Choices[0].FinishReason, len(sum.ToolCalls))
	}
	if resp.Choices[0].Message.Content != acc.Choices[0].Message.Content {
		t.Fatalf("content: JSON %q, stream %q", resp.Choices[0].Message.Content, acc.Choices[0].Message.Content)
	}
	if n := len(h.mock.Requests()); n != 4 {
		t.Fatalf("model calls %d, want 2 per request", n)
	}
}

// The JSON answer and the stream of a tool-loop request carry the same
// system_fingerprint: the stream's chunks used to lose it whenever the
// request offered tools (the loop rebuilds the chunks).
func TestToolLoopStreamKeepsTheFingerprint(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.ReplaceAll(toolConfig, "{{HTTP}}", "http://127.0.0.1:1/"), mockllm.Options{})
	params := userMsg("hello")
	params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "client_tool"})}
	if _, err := h.client.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	body, _ := h.lastRaw()
	want := gjson.GetBytes(body, "system_fingerprint").Str
	if _, _, err := h.streamChat(params, wiretest.Options{}, wiretest.LoadSchema(t)); err != nil {
		t.Fatal(err)
	}
	raw, _ := h.lastRaw()
	var got []string // every chunk's
	for _, line := range strings.Split(string(raw), "\n") {
		if data, ok := strings.CutPrefix(line, "data: {"); ok {
			got = append(got, gjson.Get("{"+data, "system_fingerprint").Str)
		}
	}
	if want == "" || len(got) == 0 || slices.ContainsFunc(got, func(fp string) bool { return fp != want }) {
		t.Fatalf("JSON system_fingerprint %q, the stream's chunks %q", want, got)
	}
}

// A model that ignores tool_choice "none" and calls a server tool in the
// loop's forced final round: the call is not run, and the answer, which
// may hold no text, ends with finish_reason "length" (a limit ended it),
// in JSON and stream alike, not an empty "stop".
func TestToolLoopFinalRoundCallsEndWithLength(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(strings.ReplaceAll(toolConfig, "{{HTTP}}", "http://127.0.0.1:1/"), "[tool_loop]", "[tool_loop]\nmax_iterations = 2", 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}}}
	}})
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("loop forever"))
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Choices[0]; c.FinishReason != "length" || c.Message.Content != "" || len(c.Message.ToolCalls) != 0 {
		t.Fatalf("JSON: finish %q content %q calls %d, want an empty answer ended by length", c.FinishReason, c.Message.Content, len(c.Message.ToolCalls))
	}
	acc, _, err := h.streamChat(userMsg("loop forever"), wiretest.Options{}, wiretest.LoadSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	if c := acc.Choices[0]; c.FinishReason != "length" || c.Message.Content != "" {
		t.Fatalf("stream: finish %q content %q, want length", c.FinishReason, c.Message.Content)
	}
}

// A JSON answer that fails after the loop ran a server tool (here the
// next round's upstream 500) tells the client not to retry: the official
// SDKs retry a 5xx by default, and the retry would run the tool again.
// A failure before any tool ran stays retryable.
func TestFailureAfterServerToolIsNotRetried(t *testing.T) {
	t.Parallel()
	se, url := newSideEffects(t)
	h := newHarness(t, strings.ReplaceAll(toolConfig, "{{HTTP}}", url), mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		switch {
		case strings.Contains(c.LastText, "fail at once"):
			return mockllm.Turn{Fault: mockllm.StatusFault(500, "server_error", "boom")}
		case c.LastRole == "tool":
			return mockllm.Turn{Fault: mockllm.StatusFault(500, "server_error", "boom")}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "slow_lookup", Arguments: `{"key":"k"}`}}}
	}})
	code, hdr, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"look it up"}]}`, nil)
	if code < 500 || hdr.Get("X-Should-Retry") != "false" || len(se.runs()) != 1 {
		t.Fatalf("after a tool ran: %d x-should-retry %q, tool runs %d: %s", code, hdr.Get("X-Should-Retry"), len(se.runs()), b)
	}
	code, hdr, b = h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"fail at once"}]}`, nil)
	if code < 500 || hdr.Get("X-Should-Retry") == "false" {
		t.Fatalf("before any tool ran: %d x-should-retry %q: %s", code, hdr.Get("X-Should-Retry"), b)
	}
}

// A JSON request the gateway's shutdown ends after a server tool ran is
// answered 503 with x-should-retry: false, as any other failure after a
// tool: an SDK's automatic retry on another replica would run the tool again.
func TestShutdownAfterServerToolIsNotRetried(t *testing.T) {
	t.Parallel()
	se, url := newSideEffects(t)
	h := newHarness(t, strings.ReplaceAll(toolConfig, "{{HTTP}}", url), mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "tool" {
			return mockllm.Turn{Text: "late", Fault: &mockllm.Fault{Stall: time.Minute}}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "slow_lookup", Arguments: `{"key":"k"}`}}}
	}})
	type answer struct {
		code int
		hdr  http.Header
		body []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		// Not h.post: its t.Fatal on this goroutine would leave the test
		// waiting for ever.
		resp, err := http.Post(h.base+"/chat/completions", "application/json",
			strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"look it up"}]}`))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{resp.StatusCode, resp.Header, b, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); len(se.runs()) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the tool never ran")
		}
	}
	time.Sleep(50 * time.Millisecond) // the next round is waiting on the stalled upstream
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
	a := <-done
	if a.err != nil {
		t.Fatalf("the answer at shutdown: %v", a.err)
	}
	if a.code != http.StatusServiceUnavailable || a.hdr.Get("X-Should-Retry") != "false" ||
		gjson.GetBytes(a.body, "error.code").Str != "server_shutting_down" {
		t.Fatalf("%d x-should-retry %q: %s", a.code, a.hdr.Get("X-Should-Retry"), a.body)
	}
}

// "tools": null is no tools, as OpenAI takes it (every other optional
// member set to null is): a tool-loop model answered it 400.
func TestToolsNullIsNoTools(t *testing.T) {
	t.Parallel()
	_, url := newToolServer(t, 0)
	h := newHarness(t, strings.ReplaceAll(toolConfig, "{{HTTP}}", url), mockllm.Options{})
	for _, stream := range []bool{false, true} {
		body := `{"model":"gpt-x","stream":` + strconv.FormatBool(stream) + `,"tools":null,"messages":[{"role":"user","content":"hi"}]}`
		if status, _, raw := h.post("/chat/completions", body, nil); status != 200 {
			t.Fatalf("stream %v: %d %s", stream, status, raw)
		}
	}
}
