package caching

import (
	"runtime"
	"strings"
	"testing"

	"github.com/llmgw/gateway/pipeline"
)

const baseBody = `{"model":"demo","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"temperature":0,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}],"tool_choice":"auto"}`

func TestRequestKey(t *testing.T) {
	t.Parallel()
	base := requestKey(newReq(baseBody, "acme"), "ts1", false)
	tests := []struct {
		name    string
		body    string
		tenant  string
		toolSet string
		route   *pipeline.Route
		max     *int // the Responses API's max_tool_calls, beside the body
		same    bool
	}{
		{name: "identical", body: baseBody, same: true},
		{name: "member order and whitespace", body: `{ "tool_choice" : "auto", "temperature": 0.0,
			"tools":[{"function":{"parameters":{"properties":{"a":{"type":"string"}},"type":"object"},"name":"f"},"type":"function"}],
			"messages": [ {"content":"Be brief.","role":"system"}, {"role":"user","content":"Hi"} ], "model":"demo" }`, same: true},
		{name: "stream, stream_options, user, metadata, ids ignored", body: strings.Replace(baseBody, `"temperature":0`,
			`"temperature":0,"stream":true,"stream_options":{"include_usage":true},"user":"u1","metadata":{"k":"v"},"safety_identifier":"s","prompt_cache_key":"p","store":true`, 1), same: true},
		{name: "client alias ignored, upstream counts", body: strings.Replace(baseBody, `"model":"demo"`, `"model":"alias"`, 1), same: true},
		{name: "other upstream model", body: baseBody, route: &pipeline.Route{Name: "demo", Deployments: []pipeline.Target{{Provider: "mock", Upstream: "mock-2"}}}},
		{name: "other model of the same upstream", body: baseBody, route: &pipeline.Route{Name: "demo-agent", Deployments: []pipeline.Target{{Provider: "mock", Upstream: "mock-1"}}}},
		{name: "other message", body: strings.Replace(baseBody, `"Hi"`, `"Hi!"`, 1)},
		{name: "message order", body: strings.Replace(baseBody, `{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}`, `{"role":"user","content":"Hi"},{"role":"system","content":"Be brief."}`, 1)},
		{name: "other tools", body: strings.Replace(baseBody, `"name":"f"`, `"name":"g"`, 1)},
		{name: "other tool_choice", body: strings.Replace(baseBody, `"tool_choice":"auto"`, `"tool_choice":"required"`, 1)},
		{name: "response_format", body: strings.Replace(baseBody, `"temperature":0`, `"temperature":0,"response_format":{"type":"json_object"}`, 1)},
		{name: "max_tokens", body: strings.Replace(baseBody, `"temperature":0`, `"temperature":0,"max_tokens":5`, 1)},
		{name: "seed", body: strings.Replace(baseBody, `"temperature":0`, `"temperature":0,"seed":7`, 1)},
		{name: "unknown member counts", body: strings.Replace(baseBody, `"temperature":0`, `"temperature":0,"verbosity":"low"`, 1)},
		{name: "other tenant", body: baseBody, tenant: "other"},
		{name: "other tool set", body: baseBody, toolSet: "ts2"},
		{name: "max_tool_calls 0", body: baseBody, max: new(0)},
		{name: "max_tool_calls 3", body: baseBody, max: new(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tenant, ts := "acme", "ts1"
			if tt.tenant != "" {
				tenant = tt.tenant
			}
			if tt.toolSet != "" {
				ts = tt.toolSet
			}
			r := newReq(tt.body, tenant)
			if tt.route != nil {
				r.Route = tt.route
			}
			if tt.max != nil {
				r.MaxToolCalls, r.LimitToolCalls = *tt.max, true
			}
			got := requestKey(r, ts, false)
			if (got == base) != tt.same {
				t.Errorf("key equal = %v, want %v\n%s\n%s", got == base, tt.same, got, base)
			}
		})
	}
}

func TestRequestKeyShape(t *testing.T) {
	t.Parallel()
	small := requestKey(newReq(`{"messages":[]}`, "acme"), "", false)
	big := requestKey(newReq(`{"messages":[{"role":"user","content":"`+strings.Repeat("x", 1<<16)+`"}]}`, "acme"), "", false)
	if !strings.HasPrefix(small, "tenant:acme:") || len(small) != len(big) || len(small) != len("tenant:acme:")+64 {
		t.Errorf("keys %q / %d bytes: want tenant:acme: + 64 hex, fixed size", small, len(big))
	}
	if shared := requestKey(newReq(`{"messages":[]}`, "acme"), "", true); !strings.HasPrefix(shared, "shared:") ||
		shared != requestKey(newReq(`{"messages":[]}`, "other"), "", true) {
		t.Errorf("shared keys must not depend on the tenant: %q", shared)
	}
}

// A body of millions of one-byte members costs its key about what the body
// costs, not ninety times it: past maxMembers the key is the body's own
// text, still one per body and never a canonical body's.
func TestRequestKeyManyMembers(t *testing.T) {
	body := `{"model":"m","temperature":0,"messages":[{"role":"user","content":"hi"}],"x":{` +
		strings.TrimSuffix(strings.Repeat(`"":0,`, 1<<20), ",") + `}}`
	r := newReq(body, "acme")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k1 := requestKey(r, "", false)
	runtime.ReadMemStats(&after)
	// A copy of the body to parse, the raw text in the key's buffer (grown
	// by doubling) and at most maxMembers members: a few times the body.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8*uint64(len(body)) {
		t.Errorf("a %d-byte body's key allocated %d bytes (%.0f times the body)", len(body), grew, float64(grew)/float64(len(body)))
	}
	if k2 := requestKey(newReq(body, "acme"), "", false); k2 != k1 {
		t.Errorf("the same body gave two keys")
	}
	other := strings.Replace(body, `"hi"`, `"ho"`, 1)
	if requestKey(newReq(other, "acme"), "", false) == k1 {
		t.Errorf("another body gave the same key")
	}
	// Within the bound, member order still does not matter.
	few := func(a, b string) string {
		return `{"model":"m","messages":[],"x":{` + a + `,` + b + `}}`
	}
	if requestKey(newReq(few(`"a":1`, `"b":2`), "acme"), "", false) != requestKey(newReq(few(`"b":2`, `"a":1`), "acme"), "", false) {
		t.Errorf("member order changed the key")
	}
}

// TestRequestKeyLoneSurrogates: the gateway sends the upstream the escapes
// the client sent, so prompts that differ only in a lone UTF-16 surrogate
// are different prompts, and must not share an answer (encoding/json's
// rule, which makes every lone surrogate U+FFFD, gave them one key).
// Spellings of one string still share it.
func TestRequestKeyLoneSurrogates(t *testing.T) {
	t.Parallel()
	key := func(content string) string {
		body := strings.Replace(baseBody, `"content":"Hi"`, `"content":"Hi `+content+`"`, 1)
		return requestKey(newReq(body, "acme"), "ts1", true) // the shared namespace: other tenants' prompts too
	}
	groups := [][]string{
		{`\ud800`, `\uD800`},
		{`\udbff`},
		{`\udc00`},
		{`\ufffd`, "\uFFFD"},
		{`\ud83d\ude00`, "\U0001F600"},
		{`\ud800\u0041`},
		{`A`, `\u0041`},
		{`\\ud800`},
	}
	seen := map[string]string{}
	for _, g := range groups {
		k := key(g[0])
		for _, other := range g[1:] {
			if key(other) != k {
				t.Errorf("%q and %q are one string but got different keys", g[0], other)
			}
		}
		if prev, ok := seen[k]; ok {
			t.Errorf("%q and %q are different strings but share a key", prev, g[0])
		}
		seen[k] = g[0]
	}

	// A member named with a lone surrogate is a member of its own too.
	a := requestKey(newReq(strings.Replace(baseBody, `"temperature":0`, `"temperature":0,"x\ud800":1`, 1), "acme"), "ts1", false)
	b := requestKey(newReq(strings.Replace(baseBody, `"temperature":0`, `"temperature":0,"x\udfff":1`, 1), "acme"), "ts1", false)
	if a == b {
		t.Error("members named x\\ud800 and x\\udfff share a key")
	}
}
