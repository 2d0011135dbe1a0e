package caching

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

const (
	mk    = `{"type":"ephemeral"}`
	mk1h  = `{"type":"ephemeral","ttl":"1h"}`
	tools = `[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]`
)

// runPrompt sends body through NewPromptCache for provider and returns what
// the next handler saw, and the caller's request (which must stay intact).
func runPrompt(t *testing.T, provider string, providers map[string]PromptProvider, body string) (seen []byte, r *pipeline.Request) {
	t.Helper()
	inner := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		seen = r.Body
		return &pipeline.Response{Body: []byte(`{"choices":[]}`)}, nil
	})
	h := pipeline.Chain(inner, NewPromptCache(PromptOptions{Providers: providers}))
	r = &pipeline.Request{Body: []byte(body), Model: "demo", Tenant: &pipeline.Tenant{Name: "acme"},
		Target: &pipeline.Target{Provider: provider, Upstream: "up-1"}}
	if _, err := h.Chat(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if string(r.Body) != body {
		t.Fatalf("the caller's body was modified: %s", r.Body)
	}
	return seen, r
}

func canonicalString(s []byte) string { return string(appendCanonical(nil, s)) }

func TestPromptCacheAnthropicBreakpoints(t *testing.T) {
	t.Parallel()
	msgs := func(m ...string) string { return `[` + strings.Join(m, ",") + `]` }
	sys := `{"role":"system","content":"S"}`
	user := `{"role":"user","content":"U"}`
	sysM := `{"role":"system","content":[{"type":"text","text":"S","cache_control":` + mk + `}]}`
	userM := `{"role":"user","content":[{"type":"text","text":"U","cache_control":` + mk + `}]}`
	asst := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"a","arguments":"{}"}}]}`
	toolRes := `{"role":"tool","tool_call_id":"c1","content":"R"}`
	toolResM := `{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"R","cache_control":` + mk + `}]}`
	toolsM := `[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"},"cache_control":` + mk + `}]`
	body := func(tl, m string) string {
		if tl == "" {
			return `{"model":"demo","messages":` + m + `}`
		}
		return `{"model":"demo","tools":` + tl + `,"messages":` + m + `}`
	}
	tests := []struct {
		name, ttl, in, want string
	}{
		{name: "round 1: tools, system, last message", in: body(tools, msgs(sys, user)), want: body(toolsM, msgs(sysM, userM))},
		{name: "round 2: the last breakpoint moves forward", in: body(tools, msgs(sys, user, asst, toolRes)),
			want: body(toolsM, msgs(sysM, user, asst, toolResM))},
		{name: "ttl configured", ttl: "1h", in: body("", msgs(user)),
			want: body("", msgs(`{"role":"user","content":[{"type":"text","text":"U","cache_control":`+mk1h+`}]}`))},
		{name: "list content: last part marked", in: body("", msgs(`{"role":"developer","content":[{"type":"text","text":"A"},{"type":"text","text":"B"}]}`, user)),
			want: body("", msgs(`{"role":"developer","content":[{"type":"text","text":"A"},{"type":"text","text":"B","cache_control":`+mk+`}]}`, userM))},
		{name: "null last message: the one before is marked", in: body("", msgs(user, asst)), want: body("", msgs(userM, asst))},
		{name: "client markers kept and counted: 2 used, tools and system get the rest",
			in: body(`[{"type":"function","function":{"name":"a"},"cache_control":`+mk1h+`},{"type":"function","function":{"name":"b"}}]`,
				msgs(sys, `{"role":"user","content":[{"type":"text","text":"X","cache_control":`+mk1h+`}]}`, `{"role":"assistant","content":"Y"}`, user)),
			want: body(`[{"type":"function","function":{"name":"a"},"cache_control":`+mk1h+`},{"type":"function","function":{"name":"b"},"cache_control":`+mk+`}]`,
				msgs(sysM, `{"role":"user","content":[{"type":"text","text":"X","cache_control":`+mk1h+`}]}`, `{"role":"assistant","content":"Y"}`, user))},
		{name: "client marker on a breakpoint is not overwritten",
			in:   body("", msgs(`{"role":"system","content":"S","cache_control":`+mk1h+`}`, user)),
			want: body("", msgs(`{"role":"system","content":"S","cache_control":`+mk1h+`}`, userM))},
		{name: "four client markers: nothing added",
			in: body(`[{"type":"function","function":{"name":"a"},"cache_control":`+mk+`}]`,
				msgs(`{"role":"system","content":"S","cache_control":`+mk+`}`, `{"role":"user","content":[{"type":"text","text":"1","cache_control":`+mk+`}]}`,
					`{"role":"user","content":[{"type":"text","text":"2","cache_control":`+mk+`}]}`, user)),
			want: body(`[{"type":"function","function":{"name":"a"},"cache_control":`+mk+`}]`,
				msgs(`{"role":"system","content":"S","cache_control":`+mk+`}`, `{"role":"user","content":[{"type":"text","text":"1","cache_control":`+mk+`}]}`,
					`{"role":"user","content":[{"type":"text","text":"2","cache_control":`+mk+`}]}`, user))},
		{name: "a system message mid-conversation does not take the system breakpoint",
			in:   body("", msgs(sys, user, `{"role":"assistant","content":"Y"}`, `{"role":"system","content":"MID"}`, user, `{"role":"assistant","content":"Z"}`, user)),
			want: body("", msgs(sysM, user, `{"role":"assistant","content":"Y"}`, `{"role":"system","content":"MID"}`, user, `{"role":"assistant","content":"Z"}`, userM))},
		{name: "escaped text kept verbatim", in: body("", msgs(`{"role":"user","content":"a\"b\\n\u00e9"}`)),
			want: body("", msgs(`{"role":"user","content":[{"type":"text","text":"a\"b\\n\u00e9","cache_control":`+mk+`}]}`))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen, _ := runPrompt(t, "claude", map[string]PromptProvider{"claude": {Mode: PromptAnthropic, TTL: tt.ttl}}, tt.in)
			if got, want := canonicalString(seen), canonicalString([]byte(tt.want)); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			if n := strings.Count(string(seen), `"cache_control"`); n > maxBreakpoints {
				t.Errorf("%d markers > %d", n, maxBreakpoints)
			}
		})
	}
}

var cacheKeyRE = regexp.MustCompile(`^acme-[0-9a-f]{16}$`)

func TestPromptCacheOpenAI(t *testing.T) {
	t.Parallel()
	openai := map[string]PromptProvider{"oai": {Mode: PromptOpenAI}}
	base := `{"model":"demo","tools":` + tools + `,"messages":[{"role":"system","content":"S"},{"role":"user","content":"U1"}]}`
	seen, _ := runPrompt(t, "oai", openai, base)
	key := gjson.GetBytes(seen, "prompt_cache_key").String()
	if !cacheKeyRE.MatchString(key) {
		t.Fatalf("prompt_cache_key %q, want acme-<16 hex>", key)
	}
	tests := []struct {
		name, in string
		same     bool   // same key as base
		want     string // exact key, when set
	}{
		{name: "another user turn keeps the key", same: true, in: strings.Replace(base, `"U1"`, `"U2"`, 1)},
		{name: "another system prompt changes it", in: strings.Replace(base, `"S"`, `"S2"`, 1)},
		{name: "other tools change it", in: strings.Replace(base, `"name":"b"`, `"name":"c"`, 1)},
		{name: "the client's key is kept", in: strings.Replace(base, `"model":"demo"`, `"model":"demo","prompt_cache_key":"mine"`, 1), want: "mine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen, _ := runPrompt(t, "oai", openai, tt.in)
			got := gjson.GetBytes(seen, "prompt_cache_key").String()
			switch {
			case tt.want != "":
				if got != tt.want {
					t.Errorf("key %q, want %q", got, tt.want)
				}
			case (got == key) != tt.same:
				t.Errorf("key %q vs base %q: same = %v, want %v", got, key, got == key, tt.same)
			}
		})
	}
}

func TestPromptCacheStripsMarkers(t *testing.T) {
	t.Parallel()
	marked := `{"model":"demo","cache_control":` + mk + `,"tools":[{"type":"function","function":{"name":"a","cache_control":` + mk + `},"cache_control":` + mk + `}],` +
		`"messages":[{"role":"system","content":"S","cache_control":` + mk + `},{"role":"user","content":[{"type":"text","text":"U","cache_control":` + mk1h + `},{"type":"text","text":"V"}]}]}`
	providers := map[string]PromptProvider{"oai": {Mode: PromptOpenAI}, "plain": {Mode: PromptNone}}
	tests := []struct {
		name, provider string
	}{
		{name: "openai", provider: "oai"},
		{name: "none", provider: "plain"},
		{name: "provider not configured", provider: "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen, _ := runPrompt(t, tt.provider, providers, marked)
			if strings.Contains(string(seen), "cache_control") {
				t.Errorf("markers left: %s", seen)
			}
			stripped := strings.NewReplacer(`,"cache_control":`+mk1h, "", `,"cache_control":`+mk, "", `"cache_control":`+mk+`,`, "").Replace(marked)
			if tt.provider == "oai" {
				seen, _ = sjsonDelete(seen, "prompt_cache_key")
			}
			if canonicalString(seen) != canonicalString([]byte(stripped)) {
				t.Errorf("got  %s\nwant %s", seen, stripped)
			}
		})
	}
}

func TestPromptCacheUntouched(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"demo","messages":[{"role":"user","content":"U"}]}`)
	var seen []byte
	inner := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		seen = r.Body
		return &pipeline.Response{Body: []byte(`{}`)}, nil
	})
	h := pipeline.Chain(inner, NewPromptCache(PromptOptions{Providers: map[string]PromptProvider{"plain": {Mode: PromptNone}}}))
	r := &pipeline.Request{Body: body, Target: &pipeline.Target{Provider: "plain"}}
	if _, err := h.Chat(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if !sameSlice(seen, body) {
		t.Error("a request with nothing to edit was re-serialised")
	}
}

func TestPromptCacheUsageMetric(t *testing.T) {
	t.Parallel()
	usage := `{"prompt_tokens":2100,"completion_tokens":18,"total_tokens":2118,"prompt_tokens_details":{"cached_tokens":1920,"cache_write_tokens":100}}`
	chunks := []string{
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}],"usage":null}`,
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":` + usage + `}`,
	}
	tests := []struct {
		name   string
		stream bool
		strip  bool // the usage chunk was taken out before the layer (a client that did not ask)
		reask  bool // a layer inside made an earlier call first (prompted tool calling's re-ask)
		model  string
	}{
		{name: "body", model: "usage-body"},
		{name: "stream", stream: true, model: "usage-stream"},
		{name: "stream without its usage chunk", stream: true, strip: true, model: "usage-stream-stripped"},
		{name: "stream after a re-ask", stream: true, strip: true, reask: true, model: "usage-stream-reask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := chunks
			if tt.strip {
				want = chunks[:1]
			}
			inner := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				if tt.reask {
					r.Usage.Note(wire.ChatUsage{Prompt: 100, Cached: 80})
				}
				if tt.stream {
					// As the meter does: the usage is noted when the
					// stream ends, whatever the client gets of it.
					c, _ := wire.ParseChatUsage(gjson.Parse(usage))
					return &pipeline.Response{Stream: &notingStream{testStream: sliceStream(want), log: r.Usage, usage: c}}, nil
				}
				return &pipeline.Response{Body: []byte(`{"choices":[],"usage":` + usage + `}`)}, nil
			})
			h := pipeline.Chain(inner, NewPromptCache(PromptOptions{}))
			before := map[string]float64{} // the counters are global: compare deltas (-count=N safe)
			for _, kind := range []string{"prompt", "cached", "cache_write"} {
				before[kind] = counterValue(promptTokens.WithLabelValues("p", tt.model, kind))
			}
			resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(`{}`), Target: &pipeline.Target{Provider: "p", Upstream: tt.model},
				Stream: tt.stream, Usage: new(pipeline.UsageLog)})
			if err != nil {
				t.Fatal(err)
			}
			if tt.stream {
				got, err := drain(t, resp.Stream)
				if err != nil || strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("stream changed: %v %v", got, err)
				}
				resp.Stream.Close() // after the end: counted once
			}
			wantTokens := map[string]float64{"prompt": 2100, "cached": 1920, "cache_write": 100}
			if tt.reask { // both calls
				wantTokens["prompt"], wantTokens["cached"] = 2200, 2000
			}
			for kind, want := range wantTokens {
				if got := counterValue(promptTokens.WithLabelValues("p", tt.model, kind)) - before[kind]; got != want {
					t.Errorf("%s tokens = %v, want %v", kind, got, want)
				}
			}
		})
	}
}

// notingStream notes usage in log when it ends, as the meter does.
type notingStream struct {
	*testStream
	log   *pipeline.UsageLog
	usage wire.ChatUsage
	noted bool
}

func (s *notingStream) Next() ([]byte, error) {
	c, err := s.testStream.Next()
	if err != nil && !s.noted {
		s.noted = true
		s.log.Note(s.usage)
	}
	return c, err
}

func sjsonDelete(b []byte, path string) ([]byte, error) { return sjson.DeleteBytes(b, path) }

// A translated Anthropic usage keeps its cache writes at the top level of
// the usage object; they count as cache_write.
func TestPromptCacheUsageMetricAnthropicForm(t *testing.T) {
	t.Parallel()
	const model = "usage-anthropic-form"
	inner := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":1,"cache_creation_input_tokens":30}}`)}, nil
	})
	h := pipeline.Chain(inner, NewPromptCache(PromptOptions{}))
	before := map[string]float64{}
	for _, kind := range []string{"prompt", "cached", "cache_write"} {
		before[kind] = counterValue(promptTokens.WithLabelValues("p", model, kind))
	}
	if _, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(`{}`), Target: &pipeline.Target{Provider: "p", Upstream: model}}); err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]float64{"prompt": 50, "cached": 0, "cache_write": 30} {
		if got := counterValue(promptTokens.WithLabelValues("p", model, kind)) - before[kind]; got != want {
			t.Errorf("%s tokens = %v, want %v", kind, got, want)
		}
	}
}

// Tenants whose names share their first 40 bytes get keys of their own (the
// key shows a cut name), and a cut never splits a character.
func TestPromptCacheKeyLongTenants(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"demo","messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}`)
	key := func(tenant string) string {
		out := setPromptCacheKey(body, &pipeline.Request{Tenant: &pipeline.Tenant{Name: tenant}})
		return gjson.GetBytes(out, "prompt_cache_key").String()
	}
	long := strings.Repeat("x", 40)
	a, b := key(long+"-alpha"), key(long+"-beta")
	if a == b {
		t.Fatalf("two tenants share the key %q", a)
	}
	if !strings.HasPrefix(a, long+"-") || len(a) != 40+1+16 {
		t.Fatalf("key %q, want the cut name and 16 hex", a)
	}
	if short := key("acme"); !cacheKeyRE.MatchString(short) {
		t.Fatalf("a short name's key: %q", short)
	}
	for _, name := range []string{strings.Repeat("y", 39) + "é", strings.Repeat("y", 39) + "è"} {
		k := key(name)
		if !utf8.ValidString(k) || !strings.HasPrefix(k, strings.Repeat("y", 39)+"-") {
			t.Fatalf("tenant %q: key %q", name, k)
		}
	}
	if key(strings.Repeat("y", 39)+"é") == key(strings.Repeat("y", 39)+"è") {
		t.Fatal("tenants that differ in a cut character share a key")
	}
}
