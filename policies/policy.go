package policies

import (
	"fmt"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// The values of Policy.MaxTokensMode.
const (
	ModeClamp  = "clamp"  // lower an over-limit max_tokens to the cap
	ModeReject = "reject" // answer 400 naming the field
)

// Policy is the merged rule set of one tenant: its own [[policies]] entry laid
// over the tenant = "*" defaults. It is built once in New, stored in
// pipeline.Tenant.Policy (it is this package's pipeline.TenantPolicy), and
// read-only afterwards: safe for concurrent use,
// never modify it.
type Policy struct {
	Tenant        string
	MaxBodyBytes  int    // request body limit; 0 = the server's limit only
	MaxTokens     int    // cap on max_tokens / max_completion_tokens; 0 = none
	MaxTokensMode string // ModeClamp or ModeReject
	Cache         *bool  // override of middleware.cache.enabled; nil = no override
	ToolTrace     bool   // always add x_gateway to responses

	models    *globs // nil = every model
	tools     *globs // nil = every server tool
	paths     *globs // pass-through paths; never nil
	approvals *globs // approval_tools; nil = not set (the tools' own settings apply)
}

// AllowsModel reports whether the client-facing model name may be used.
// A nil Policy allows everything.
func (p *Policy) AllowsModel(name string) bool { return p == nil || p.models.match(name) }

// AllowsTool reports whether the server tool name may run.
// A nil Policy allows everything.
func (p *Policy) AllowsTool(name string) bool { return p == nil || p.tools.match(name) }

// ApprovalRequired reports whether the server tool name needs a person's
// approval for this tenant, and set = false when the policy has no
// approval_tools (the tool's own approval setting then decides). A nil
// Policy sets nothing. Allocation-free.
func (p *Policy) ApprovalRequired(name string) (required, set bool) {
	if p == nil || p.approvals == nil {
		return false, false
	}
	return p.approvals.match(name), true
}

// merge lays the tenant entry t over the defaults d (either may be nil) and
// compiles the globs.
//
// Merge rules, per field: a list set in t (even to []) replaces d's
// (approval_tools too); a
// non-zero number in t replaces d's; cache set in t replaces d's; tool_trace
// is on when either sets it. max_tokens_mode travels with max_tokens, because
// config defaults the mode to "clamp" in every entry and an unset mode cannot
// be told from an explicit one: the entry that supplies the cap supplies its
// mode, and a tenant entry may still tighten an inherited cap to "reject".
func merge(tenant string, d, t *config.Policy) (*Policy, error) {
	var z config.Policy
	if d == nil {
		d = &z
	}
	if t == nil {
		t = &z
	}
	p := &Policy{
		Tenant:        tenant,
		MaxBodyBytes:  d.MaxBodyBytes,
		MaxTokens:     d.MaxTokens,
		MaxTokensMode: d.MaxTokensMode,
		Cache:         d.Cache,
		ToolTrace:     d.ToolTrace || t.ToolTrace,
	}
	models, tools, paths, approvals := d.Models, d.Tools, d.Passthrough, d.ApprovalTools
	if t.ApprovalTools != nil {
		approvals = t.ApprovalTools
	}
	if t.Passthrough != nil {
		paths = t.Passthrough
	}
	if paths == nil {
		paths = DefaultPassthrough
	}
	if t.Models != nil {
		models = t.Models
	}
	if t.Tools != nil {
		tools = t.Tools
	}
	if t.MaxBodyBytes > 0 {
		p.MaxBodyBytes = t.MaxBodyBytes
	}
	if t.MaxTokens > 0 {
		p.MaxTokens, p.MaxTokensMode = t.MaxTokens, t.MaxTokensMode
	} else if t.MaxTokensMode == ModeReject {
		p.MaxTokensMode = ModeReject
	}
	if p.MaxTokensMode == "" {
		p.MaxTokensMode = ModeClamp
	}
	if p.MaxTokensMode != ModeClamp && p.MaxTokensMode != ModeReject {
		return nil, fmt.Errorf("max_tokens_mode: %q is not one of clamp, reject", p.MaxTokensMode)
	}
	if t.Cache != nil {
		c := *t.Cache
		p.Cache = &c
	} else if d.Cache != nil {
		c := *d.Cache
		p.Cache = &c
	}
	var err error
	if p.models, err = compileGlobs(models); err != nil {
		return nil, fmt.Errorf("models%w", err)
	}
	if p.tools, err = compileGlobs(tools); err != nil {
		return nil, fmt.Errorf("tools%w", err)
	}
	if p.paths, err = compilePathGlobs(paths); err != nil {
		return nil, fmt.Errorf("passthrough%w", err)
	}
	if p.approvals, err = compileGlobs(approvals); err != nil {
		return nil, fmt.Errorf("approval_tools%w", err)
	}
	return p, nil
}

var _ pipeline.TenantPolicy = (*Policy)(nil)

// TracesTools reports whether responses to the tenant always carry the
// x_gateway trace. False for a nil Policy.
func (p *Policy) TracesTools() bool { return p != nil && p.ToolTrace }

// CachesResponses returns the tenant's override of response caching, or def
// when the policy sets none (or is nil).
func (p *Policy) CachesResponses(def bool) bool {
	if p != nil && p.Cache != nil {
		return *p.Cache
	}
	return def
}

// PolicyOf returns the tenant's Policy, or nil when t is nil or carries no
// Policy of this package.
func PolicyOf(t *pipeline.Tenant) *Policy {
	if t == nil {
		return nil
	}
	p, _ := t.Policy.(*Policy)
	return p
}
