package gateway

// One test per streaming, caching, fallback or load bug that other LLM
// gateways have shipped and users keep reporting. Each test fails if this
// gateway makes the same mistake. Tests are named TestPitfall_<Short>; run
// them with `go test -race -run Pitfall ./gateway/`. This file holds the
// streaming tool-call ones; stream_fallback_test.go, cache_key_test.go and
// access_log_load_test.go the others (and observe/log_test.go the logger's
// own bounds).
//
// "Progressive" checks never use a wall-clock upper bound: the upstream is
// put behind a gate (gatedUpstream) that holds the rest of the stream until
// the test's reader has seen the first argument fragments through the
// gateway. A gateway that buffers fragments can only release them after the
// gate opens, which it does on its own after gateHold (a hang-sized
// timeout), and the test then fails because the reader did not open it.

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wiretest"
)

// gateHold is how long a gate waits for the test's reader before it opens
// by itself. It is a hang detector, not a latency bound.
const gateHold = 10 * time.Second

// gatedUpstream is a reverse proxy in front of a mockllm server. Streamed
// chat completions pass through event by event (each flushed), except that
// after the first holdAfter events of a stream it waits until Release (or
// gateHold) before forwarding the rest. Safe for concurrent use.
type gatedUpstream struct {
	target    string // mock base URL ".../v1"
	holdAfter int
	release   chan struct{}
	once      sync.Once
	byReader  atomic.Bool // Release was called before the gate timed out
	timedOut  atomic.Bool
	URL       string // ".../v1"
}

func newGatedUpstream(t *testing.T, mockURL string, holdAfter int) *gatedUpstream {
	g := &gatedUpstream{target: mockURL, holdAfter: holdAfter, release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(func() { g.open(); srv.Close() })
	g.URL = srv.URL + "/v1"
	return g
}

// Release opens the gate; it reports whether this call opened it (false if
// the gate had already timed out).
func (g *gatedUpstream) Release() bool {
	opened := false
	g.once.Do(func() { opened = true; g.byReader.Store(true); close(g.release) })
	return opened
}

func (g *gatedUpstream) open() { g.once.Do(func() { close(g.release) }) }

func (g *gatedUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, g.target+strings.TrimPrefix(r.URL.Path, "/v1"), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if !gjson.GetBytes(body, "stream").Bool() {
		_, _ = io.Copy(w, resp.Body)
		return
	}
	fl := w.(http.Flusher)
	br := bufio.NewReader(resp.Body)
	events := 0
	var ev []byte
	for {
		line, err := br.ReadBytes('\n')
		ev = append(ev, line...)
		if err != nil {
			_, _ = w.Write(ev)
			fl.Flush()
			return
		}
		if len(bytes.TrimRight(line, "\r\n")) != 0 {
			continue
		}
		_, _ = w.Write(ev)
		fl.Flush()
		ev = ev[:0]
		events++
		if events == g.holdAfter {
			select {
			case <-g.release:
			case <-time.After(gateHold):
				g.timedOut.Store(true)
				g.open()
			case <-r.Context().Done():
				return
			}
		}
	}
}

// streamEvent is one SSE event as the client received it.
type streamEvent struct {
	name, data string
}

// rawStream posts body to the gateway's chat endpoint and reads the SSE
// response as it arrives, calling onEvent for every event (in the test's
// goroutine). It returns the status and the raw body.
func rawStream(t *testing.T, base, body string, header map[string]string, onEvent func(streamEvent)) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*gateHold)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	rd := sse.NewReader(io.TeeReader(resp.Body, &raw), sse.DefaultMaxEventBytes)
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		if onEvent != nil {
			onEvent(streamEvent{name: string(ev.Name), data: string(ev.Data)})
		}
	}
	return resp.StatusCode, raw.Bytes()
}

// argFragment reports whether a chunk carries a tool-call entry with
// non-empty arguments and no id (a later fragment, not a header).
func argFragment(data string) bool {
	e := gjson.Get(data, "choices.0.delta.tool_calls.0")
	return e.Exists() && !e.Get("id").Exists() && e.Get("function.arguments").Str != ""
}

// clientTools is a tools array with two client functions.
const clientTools = `[{"type":"function","function":{"name":"lookup_city","parameters":{"type":"object"}}},{"type":"function","function":{"name":"local_time","parameters":{"type":"object"}}}]`

// twoClientCalls are the calls the model makes in the streaming tool tests:
// long arguments with multi-byte runes, so there are many fragments.
var twoClientCalls = []mockllm.ToolCall{
	{ID: "call_city", Name: "lookup_city", Arguments: `{"name":"Zürich – Ω 🎉","country":"Schweiz","limit":3,"fields":["population","area","elevation"]}`},
	{ID: "call_time", Name: "local_time", Arguments: `{"tz":"Europe/Москва","format":"RFC3339"}`},
}

// toolPath is one way a client tool call can go through the gateway.
type toolPath struct {
	name   string
	config string // gateway config; {{MOCK}} is the upstream
	extra  string // extra request members, with a leading comma
}

// toolPaths: the fast path (no server tool: the upstream stream is relayed),
// the tool loop (a server tool is offered, so the loop re-streams the
// client's calls), and the fast path behind a response-cache miss (the cache
// records the stream while relaying it).
var toolPaths = []toolPath{
	{name: "fast path", config: baseConfig},
	{name: "tool loop", config: mixedConfig},
	{name: "cache miss", config: cacheConfig, extra: `,"temperature":0`},
}

// progressiveToolStream runs one streamed request with two client calls
// behind a gate that holds the upstream after the role chunk, the first
// call's header and 4 argument fragments, and checks that fragments reached
// the client before the gate opened and that the calls are complete.
func progressiveToolStream(t *testing.T, p toolPath, includeUsage bool) {
	t.Helper()
	mock := mockllm.New(mockllm.Options{
		Respond:  mockllm.Sequence(mockllm.Turn{ToolCalls: twoClientCalls, Usage: &mockllm.Usage{Prompt: 40, Completion: 30, Cached: 8}}),
		Chunking: mockllm.Chunking{ArgBytes: 4},
	})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	gate := newGatedUpstream(t, mockURL, 2+4)
	h := newHarness(t, strings.ReplaceAll(p.config, "{{MOCK}}", gate.URL), mockllm.Options{})

	body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"where and when?"}],"tools":` + clientTools + p.extra
	if includeUsage {
		body += `,"stream_options":{"include_usage":true}`
	}
	body += "}"
	var before, total int // argument fragments seen before the gate opened / in all
	status, raw := rawStream(t, h.base, body, nil, func(ev streamEvent) {
		if !argFragment(ev.data) {
			return
		}
		total++
		if !gate.byReader.Load() && !gate.timedOut.Load() {
			before++
			if before == 2 {
				gate.Release()
			}
		}
	})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	if !gate.byReader.Load() {
		t.Fatalf("the upstream had sent 4 argument fragments and waited, but only %d reached the client before the rest of the stream (%d fragments in all): the gateway held them back", before, total)
	}
	sum := wiretest.CheckStreamAll(t, raw, wiretest.Options{WantUsage: includeUsage}, wiretest.LoadSchema(t))
	checkCalls(t, sum, twoClientCalls)
	if total < 10 {
		t.Fatalf("only %d argument fragments: the arguments were merged", total)
	}
	if includeUsage && gjson.GetBytes(sum.Usage, "total_tokens").Int() != 70 {
		t.Fatalf("usage %s", sum.Usage)
	}
}

// checkCalls compares the calls a client accumulated with the model's.
// sameID: the client sees the upstream's call id, or, when server tools
// run, the gateway's own unguessable id (toolloop.newCallID: "call_" and 26
// base32 characters). Either way the id is present and complete.
func sameID(got, upstream string) bool {
	return got == upstream || (strings.HasPrefix(got, "call_") && len(got) == 31 && got != upstream)
}

func checkCalls(t *testing.T, sum *wiretest.Summary, want []mockllm.ToolCall) {
	t.Helper()
	if len(sum.ToolCalls) != len(want) || sum.FinishReason != "tool_calls" {
		t.Fatalf("client got %d calls (finish %q), want %d: %+v", len(sum.ToolCalls), sum.FinishReason, len(want), sum.ToolCalls)
	}
	for i, w := range want {
		g := sum.ToolCalls[i]
		if g.Index != i || !sameID(g.ID, w.ID) || g.Name != w.Name || g.Arguments != w.Arguments {
			t.Fatalf("call %d = %+v, want %+v", i, g, w)
		}
	}
}

// Pitfall: argument deltas after the first one dropped or delayed until the
// end of the stream (a re-chunker keyed on id, which only the first delta
// carries). See also TestStreamingParallelClientToolCalls and
// TestToolLoopClientCallsNormalized, which check the accumulated arguments
// but not that they arrive progressively.
func TestPitfall_ArgDeltasAfterFirstDropped(t *testing.T) {
	t.Parallel()
	for _, p := range toolPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			progressiveToolStream(t, p, false)
		})
	}
}

// Pitfall: stream_options.include_usage made the proxy buffer tool-call
// arguments into one burst at the end.
func TestPitfall_IncludeUsageBuffersArgs(t *testing.T) {
	t.Parallel()
	for _, p := range toolPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			progressiveToolStream(t, p, true)
		})
	}
}

// streamToolPaths runs one streamed client-tool request through the fast
// path and the tool loop with the mock's chunking ch, and checks the raw
// stream (wire checker) and the SDK accumulator against calls.
func streamToolPaths(t *testing.T, ch mockllm.Chunking, calls []mockllm.ToolCall) {
	t.Helper()
	for _, p := range toolPaths[:2] {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, p.config, mockllm.Options{
				Respond:  mockllm.Sequence(mockllm.Turn{ToolCalls: calls}),
				Chunking: ch,
			})
			body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"where and when?"}],"tools":` + clientTools + `}`
			status, raw := rawStream(t, h.base, body, nil, nil)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, raw)
			}
			sum := wiretest.CheckStreamAll(t, raw, wiretest.Options{}, wiretest.LoadSchema(t))
			checkCalls(t, sum, calls)
			// The SDK accumulator agrees.
			acc, _, err := h.streamChat(toolParams(), wiretest.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := acc.Choices[0].Message.ToolCalls
			if len(got) != len(calls) {
				t.Fatalf("SDK accumulated %d calls: %+v", len(got), got)
			}
			for i, c := range calls {
				if !sameID(got[i].ID, c.ID) || got[i].Function.Name != c.Name || got[i].Function.Arguments != c.Arguments || got[i].Type != "function" {
					t.Fatalf("SDK call %d = %+v, want %+v", i, got[i], c)
				}
			}
		})
	}
}

// toolParams is the SDK form of the client-tool request of streamToolPaths.
func toolParams() openai.ChatCompletionNewParams {
	p := userMsg("where and when?")
	p.Tools = []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup_city", Parameters: openai.FunctionParameters{"type": "object"}}),
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "local_time", Parameters: openai.FunctionParameters{"type": "object"}}),
	}
	return p
}

// Pitfall: a tool call sent whole in one upstream delta came out without its
// id or function.name.
func TestPitfall_WholeToolCallKeepsIDAndName(t *testing.T) {
	t.Parallel()
	streamToolPaths(t, mockllm.Chunking{WholeToolCalls: true}, twoClientCalls)
}

// Pitfall: parallel tool calls mis-indexed when fragments of several calls
// were interleaved. The upstream interleaves (0,1,0,1,...) in 2-byte
// fragments. Whatever the path, every fragment must land under its own
// call (checked per index on the raw stream and through the SDK
// accumulator) with dense indices; the tool loop must also re-stream the
// calls one after the other (docs/wire.md rule 9, enforced by the checker).
// See also TestToolLoopClientCallsNormalized (tool loop only).
func TestPitfall_InterleavedParallelCallsIndexed(t *testing.T) {
	t.Parallel()
	calc := mockllm.ToolCall{ID: "call_calc", Name: "calculator", Arguments: `{"expression":"6*7"}`}
	cases := []struct {
		name, config string
		calls, want  []mockllm.ToolCall
	}{
		{"fast path", baseConfig, twoClientCalls, twoClientCalls},
		{"tool loop", mixedConfig, twoClientCalls, twoClientCalls},
		// The server call at index 0 is hidden: the client calls are renumbered 0, 1.
		{"tool loop, server call hidden", mixedConfig, append([]mockllm.ToolCall{calc}, twoClientCalls...), twoClientCalls},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.config, mockllm.Options{
				Respond: func(call *mockllm.Call) mockllm.Turn {
					if call.LastRole == "tool" { // a mixed turn resumed: not reached here
						return mockllm.Turn{Text: "done"}
					}
					return mockllm.Turn{ToolCalls: c.calls}
				},
				Chunking: mockllm.Chunking{ArgBytes: 2, InterleaveToolCalls: true, SplitWrites: true},
			})
			body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"where and when?"}],"tools":` + clientTools + `}`
			status, raw := rawStream(t, h.base, body, nil, nil)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, raw)
			}
			// Per-index accumulation, independent of the order rule.
			got := callsByIndex(t, raw)
			if len(got) != len(c.want) {
				t.Fatalf("client saw %d call indices: %+v", len(got), got)
			}
			for i, w := range c.want {
				if g := got[i]; !sameID(g.ID, w.ID) || g.Name != w.Name || g.Arguments != w.Arguments {
					t.Fatalf("index %d accumulates %+v, want %+v", i, g, w)
				}
			}
			acc, err := sdkStream(h, toolParams())
			if err != nil {
				t.Fatal(err)
			}
			sdk := acc.Choices[0].Message.ToolCalls
			if len(sdk) != len(c.want) {
				t.Fatalf("SDK accumulated %d calls: %+v", len(sdk), sdk)
			}
			for i, w := range c.want {
				if !sameID(sdk[i].ID, w.ID) || sdk[i].Function.Name != w.Name || sdk[i].Function.Arguments != w.Arguments || sdk[i].Type != "function" {
					t.Fatalf("SDK call %d = %+v, want %+v", i, sdk[i], w)
				}
			}
			// Every other wire rule, the order of calls included.
			if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil {
				t.Fatalf("%v", err)
			}
			checkCalls(t, wiretest.CheckStreamAll(t, raw, wiretest.Options{}, wiretest.LoadSchema(t)), c.want)
		})
	}
}

// sdkStream runs a streamed request through openai-go's accumulator only
// (no wire check), for streams a test checks by other means.
func sdkStream(h *harness, p openai.ChatCompletionNewParams) (openai.ChatCompletion, error) {
	h.t.Helper()
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), p)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			h.t.Errorf("accumulator refused chunk %s", stream.Current().RawJSON())
		}
	}
	return acc.ChatCompletion, stream.Err()
}

// callsByIndex accumulates the tool calls of choice 0 of a raw stream by
// their index, as the SDK accumulators do; it fails on an entry without an
// index or a header repeated.
func callsByIndex(t *testing.T, raw []byte) map[int]wiretest.ToolCall {
	t.Helper()
	out := map[int]wiretest.ToolCall{}
	rd := sse.NewReader(bytes.NewReader(raw), sse.DefaultMaxEventBytes)
	for {
		ev, err := rd.Next()
		if err != nil {
			return out
		}
		gjson.GetBytes(ev.Data, "choices.0.delta.tool_calls").ForEach(func(_, e gjson.Result) bool {
			if !e.Get("index").Exists() {
				t.Fatalf("tool-call entry without index: %s", ev.Data)
			}
			i := int(e.Get("index").Int())
			c := out[i]
			if id := e.Get("id").Str; id != "" {
				if c.ID != "" {
					t.Fatalf("index %d: id sent twice: %s", i, ev.Data)
				}
				c.ID = id
			}
			c.Name += e.Get("function.name").Str
			c.Arguments += e.Get("function.arguments").Str
			c.Index = i
			out[i] = c
			return true
		})
	}
}

// Pitfall: the opening role delta dropped, or repeated, breaking SDK
// accumulators. The wire checker enforces it on every streaming test; here
// it is asserted explicitly on the paths where a repeat is most likely: the
// tool loop's later rounds, a cache replay, and a fallback after the failed
// attempt had already sent its own role chunk.
func TestPitfall_RoleOnce(t *testing.T) {
	t.Parallel()
	calcThenAnswer := func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "tool" {
			return mockllm.Turn{Text: "six times seven is " + strings.Join(c.ToolResults, "")}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
	}
	fallbackAfterRole := byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Text: "never seen", Fault: mockllm.CutFault(1)} },
	})
	cases := []struct {
		name, config, body string
		respond            func(*mockllm.Call) mockllm.Turn
		repeat             int // requests sent; the last one is checked
	}{
		{"text, fast path", baseConfig, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			mockllm.Sequence(mockllm.Turn{Text: "hello there"}), 1},
		{"client calls, tool loop", mixedConfig, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":` + clientTools + `}`,
			mockllm.Sequence(mockllm.Turn{ToolCalls: twoClientCalls}), 1},
		{"server tool rounds", mixedConfig, `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"6*7?"}]}`,
			calcThenAnswer, 1},
		{"cache replay", cacheConfig, `{"model":"gpt-x","stream":true,"temperature":0,"messages":[{"role":"user","content":"hi"}]}`,
			numbered, 2},
		{"fallback after the primary's role chunk", fallbackConfig, `{"model":"primary","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			fallbackAfterRole, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.config, mockllm.Options{Respond: c.respond})
			var roles []int // chunk numbers carrying a role
			var values []string
			for i := 0; i < c.repeat; i++ {
				roles, values = nil, nil
				n := 0
				status, raw := rawStream(t, h.base, c.body, nil, func(ev streamEvent) {
					if ev.data == "[DONE]" {
						return
					}
					n++
					if r := gjson.Get(ev.data, "choices.0.delta.role"); r.Exists() {
						roles = append(roles, n)
						values = append(values, r.Raw)
					}
				})
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, raw)
				}
				wiretest.CheckStreamAll(t, raw, wiretest.Options{WantUsage: strings.Contains(c.body, "include_usage")}, nil)
			}
			if c.repeat > 1 && h.mock.Calls("up-model") != 1 {
				t.Fatalf("the repeat was not a cache hit: %d upstream calls", h.mock.Calls("up-model"))
			}
			if len(roles) != 1 || roles[0] != 1 || values[0] != `"assistant"` {
				t.Fatalf("role sent on chunks %v as %v; want once, on chunk 1, as \"assistant\"", roles, values)
			}
		})
	}
}
