package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testredis"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// Caching bugs other gateways shipped; see toolcall_stream_test.go.

// cachePost sends a raw JSON body and returns x-gateway-cache and the
// response body; it fails on a non-200 answer.
func (h *harness) cachePost(body string, header map[string]string) (string, []byte) {
	h.t.Helper()
	status, hdr, b := h.post("/chat/completions", body, header)
	if status != http.StatusOK {
		h.t.Fatalf("status %d: %s", status, b)
	}
	return hdr.Get("X-Gateway-Cache"), b
}

// Pitfall: cache keys built from the entire raw payload: huge Redis keys,
// timeouts. A 1 MB request and a tiny one must get keys of the same small
// length (a fixed-size hash under a short namespace), and a hit.
func TestPitfall_CacheKeySizeFixed(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	// gpt-big has no context window: the gateway does not count the prompt.
	// Redis calls get seconds, not the default 200 ms: under a full test
	// run's load a 1 MB request's lookup or store could time out, and a
	// miss here would say nothing about key sizes.
	cfg := strings.Replace(tenantsConfig, "enabled = true\n", "enabled = true\nstore = \"redis\"\n", 1) +
		"[[models]]\nname = \"gpt-big\"\nprovider = \"up\"\nupstream = \"up-big\"\n[redis]\naddr = \"" + rs.Addr() + "\"\ntimeout = \"5s\"\n"
	h := newHarness(t, cfg, mockllm.Options{Respond: numbered})
	huge := strings.Repeat("ünïcødé payload ", 1<<20/18) // about 1 MB of JSON
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	lengths := map[string]int{}
	for _, c := range []struct{ name, content, key string }{
		{"tiny", "hi", "k-a"},
		{"huge", huge, "k-a"},
		{"huge, other tenant", huge, "k-b"},
	} {
		body := `{"model":"gpt-big","temperature":0,"messages":[{"role":"user","content":"` + c.content + `"}]}`
		auth := map[string]string{"Authorization": "Bearer " + c.key}
		if hv, _ := h.cachePost(body, auth); hv != "miss" {
			t.Fatalf("%s: first request %q", c.name, hv)
		}
		if hv, _ := h.cachePost(body, auth); hv != "hit" {
			t.Fatalf("%s: repeat %q", c.name, hv)
		}
		keys, err := rc.Keys(context.Background(), "gw:cache:*").Result() // not the usage record
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if len(k) > 128 {
				t.Fatalf("%s: redis key of %d bytes: %.200q", c.name, len(k), k)
			}
			if _, ok := lengths[k]; !ok {
				lengths[k] = len(k)
			}
		}
	}
	if len(lengths) != 3 {
		t.Fatalf("%d keys for three distinct requests: %v", len(lengths), lengths)
	}
	// The same tenant's tiny and huge requests have keys of one length.
	var a []int
	for k, n := range lengths {
		if strings.Contains(k, "team-a") {
			a = append(a, n)
		}
	}
	if len(a) != 2 || a[0] != a[1] {
		t.Fatalf("key lengths of team-a depend on the payload: %v", lengths)
	}
}

// Pitfall: no cache hits whenever tools was set; or the opposite, hits that
// ignored tools and returned an answer to a different question. Both on the
// fast path and with a server tool configured (the tool loop path).
func TestPitfall_CacheToolsHitAndMiss(t *testing.T) {
	t.Parallel()
	toolsA := `[{"type":"function","function":{"name":"lookup_city","parameters":{"type":"object","properties":{"name":{"type":"string"}}}}}]`
	toolsB := `[{"type":"function","function":{"name":"lookup_city","parameters":{"type":"object","properties":{"name":{"type":"string"},"country":{"type":"string"}}}}}]`
	toolsC := `[{"type":"function","function":{"name":"local_time","parameters":{"type":"object","properties":{"name":{"type":"string"}}}}}]`
	req := func(extra string) string {
		return `{"model":"gpt-x","temperature":0,"messages":[{"role":"user","content":"Tell me about Zürich"}]` + extra + `}`
	}
	steps := []struct {
		name, body, want string
	}{
		{"tools A", req(`,"tools":` + toolsA), "miss"},
		{"tools A again", req(`,"tools":` + toolsA), "hit"},
		{"no tools", req(""), "miss"},
		{"tools A, other parameters", req(`,"tools":` + toolsB), "miss"},
		{"another tool", req(`,"tools":` + toolsC), "miss"},
		{"tools A, tool_choice required", req(`,"tools":` + toolsA + `,"tool_choice":"required"`), "miss"},
		{"tools A, third time", req(`,"tools":` + toolsA), "hit"},
		{"no tools again", req(""), "hit"},
	}
	for _, cfg := range []struct{ name, config string }{
		{"fast path", cacheConfig},
		{"server tool configured", mixedConfig + "[middleware.cache]\nenabled = true\n"},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, cfg.config, mockllm.Options{Respond: numbered})
			answers := map[string]string{} // body → content
			for _, s := range steps {
				hv, b := h.cachePost(s.body, nil)
				content := gjson.GetBytes(b, "choices.0.message.content").Str
				if hv != s.want {
					t.Fatalf("%s: x-gateway-cache %q, want %q", s.name, hv, s.want)
				}
				if prev, ok := answers[s.body]; ok && prev != content {
					t.Fatalf("%s: a hit returned %q, the stored answer was %q", s.name, content, prev)
				}
				for other, a := range answers {
					if other != s.body && a == content {
						t.Fatalf("%s: got the answer of another request: %q", s.name, content)
					}
				}
				answers[s.body] = content
			}
		})
	}
}

// Pitfall: keys that depended on JSON map order, so identical requests never
// hit. The same request with members reordered at every level and other
// whitespace must hit; changing an array's order or a nested value must not.
func TestPitfall_CacheKeyMapOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, cacheConfig, mockllm.Options{Respond: numbered})
	first := `{"model":"gpt-x","temperature":0,"max_completion_tokens":50,` +
		`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"Zürich?"}]}],` +
		`"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"number"}},"required":["a"]}}}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"out","strict":true,"schema":{"type":"object","properties":{"x":{"type":"string"},"y":{"type":"integer"}}}}}}`
	reordered := "{\n  \"tools\": [{\"function\": {\"parameters\": {\"required\": [\"a\"], \"properties\": {\"b\": {\"type\": \"number\"}, \"a\": {\"type\": \"string\"}}, \"type\": \"object\"}, \"description\": \"d\", \"name\": \"f\"}, \"type\": \"function\"}],\n" +
		"  \"response_format\": {\"json_schema\": {\"schema\": {\"properties\": {\"y\": {\"type\": \"integer\"}, \"x\": {\"type\": \"string\"}}, \"type\": \"object\"}, \"strict\": true, \"name\": \"out\"}, \"type\": \"json_schema\"},\n" +
		"  \"messages\": [{\"content\": \"be brief\", \"role\": \"system\"}, {\"content\": [{\"text\": \"Zürich?\", \"type\": \"text\"}], \"role\": \"user\"}],\n" +
		"  \"max_completion_tokens\": 50, \"temperature\": 0, \"model\": \"gpt-x\"\n}"
	steps := []struct{ name, body, want string }{
		{"first", first, "miss"},
		{"members reordered at every level, other whitespace", reordered, "hit"},
		{"messages in another order", strings.Replace(reordered, `[{"content": "be brief", "role": "system"}, {"content": [{"text": "Zürich?", "type": "text"}], "role": "user"}]`,
			`[{"content": [{"text": "Zürich?", "type": "text"}], "role": "user"}, {"content": "be brief", "role": "system"}]`, 1), "miss"},
		{"a nested value changed", strings.Replace(reordered, `"required": ["a"]`, `"required": ["b"]`, 1), "miss"},
	}
	for _, s := range steps {
		if !gjson.Valid(s.body) {
			t.Fatalf("%s: the test's body is not JSON", s.name)
		}
		if hv, _ := h.cachePost(s.body, nil); hv != s.want {
			t.Fatalf("%s: x-gateway-cache %q, want %q", s.name, hv, s.want)
		}
	}
	if n := h.mock.Calls("up-model"); n != 3 {
		t.Fatalf("%d upstream calls, want 3", n)
	}
}

// Pitfall: answers leaking between tenants or between semantically
// "similar" prompts. Two tenants asking the same question get their own
// answers, streamed or not; near-identical prompts (case, spacing,
// punctuation, another system prompt) never share an entry. See also
// TestCacheTenantsNeverShare.
func TestPitfall_CacheTenantsAndSimilarPrompts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, tenantsConfig, mockllm.Options{Respond: numbered})
	ask := func(q, sys string) string {
		msgs := `[{"role":"user","content":` + strconv.Quote(q) + `}]`
		if sys != "" {
			msgs = `[{"role":"system","content":` + strconv.Quote(sys) + `},{"role":"user","content":` + strconv.Quote(q) + `}]`
		}
		return `{"model":"gpt-x","temperature":0,"messages":` + msgs + `}`
	}
	seen := map[string]string{} // content → who got it
	get := func(name, body, key, want string) string {
		t.Helper()
		hv, b := h.cachePost(body, map[string]string{"Authorization": "Bearer " + key})
		content := gjson.GetBytes(b, "choices.0.message.content").Str
		if hv != want {
			t.Fatalf("%s: x-gateway-cache %q, want %q", name, hv, want)
		}
		if who, ok := seen[content]; ok && want == "miss" {
			t.Fatalf("%s: got the answer %s got", name, who)
		}
		seen[content] = name
		return content
	}
	a := get("team-a", ask("What is the capital of France?", ""), "k-a", "miss")
	b := get("team-b", ask("What is the capital of France?", ""), "k-b", "miss")
	if a2 := get("team-a again", ask("What is the capital of France?", ""), "k-a", "hit"); a2 != a {
		t.Fatalf("team-a's hit %q, stored %q", a2, a)
	}
	// team-b's stream replays team-b's answer, not team-a's.
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), det("What is the capital of France?"), option.WithAPIKey("k-b"))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || acc.Choices[0].Message.Content != b {
		t.Fatalf("team-b stream: %v %q, want %q", err, acc.Choices[0].Message.Content, b)
	}
	_ = stream.Close()
	for _, s := range []struct{ name, q, sys string }{
		{"lower case", "what is the capital of france?", ""},
		{"extra space", "What is the capital of  France?", ""},
		{"no question mark", "What is the capital of France", ""},
		{"trailing newline", "What is the capital of France?\n", ""},
		{"another system prompt", "What is the capital of France?", "Answer in German."},
	} {
		get(s.name, ask(s.q, s.sys), "k-a", "miss")
	}
	if n := h.mock.Calls("up-model"); n != 7 {
		t.Fatalf("%d upstream calls, want 7", n)
	}
}

// Pitfall: prompt-cache accounting (cached_tokens) lost when the proxy
// rewrote usage. The upstream reports cached (and cache-write) tokens; the
// client must see them on the fast path (JSON and the usage chunk), summed
// over the tool loop's rounds, and on a response-cache hit. See also
// TestPromptCacheCachedTokensSummed and TestCacheStreamJSONCrossReplay.
func TestPitfall_CachedTokensSurviveUsageRewrite(t *testing.T) {
	t.Parallel()
	schema := wiretest.LoadSchema(t)
	// cached is 32 on the fast path; in the loop 5 + 7 over two rounds.
	respond := func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "tool" {
			return mockllm.Turn{Text: "it is " + strings.Join(c.ToolResults, ""), Usage: &mockllm.Usage{Prompt: 60, Completion: 4, Cached: 7, CacheWrite: 2}}
		}
		if c.Offers("calculator") {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: &mockllm.Usage{Prompt: 50, Completion: 6, Cached: 5, CacheWrite: 1}}
		}
		return mockllm.Turn{Text: "plain answer", Usage: &mockllm.Usage{Prompt: 40, Completion: 5, Cached: 32, CacheWrite: 8}}
	}
	cases := []struct {
		name, config   string
		prompt, cached int64
		write          int64
		repeat         bool // ask twice; the second answer is a cache hit
	}{
		{"fast path", baseConfig, 40, 32, 8, false},
		{"tool loop, summed over rounds", mixedConfig, 110, 12, 3, false},
		{"response-cache hit", cacheConfig, 40, 32, 8, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.config, mockllm.Options{Respond: respond})
			check := func(mode string, u gjson.Result) {
				t.Helper()
				if u.Get("prompt_tokens").Int() != c.prompt || u.Get("prompt_tokens_details.cached_tokens").Int() != c.cached {
					t.Fatalf("%s: usage %s, want prompt %d with %d cached", mode, u.Raw, c.prompt, c.cached)
				}
				if w := u.Get("prompt_tokens_details.cache_write_tokens"); w.Int() != c.write {
					t.Fatalf("%s: cache_write_tokens %s, want %d", mode, w.Raw, c.write)
				}
			}
			for round := 0; round < 1+boolInt(c.repeat); round++ {
				mode := fmt.Sprintf("round %d", round+1)
				p := det("what is 6*7?")
				resp, hv := h.chat(p)
				if c.repeat && round == 1 && hv != "hit" {
					t.Fatalf("%s: x-gateway-cache %q", mode, hv)
				}
				raw, _ := h.lastRaw()
				if err := schema.Completion(raw); err != nil {
					t.Fatal(err)
				}
				check(mode+" json", gjson.GetBytes(raw, "usage"))
				if resp.Usage.PromptTokensDetails.CachedTokens != c.cached {
					t.Fatalf("%s: SDK sees cached %d", mode, resp.Usage.PromptTokensDetails.CachedTokens)
				}
				acc, sum, _ := h.streamed(p, true, schema)
				check(mode+" stream", gjson.ParseBytes(sum.Usage))
				if acc.Usage.PromptTokensDetails.CachedTokens != c.cached {
					t.Fatalf("%s: SDK accumulated cached %d from the stream", mode, acc.Usage.PromptTokensDetails.CachedTokens)
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
