package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testredis"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// These tests prove the response cache and the prompt-cache middleware end to
// end: openai-go → gateway (request layer with the cache, tool loop,
// model-call layer with prompt_cache) → mockllm.

// cacheConfig turns the response cache on (memory store, default request layer).
const cacheConfig = baseConfig + `
[middleware.cache]
enabled = true
`

// numbered answers every call with a text naming the call's number, so a
// test can tell a cached answer from a fresh one. The text is longer than a
// replay fragment and holds multi-byte runes.
func numbered(c *mockllm.Call) mockllm.Turn {
	return mockllm.Turn{
		Text:  fmt.Sprintf("answer %d to %q: ünïcødé 🎉 %s", c.N, c.LastText, strings.Repeat("lorem ipsum ", 8)),
		Usage: &mockllm.Usage{Prompt: 12, Completion: 7, Cached: 3},
	}
}

// det is a deterministic (cacheable) request.
func det(q string) openai.ChatCompletionNewParams {
	p := userMsg(q)
	p.Temperature = openai.Float(0)
	return p
}

// chat sends a non-stream request and returns the completion and the
// x-gateway-cache header. Safe for concurrent use.
func (h *harness) chat(p openai.ChatCompletionNewParams, opts ...option.RequestOption) (*openai.ChatCompletion, string) {
	h.t.Helper()
	var hr *http.Response
	resp, err := h.client.Chat.Completions.New(context.Background(), p, append(opts, option.WithResponseInto(&hr))...)
	if err != nil {
		h.t.Fatalf("chat: %v", err)
	}
	return resp, hr.Header.Get("x-gateway-cache")
}

func TestCacheHitMissBypassAndHints(t *testing.T) {
	t.Parallel()
	h := newHarness(t, cacheConfig, mockllm.Options{Respond: numbered})
	calls := func() int { return h.mock.Calls("up-model") }
	steps := []struct {
		name   string
		params openai.ChatCompletionNewParams
		hint   string
		header string // x-gateway-cache
		calls  int    // upstream calls after the step
		answer int    // which upstream call produced the content
	}{
		{"first ask", det("q1"), "", "miss", 1, 1},
		{"repeat", det("q1"), "", "hit", 1, 1},
		{"hint is case and space tolerant", det("q1"), " TTL=60 ", "hit", 1, 1},
		{"temperature absent", userMsg("q1"), "", "bypass", 2, 2},
		{"temperature 0.7", func() openai.ChatCompletionNewParams { p := userMsg("q1"); p.Temperature = openai.Float(0.7); return p }(), "", "bypass", 3, 3},
		{"no-cache skips the lookup", det("q1"), "no-cache", "bypass", 4, 4},
		{"no-cache refreshed the entry", det("q1"), "", "hit", 4, 4},
		{"no-store", det("q2"), "no-store", "miss", 5, 5},
		{"no-store stored nothing", det("q2"), "", "miss", 6, 6},
		{"then cached", det("q2"), "", "hit", 6, 6},
		{"ttl=0 is no-store", det("q3"), "ttl=0", "miss", 7, 7},
		{"ttl=0 stored nothing", det("q3"), "", "miss", 8, 8},
		{"no-cache, no-store", det("q3"), "no-cache, no-store", "bypass", 9, 9},
		{"the entry of step 12 is kept", det("q3"), "", "hit", 9, 8},
	}
	for _, s := range steps {
		var opts []option.RequestOption
		if s.hint != "" {
			opts = append(opts, option.WithHeader("x-gateway-cache", s.hint))
		}
		resp, hv := h.chat(s.params, opts...)
		content := resp.Choices[0].Message.Content
		if hv != s.header || calls() != s.calls || !strings.HasPrefix(content, "answer "+strconv.Itoa(s.answer)+" ") {
			t.Fatalf("%s: x-gateway-cache %q (want %q), upstream calls %d (want %d), content %q (want answer %d)",
				s.name, hv, s.header, calls(), s.calls, content, s.answer)
		}
		if resp.Model != "gpt-x" || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Usage.PromptTokens != 12 {
			t.Fatalf("%s: %+v", s.name, resp)
		}
	}
}

func TestCacheTTLExpiry(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	h := newHarness(t, cacheConfig+"ttl = \"300ms\"\n", mockllm.Options{Respond: numbered})
	start := time.Now() // the entry expires no earlier than start+ttl
	if _, hv := h.chat(det("q")); hv != "miss" {
		t.Fatalf("first: %q", hv)
	}
	stored := time.Now() // ... and no later than stored+ttl
	_, hv := h.chat(det("q"))
	switch {
	case time.Since(start) < ttl && hv != "hit":
		t.Fatalf("within the ttl: %q", hv)
	case hv != "hit":
		t.Logf("the box was too slow to see the hit before the ttl (%q)", hv)
	}
	time.Sleep(time.Until(stored.Add(ttl + 50*time.Millisecond)))
	before := h.mock.Calls("up-model")
	resp, hv := h.chat(det("q"))
	if hv != "miss" || h.mock.Calls("up-model") != before+1 || !strings.HasPrefix(resp.Choices[0].Message.Content, "answer "+strconv.Itoa(before+1)+" ") {
		t.Fatalf("after the ttl: %q, calls %d, %q", hv, h.mock.Calls("up-model"), resp.Choices[0].Message.Content)
	}
	if _, hv := h.chat(det("q")); hv != "hit" && time.Since(start) < 2*ttl {
		t.Fatalf("refilled: %q", hv)
	}
}

// streamed runs p as a stream (with or without include_usage) through the
// accumulator and the wire checker; it returns the accumulated completion,
// the checker's summary and x-gateway-cache.
func (h *harness) streamed(p openai.ChatCompletionNewParams, usage bool, schema *wiretest.Schema) (openai.ChatCompletion, *wiretest.Summary, string) {
	h.t.Helper()
	if usage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	var hr *http.Response
	acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: usage}, schema, option.WithResponseInto(&hr))
	if err != nil {
		h.t.Fatalf("stream: %v", err)
	}
	return acc, sum, hr.Header.Get("x-gateway-cache")
}

func TestCacheStreamJSONCrossReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, cacheConfig, mockllm.Options{Respond: numbered, Chunking: mockllm.Chunking{TextRunes: 3}})
	schema := wiretest.LoadSchema(t)
	calls := func() int { return h.mock.Calls("up-model") }
	wantUsage := func(name string, u openai.CompletionUsage) {
		t.Helper()
		if u.PromptTokens != 12 || u.CompletionTokens != 7 || u.TotalTokens != 19 || u.PromptTokensDetails.CachedTokens != 3 {
			t.Fatalf("%s: usage %+v", name, u)
		}
	}
	jsonCheck := func(name string, resp *openai.ChatCompletion, hv, want string) {
		t.Helper()
		raw, _ := h.lastRaw()
		if err := schema.Completion(raw); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, raw)
		}
		if hv != want || resp.Model != "gpt-x" || resp.Choices[0].FinishReason != "stop" || gjson.GetBytes(raw, "x_gateway").Exists() {
			t.Fatalf("%s: %q %s", name, hv, raw)
		}
		wantUsage(name, resp.Usage)
	}

	// JSON fills, streams replay (with and without usage).
	resp, hv := h.chat(det("json first"))
	jsonCheck("json fill", resp, hv, "miss")
	for _, usage := range []bool{true, false} {
		acc, sum, hv := h.streamed(det("json first"), usage, schema)
		name := "stream replay, usage " + strconv.FormatBool(usage)
		if hv != "hit" || calls() != 1 || acc.Choices[0].Message.Content != resp.Choices[0].Message.Content ||
			sum.Content != resp.Choices[0].Message.Content || sum.FinishReason != "stop" || sum.Model != "gpt-x" || acc.ID == resp.ID {
			t.Fatalf("%s: %q, calls %d, %q vs %q", name, hv, calls(), acc.Choices[0].Message.Content, resp.Choices[0].Message.Content)
		}
		if len(sum.Chunks) < 5 { // role, several content fragments, finish
			t.Fatalf("%s: %d chunks", name, len(sum.Chunks))
		}
		if usage {
			wantUsage(name, acc.Usage)
		} else if sum.Usage != nil {
			t.Fatalf("%s: usage sent unasked: %s", name, sum.Usage)
		}
	}

	// A stream with usage fills: JSON and streams replay it.
	acc, _, hv := h.streamed(det("stream first"), true, schema)
	if hv != "miss" || calls() != 2 {
		t.Fatalf("stream fill: %q", hv)
	}
	wantUsage("stream fill", acc.Usage)
	resp, hv = h.chat(det("stream first"))
	jsonCheck("json replay of a stream", resp, hv, "hit")
	for _, usage := range []bool{true, false} {
		acc2, _, hv := h.streamed(det("stream first"), usage, schema)
		if hv != "hit" || calls() != 2 || acc2.Choices[0].Message.Content != acc.Choices[0].Message.Content || resp.Choices[0].Message.Content != acc.Choices[0].Message.Content {
			t.Fatalf("stream replay of a stream, usage %v: %q, calls %d", usage, hv, calls())
		}
		if usage {
			wantUsage("stream replay of a stream", acc2.Usage)
		}
	}

	// A stream without usage fills an entry with the usage of its call
	// (the meter noted it as it took it out of the stream): the entry
	// answers every client, those that ask for usage with the call's.
	q := "stream without usage first"
	acc, _, hv = h.streamed(det(q), false, schema)
	if hv != "miss" || calls() != 3 {
		t.Fatalf("%s: fill %q", q, hv)
	}
	if _, sum, hv := h.streamed(det(q), false, schema); hv != "hit" || calls() != 3 || sum.Usage != nil {
		t.Fatalf("%s: plain stream replay %q, usage %s", q, hv, sum.Usage)
	}
	acc2, _, hv := h.streamed(det(q), true, schema)
	if hv != "hit" || calls() != 3 || acc2.Choices[0].Message.Content != acc.Choices[0].Message.Content {
		t.Fatalf("%s: usage stream replay %q, calls %d", q, hv, calls())
	}
	wantUsage(q+": usage stream replay", acc2.Usage)
	resp, hv = h.chat(det(q))
	jsonCheck(q+": json replay", resp, hv, "hit")
	if calls() != 3 || resp.Choices[0].Message.Content != acc.Choices[0].Message.Content {
		t.Fatalf("%s: %q", q, resp.Choices[0].Message.Content)
	}
	_ = acc
}

// tenantsConfig has two keys, two tenants, the cache on.
const tenantsConfig = cacheConfig + `
[[keys]]
tenant = "team-a"
key = "k-a"
[[keys]]
tenant = "team-b"
key = "k-b"
`

func TestCacheTenantsNeverShare(t *testing.T) {
	t.Parallel()
	h := newHarness(t, tenantsConfig, mockllm.Options{Respond: numbered})
	steps := []struct {
		key, header string
		calls       int
	}{
		{"k-a", "miss", 1},
		{"k-b", "miss", 2},
		{"k-a", "hit", 2},
		{"k-b", "hit", 2},
	}
	answers := map[string]string{}
	for i, s := range steps {
		resp, hv := h.chat(det("the same question"), option.WithAPIKey(s.key))
		if hv != s.header || h.mock.Calls("up-model") != s.calls {
			t.Fatalf("step %d (%s): %q, upstream calls %d", i, s.key, hv, h.mock.Calls("up-model"))
		}
		if prev, ok := answers[s.key]; ok && prev != resp.Choices[0].Message.Content {
			t.Fatalf("step %d (%s): %q, earlier %q", i, s.key, resp.Choices[0].Message.Content, prev)
		}
		answers[s.key] = resp.Choices[0].Message.Content
	}
	if answers["k-a"] == answers["k-b"] {
		t.Fatalf("both tenants got %q", answers["k-a"])
	}
}

func TestCacheSingleFlight(t *testing.T) {
	t.Parallel()
	// The delay keeps the first call in flight while the others arrive.
	h := newHarness(t, cacheConfig, mockllm.Options{Respond: numbered, FirstByteDelay: 300 * time.Millisecond})
	const n = 10
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		headers  = map[string]int{}
		contents = map[string]int{}
	)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			var hr *http.Response
			resp, err := h.client.Chat.Completions.New(context.Background(), det("together"), option.WithResponseInto(&hr))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			headers[hr.Header.Get("x-gateway-cache")]++
			contents[resp.Choices[0].Message.Content]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if c := h.mock.Calls("up-model"); c != 1 {
		t.Fatalf("%d upstream calls for %d identical requests", c, n)
	}
	if headers["miss"] != 1 || headers["hit"] != n-1 || len(contents) != 1 {
		t.Fatalf("headers %v, contents %v", headers, contents)
	}
}

func TestCacheRedisStoreFailsOpen(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	h := newHarness(t, cacheConfig+"store = \"redis\"\n[redis]\naddr = \""+rs.Addr()+"\"\ntimeout = \"300ms\"\n",
		mockllm.Options{Respond: numbered})
	expect := func(step, q, header string, calls int) {
		t.Helper()
		if _, hv := h.chat(det(q)); hv != header || h.mock.Calls("up-model") != calls {
			t.Fatalf("%s: x-gateway-cache %q (want %q), upstream calls %d (want %d)", step, hv, header, h.mock.Calls("up-model"), calls)
		}
	}
	expect("fill", "q1", "miss", 1)
	expect("hit", "q1", "hit", 1)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	keys, err := rc.Keys(context.Background(), "gw:cache:*").Result()
	_ = rc.Close()
	if err != nil || len(keys) != 1 {
		t.Fatalf("redis keys %v: %v", keys, err)
	}

	rs.Stop()
	expect("redis down", "q1", "bypass", 2)
	expect("redis still down", "q1", "bypass", 3)

	rs.Start() // same port, empty
	// The calls of the outage pause after the last failed one still skip
	// Redis (see outage); the first after it finds Redis back. On a loaded
	// machine that call's dial may still miss its timeout and pause again:
	// the test waits for the first call that reaches Redis, which misses
	// (the restarted Redis is empty), and the next one hits.
	time.Sleep(outagePause)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(outagePause) {
		_, hv := h.chat(det("q1"))
		if hv == "miss" {
			break
		}
		if hv != "bypass" || time.Now().After(deadline) {
			t.Fatalf("redis back: x-gateway-cache %q (want miss, after bypasses while the dial fails)", hv)
		}
	}
	expect("caching resumed", "q1", "hit", h.mock.Calls("up-model"))
}

// promptConfig has one provider per prompt-cache mode on the same mock and
// the builtin calculator as a server tool.
const promptConfig = `
[server]
log_level = "warn"
[[providers]]
name = "anth"
kind = "openai"
base_url = "{{MOCK}}"
api_key = "sk-a"
retries = 0
prompt_cache = "anthropic"
[[providers]]
name = "oai"
kind = "openai"
base_url = "{{MOCK}}"
api_key = "sk-o"
retries = 0
prompt_cache = "openai"
[[models]]
name = "claude-x"
provider = "anth"
upstream = "up-anth"
[[models]]
name = "gpt-o"
provider = "oai"
upstream = "up-oai"
[[tools]]
name = "calculator"
kind = "builtin"
parameters = '{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"],"additionalProperties":false}'
`

// cachedPerRound is the cached prompt tokens the mock reports in rounds 1-3.
var cachedPerRound = []int{0, 90, 140}

// twoCalcRounds runs two calculator rounds then answers; a request whose last
// text mentions "one round" is answered at once.
func twoCalcRounds(c *mockllm.Call) mockllm.Turn {
	round := len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array())
	u := &mockllm.Usage{Prompt: 100 + 50*round, Completion: 10, Cached: cachedPerRound[min(round, 2)]}
	switch {
	case strings.Contains(c.LastText, "one round") || round >= 2:
		return mockllm.Turn{Text: "done: " + strings.Join(c.ToolResults, " | "), Usage: u}
	case round == 0:
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: u}
	default:
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"42+1"}`}}, Usage: u}
	}
}

// markerPaths lists every cache_control marker of an upstream body.
func markerPaths(body []byte) []string {
	var out []string
	if gjson.GetBytes(body, "cache_control").Exists() {
		out = append(out, "cache_control")
	}
	for i, tool := range gjson.GetBytes(body, "tools").Array() {
		for _, p := range []string{"cache_control", "function.cache_control"} {
			if tool.Get(p).Exists() {
				out = append(out, fmt.Sprintf("tools.%d.%s", i, p))
			}
		}
	}
	for i, m := range gjson.GetBytes(body, "messages").Array() {
		if m.Get("cache_control").Exists() {
			out = append(out, fmt.Sprintf("messages.%d.cache_control", i))
		}
		for j, part := range m.Get("content").Array() {
			if part.IsObject() && part.Get("cache_control").Exists() {
				out = append(out, fmt.Sprintf("messages.%d.content.%d.cache_control", i, j))
			}
		}
	}
	return out
}

const clientMarker = `{"type":"ephemeral","ttl":"1h"}`

// markedHistory is a conversation whose system message and first user
// message carry client markers (distinguishable by their ttl).
func markedHistory(model, last string) (openai.ChatCompletionNewParams, []option.RequestOption) {
	p := openai.ChatCompletionNewParams{
		Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage([]openai.ChatCompletionContentPartTextParam{{Text: "You are terse."}}),
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("Reference document: " + strings.Repeat("x", 200))}),
			openai.AssistantMessage("Noted."),
			openai.UserMessage(last),
		},
	}
	marker := json.RawMessage(clientMarker)
	return p, []option.RequestOption{
		option.WithJSONSet("messages.0.content.0.cache_control", marker),
		option.WithJSONSet("messages.1.content.0.cache_control", marker),
	}
}

func requestsFor(h *harness, model string) []mockllm.Recorded {
	var out []mockllm.Recorded
	for _, r := range h.mock.Requests() {
		if r.Model == model {
			out = append(out, r)
		}
	}
	return out
}

func TestPromptCacheBreakpointsThroughToolLoop(t *testing.T) {
	t.Parallel()
	h := newHarness(t, promptConfig, mockllm.Options{Respond: twoCalcRounds})
	p, opts := markedHistory("claude-x", "compute please")
	resp, err := h.client.Chat.Completions.New(context.Background(), p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Choices[0].Message.Content, "43") {
		t.Fatalf("content %q", resp.Choices[0].Message.Content)
	}
	rounds := requestsFor(h, "up-anth")
	if len(rounds) != 3 {
		t.Fatalf("%d upstream rounds, want 3", len(rounds))
	}
	lastMarked := -1
	for i, r := range rounds {
		paths := markerPaths(r.Body)
		if len(paths) > 4 {
			t.Fatalf("round %d: %d markers %v", i+1, len(paths), paths)
		}
		// The client's markers are kept, verbatim, every round.
		for _, cp := range []string{"messages.0.content.0.cache_control", "messages.1.content.0.cache_control"} {
			if got := gjson.GetBytes(r.Body, cp).Raw; got != clientMarker {
				t.Fatalf("round %d: client marker %s = %q", i+1, cp, got)
			}
		}
		// The last tool and the last message carry the gateway's marker.
		msgs := len(gjson.GetBytes(r.Body, "messages").Array())
		tools := len(gjson.GetBytes(r.Body, "tools").Array())
		want := []string{
			"messages.0.content.0.cache_control", "messages.1.content.0.cache_control",
			fmt.Sprintf("messages.%d.content.0.cache_control", msgs-1),
			fmt.Sprintf("tools.%d.cache_control", tools-1),
		}
		slices.Sort(want)
		slices.Sort(paths)
		if !slices.Equal(paths, want) {
			t.Fatalf("round %d: markers %v, want %v", i+1, paths, want)
		}
		if m := gjson.GetBytes(r.Body, want[2]).Raw; m != `{"type":"ephemeral"}` {
			t.Fatalf("round %d: gateway marker %s", i+1, m)
		}
		if msgs-1 <= lastMarked {
			t.Fatalf("round %d: last-message marker at %d, previous round %d", i+1, msgs-1, lastMarked)
		}
		lastMarked = msgs - 1
		if gjson.GetBytes(r.Body, "prompt_cache_key").Exists() {
			t.Fatalf("round %d: prompt_cache_key sent to an anthropic provider", i+1)
		}
	}

	// Client markers count toward the 4: with three client markers on
	// messages that are not breakpoints, only the tool marker fits.
	p, opts = markedHistory("claude-x", "one round only")
	marker := json.RawMessage(clientMarker)
	p.Messages = append(p.Messages[:3], openai.AssistantMessage([]openai.ChatCompletionAssistantMessageParamContentArrayOfContentPartUnion{
		{OfText: &openai.ChatCompletionContentPartTextParam{Text: "Anything else?"}}}), p.Messages[3])
	opts = append(opts, option.WithJSONSet("messages.3.content.0.cache_control", marker))
	if _, err := h.client.Chat.Completions.New(context.Background(), p, opts...); err != nil {
		t.Fatal(err)
	}
	rounds = requestsFor(h, "up-anth")
	body := rounds[len(rounds)-1].Body
	paths := markerPaths(body)
	tools := len(gjson.GetBytes(body, "tools").Array())
	if len(paths) != 4 || !slices.Contains(paths, fmt.Sprintf("tools.%d.cache_control", tools-1)) {
		t.Fatalf("with three client markers: %v", paths)
	}
}

func TestPromptCacheOpenAIMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, promptConfig, mockllm.Options{Respond: twoCalcRounds})
	p, opts := markedHistory("gpt-o", "compute please")
	if _, err := h.client.Chat.Completions.New(context.Background(), p, opts...); err != nil {
		t.Fatal(err)
	}
	rounds := requestsFor(h, "up-oai")
	if len(rounds) != 3 {
		t.Fatalf("%d upstream rounds", len(rounds))
	}
	var key string
	for i, r := range rounds {
		k := gjson.GetBytes(r.Body, "prompt_cache_key")
		if k.Type != gjson.String || k.Str == "" || strings.Contains(string(r.Body), "cache_control") {
			t.Fatalf("round %d: prompt_cache_key %s, body %s", i+1, k.Raw, r.Body)
		}
		if key != "" && k.Str != key { // the stable prefix did not change
			t.Fatalf("round %d: key %q, earlier %q", i+1, k.Str, key)
		}
		key = k.Str
	}
	// A client's own key is kept.
	p, _ = markedHistory("gpt-o", "one round only")
	p.PromptCacheKey = openai.String("mine")
	if _, err := h.client.Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	rounds = requestsFor(h, "up-oai")
	if k := gjson.GetBytes(rounds[len(rounds)-1].Body, "prompt_cache_key").Str; k != "mine" {
		t.Fatalf("client key replaced by %q", k)
	}
}

func TestPromptCacheCachedTokensSummed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, promptConfig, mockllm.Options{Respond: twoCalcRounds})
	schema := wiretest.LoadSchema(t)
	wantCached := int64(cachedPerRound[0] + cachedPerRound[1] + cachedPerRound[2])
	check := func(name string, u openai.CompletionUsage) {
		t.Helper()
		// prompt 100+150+200, completion 3×10
		if u.PromptTokens != 450 || u.CompletionTokens != 30 || u.TotalTokens != 480 || u.PromptTokensDetails.CachedTokens != wantCached {
			t.Fatalf("%s: usage %+v, want cached %d", name, u, wantCached)
		}
	}
	for _, model := range []string{"claude-x", "gpt-o"} {
		p := userMsg("compute please")
		p.Model = model
		acc, sum, _ := h.streamed(p, true, schema)
		check(model+" stream", acc.Usage)
		if c := gjson.GetBytes(sum.Usage, "prompt_tokens_details.cached_tokens").Int(); c != wantCached {
			t.Fatalf("%s: usage chunk %s", model, sum.Usage)
		}
		resp, _ := h.chat(p)
		raw, _ := h.lastRaw()
		if err := schema.Completion(raw); err != nil {
			t.Fatal(err)
		}
		check(model+" json", resp.Usage)
	}
}

// A client's x-gateway-cache sent as several header lines is read as one
// list (RFC 9110: repeated lines of a list header are one comma-joined
// line): a no-store on the second line is kept, whatever the order.
func TestCacheHintOnSeveralHeaderLines(t *testing.T) {
	t.Parallel()
	h := newHarness(t, cacheConfig, mockllm.Options{Respond: numbered})
	body := `{"model":"gpt-x","temperature":0,"messages":[{"role":"user","content":"two lines"}]}`
	ask := func(lines ...string) string {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for _, l := range lines {
			req.Header.Add("X-Gateway-Cache", l)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.Header.Get("X-Gateway-Cache")
	}
	if v := ask("ttl=60", "no-store"); v != "miss" {
		t.Fatalf("first ask: %q", v)
	}
	if v := ask(); v != "miss" {
		t.Fatalf("the answer of a request whose second x-gateway-cache line said no-store was stored (%q)", v)
	}
}
