package pipeline

// Tenant is the caller behind a gateway key, resolved by the policies
// middleware. Immutable once built; shared by every request of the key.
type Tenant struct {
	Name   string
	Key    string       // the key's configured name, never the secret
	Admin  bool         // the key has role = "admin" (operator APIs)
	Policy TenantPolicy // the tenant's rules; nil = none (everything allowed, nothing overridden)
}

// TenantPolicy is what the layers outside the policies package ask of a
// tenant's rules: the tool loop (which server tools, whether to trace) and
// the response cache (whether it applies). policies.Policy implements it;
// an implementation is read-only and safe for concurrent use. Admission
// (model allow-list, body size, max_tokens) stays with the policies
// package, which runs it.
type TenantPolicy interface {
	// AllowsTool reports whether the tenant may run the server tool name.
	AllowsTool(name string) bool
	// TracesTools reports whether responses to the tenant always carry the
	// tool loop's x_gateway trace.
	TracesTools() bool
	// CachesResponses returns the tenant's override of response caching,
	// or def when it sets none.
	CachesResponses(def bool) bool
	// ApprovalRequired reports whether a call of the server tool name
	// waits for a person's decision; set is false when the tenant's rules
	// leave that to the tool's own setting.
	ApprovalRequired(name string) (required, set bool)
}

// AllowsTool reports whether t may run the server tool name. A nil Tenant
// (no policy middleware in the chain) or one without a policy may run every
// tool.
func (t *Tenant) AllowsTool(name string) bool {
	return t == nil || t.Policy == nil || t.Policy.AllowsTool(name)
}

// TracesTools reports whether responses to t always carry the x_gateway
// trace; false without a tenant or policy.
func (t *Tenant) TracesTools() bool {
	return t != nil && t.Policy != nil && t.Policy.TracesTools()
}

// CachesResponses returns t's override of response caching, or def without a
// tenant, a policy or an override.
func (t *Tenant) CachesResponses(def bool) bool {
	if t == nil || t.Policy == nil {
		return def
	}
	return t.Policy.CachesResponses(def)
}

// ApprovalRequired reports t's rule on approving calls of the server tool
// name; set is false without a tenant, a policy or a rule of its own.
func (t *Tenant) ApprovalRequired(name string) (required, set bool) {
	if t == nil || t.Policy == nil {
		return false, false
	}
	return t.Policy.ApprovalRequired(name)
}
