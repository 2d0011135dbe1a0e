package policies

import (
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

func TestGlobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		patterns []string
		allowed  []string
		denied   []string
	}{
		{name: "unset allows all", patterns: nil, allowed: []string{"gpt-4o", "", "a/b"}},
		{name: "empty list allows none", patterns: []string{}, denied: []string{"gpt-4o", ""}},
		{name: "star alone allows names with slashes", patterns: []string{"*"}, allowed: []string{"gpt-4o", "openrouter/meta/llama", ""}},
		{name: "exact", patterns: []string{"gpt-4o", "demo"}, allowed: []string{"gpt-4o", "demo"}, denied: []string{"gpt-4o-mini", "GPT-4O", "dem"}},
		{name: "prefix", patterns: []string{"gpt-4o*"}, allowed: []string{"gpt-4o", "gpt-4o-mini"}, denied: []string{"gpt-4", "x-gpt-4o", "gpt-4o/evil"}},
		{name: "provider prefix", patterns: []string{"openai/*"}, allowed: []string{"openai/gpt-4o"}, denied: []string{"openai/a/b", "anthropic/claude"}},
		{name: "suffix", patterns: []string{"*-mini"}, allowed: []string{"gpt-4o-mini"}, denied: []string{"gpt-4o", "x/y-mini"}},
		{name: "question mark and class", patterns: []string{"o?-[a-c]*"}, allowed: []string{"o3-alpha", "o1-c"}, denied: []string{"o3-delta", "o33-alpha"}},
		{name: "escaped star is literal", patterns: []string{`web\*`}, allowed: []string{"web*"}, denied: []string{"websearch"}},
		{name: "several kinds", patterns: []string{"demo", "gpt-*", "*-local"}, allowed: []string{"demo", "gpt-5", "llama-local"}, denied: []string{"claude"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := compileGlobs(tt.patterns)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.allowed {
				if !g.match(s) {
					t.Errorf("%q denied", s)
				}
			}
			for _, s := range tt.denied {
				if g.match(s) {
					t.Errorf("%q allowed", s)
				}
			}
		})
	}
}

func boolp(b bool) *bool { return &b }

func TestMergedPolicies(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{
		Keys: []config.Key{
			{Tenant: "plain", Key: "k-plain"},
			{Tenant: "narrow", Key: "k-narrow"},
			{Tenant: "big", Key: "k-big"},
			{Tenant: "strict", Key: "k-strict"},
			{Tenant: "locked", Key: "k-locked"},
		},
		Policies: []config.Policy{
			{Tenant: "narrow", Models: []string{"demo"}, Tools: []string{"web_*"}, Cache: boolp(false), ToolTrace: true, MaxTokensMode: ModeClamp},
			{Tenant: "*", Models: []string{"gpt-*", "demo"}, Tools: []string{"calc"}, MaxBodyBytes: 1000, MaxTokens: 100, MaxTokensMode: ModeClamp, Cache: boolp(true)},
			{Tenant: "big", MaxBodyBytes: 5000, MaxTokens: 4000, MaxTokensMode: ModeReject},
			{Tenant: "strict", MaxTokensMode: ModeReject},
			{Tenant: "locked", Models: []string{}, Tools: []string{}},
		},
	}
	e := mustNew(t, cfg)
	tests := []struct {
		name         string
		key          string
		models, deny []string
		tools, noTl  []string
		body, tokens int
		mode         string
		cache        bool
		trace        bool
	}{
		{name: "defaults only", key: "k-plain", models: []string{"gpt-4o", "demo"}, deny: []string{"claude"},
			tools: []string{"calc"}, noTl: []string{"web_search"}, body: 1000, tokens: 100, mode: ModeClamp, cache: true},
		{name: "lists and cache overridden, numbers inherited", key: "k-narrow", models: []string{"demo"}, deny: []string{"gpt-4o"},
			tools: []string{"web_search", "web_fetch"}, noTl: []string{"calc"}, body: 1000, tokens: 100, mode: ModeClamp, cache: false, trace: true},
		{name: "numbers and mode overridden, lists inherited", key: "k-big", models: []string{"gpt-4o"}, deny: []string{"claude"},
			tools: []string{"calc"}, body: 5000, tokens: 4000, mode: ModeReject, cache: true},
		{name: "reject tightens the inherited cap", key: "k-strict", body: 1000, tokens: 100, mode: ModeReject, cache: true,
			models: []string{"demo"}},
		{name: "empty lists deny everything", key: "k-locked", deny: []string{"gpt-4o", "demo"}, noTl: []string{"calc"},
			body: 1000, tokens: 100, mode: ModeClamp, cache: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ten, err := e.Authenticate(tt.key)
			if err != nil {
				t.Fatal(err)
			}
			p := PolicyOf(ten)
			for _, m := range tt.models {
				if !p.AllowsModel(m) {
					t.Errorf("model %q denied", m)
				}
			}
			for _, m := range tt.deny {
				if p.AllowsModel(m) {
					t.Errorf("model %q allowed", m)
				}
			}
			for _, s := range tt.tools {
				if !ten.AllowsTool(s) {
					t.Errorf("tool %q denied", s)
				}
			}
			for _, s := range tt.noTl {
				if ten.AllowsTool(s) {
					t.Errorf("tool %q allowed", s)
				}
			}
			if p.MaxBodyBytes != tt.body || p.MaxTokens != tt.tokens || p.MaxTokensMode != tt.mode {
				t.Errorf("limits = %d %d %q, want %d %d %q", p.MaxBodyBytes, p.MaxTokens, p.MaxTokensMode, tt.body, tt.tokens, tt.mode)
			}
			if ten.CachesResponses(!tt.cache) != tt.cache {
				t.Errorf("CachesResponses = %v", !tt.cache)
			}
			if ten.TracesTools() != tt.trace {
				t.Errorf("TracesTools = %v", !tt.trace)
			}
		})
	}
	if got := e.Policy("nobody"); got != e.Policy("*") || got.MaxTokens != 100 {
		t.Errorf("Policy(unknown) = %+v, want the defaults", got)
	}
}

func TestOpenGatewayUsesDefaultTenantPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		policies []config.Policy
		allowed  bool
	}{
		{name: "no policies", allowed: true},
		{name: "defaults apply", policies: []config.Policy{{Tenant: "*", Models: []string{"other"}}}, allowed: false},
		{name: "default tenant entry wins", policies: []config.Policy{
			{Tenant: "*", Models: []string{"other"}}, {Tenant: DefaultTenant, Models: []string{"demo"}},
		}, allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := mustNew(t, &config.Config{Policies: tt.policies})
			ten, err := e.Authenticate("anything")
			if err != nil || ten.Name != DefaultTenant {
				t.Fatalf("Authenticate = %v, %v", ten, err)
			}
			if got := PolicyOf(ten).AllowsModel("demo"); got != tt.allowed {
				t.Errorf("AllowsModel(demo) = %v, want %v", got, tt.allowed)
			}
		})
	}
}

// foreignPolicy is a pipeline.TenantPolicy of another package that allows
// everything and overrides nothing.
type foreignPolicy struct{}

func (foreignPolicy) AllowsTool(string) bool               { return true }
func (foreignPolicy) TracesTools() bool                    { return false }
func (foreignPolicy) CachesResponses(def bool) bool        { return def }
func (foreignPolicy) ApprovalRequired(string) (bool, bool) { return false, false }

func TestHelpersWithoutPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		tenant *pipeline.Tenant
	}{
		{name: "nil tenant", tenant: nil},
		{name: "tenant without policy", tenant: &pipeline.Tenant{Name: "x"}},
		{name: "tenant with a foreign policy", tenant: &pipeline.Tenant{Name: "x", Policy: foreignPolicy{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if PolicyOf(tt.tenant) != nil {
				t.Error("PolicyOf != nil")
			}
			if !tt.tenant.AllowsTool("anything") {
				t.Error("AllowsTool = false")
			}
			if !tt.tenant.CachesResponses(true) || tt.tenant.CachesResponses(false) {
				t.Error("CachesResponses ignores def")
			}
			if tt.tenant.TracesTools() {
				t.Error("TracesTools = true")
			}
			var p *Policy
			if !p.AllowsModel("m") || !p.AllowsTool("t") || p.Admit(&pipeline.Request{Body: []byte(`{}`)}) != nil {
				t.Error("nil Policy denies")
			}
		})
	}
}

// TestApprovalTools: approval_tools set in a tenant entry (even to [])
// replaces the defaults' list; unset anywhere leaves the tools' own
// settings in charge (set = false).
func TestApprovalTools(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{
		Keys: []config.Key{{Tenant: "plain", Key: "k-plain"}, {Tenant: "own", Key: "k-own"}, {Tenant: "none", Key: "k-none"}},
		Policies: []config.Policy{
			{Tenant: "*", ApprovalTools: []string{"delete_*"}},
			{Tenant: "own", ApprovalTools: []string{"send_mail"}},
			{Tenant: "none", ApprovalTools: []string{}},
		},
	}
	e := mustNew(t, cfg)
	tests := []struct {
		name, key, tool string
		required, set   bool
	}{
		{name: "defaults match", key: "k-plain", tool: "delete_file", required: true, set: true},
		{name: "defaults miss", key: "k-plain", tool: "send_mail", set: true},
		{name: "tenant list replaces", key: "k-own", tool: "send_mail", required: true, set: true},
		{name: "tenant list replaces, default glob gone", key: "k-own", tool: "delete_file", set: true},
		{name: "empty list: none", key: "k-none", tool: "delete_file", set: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ten, err := e.Authenticate(tt.key)
			if err != nil {
				t.Fatal(err)
			}
			if r, s := PolicyOf(ten).ApprovalRequired(tt.tool); r != tt.required || s != tt.set {
				t.Fatalf("ApprovalRequired(%q) = %v, %v; want %v, %v", tt.tool, r, s, tt.required, tt.set)
			}
		})
	}
	if r, s := (*Policy)(nil).ApprovalRequired("x"); r || s {
		t.Fatal("a nil policy sets approval")
	}
	unset := mustNew(t, &config.Config{Keys: []config.Key{{Tenant: "a", Key: "k-a"}}})
	ten, _ := unset.Authenticate("k-a")
	if _, s := PolicyOf(ten).ApprovalRequired("x"); s {
		t.Fatal("no approval_tools anywhere, yet set")
	}
}
