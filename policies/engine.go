// Package policies decides from config.toml who may do what: gateway keys
// name tenants, and each tenant's merged [[policies]] entry limits the models
// it may call, the server tools that may run for it, the size of its request
// bodies and its max_tokens, and overrides caching and tool tracing.
//
// Everything is resolved once in New into read-only lookup tables; a request
// pays one SHA-256, one map lookup and a few precompiled glob checks. Hot
// reload builds a new Engine and swaps it: New has no global side effects.
package policies

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
)

// DefaultTenant is the tenant of every request when no keys are configured.
const DefaultTenant = "default"

// Engine holds the resolved keys and policies of one config. It is immutable
// after New and safe for concurrent use; the Tenants it returns are shared by
// every request and must not be modified.
type Engine struct {
	keys   map[[sha256.Size]byte]*keyEntry // SHA-256 of the key → tenant
	open   *pipeline.Tenant                // non-nil when no keys are configured
	policy map[string]*Policy              // tenant name → merged policy
}

// keyEntry is one configured key: its digest (kept for the constant-time
// confirmation) and the shared Tenant it resolves to.
type keyEntry struct {
	sum    [sha256.Size]byte
	tenant *pipeline.Tenant
}

// New resolves cfg's keys and policies. It reads cfg and keeps nothing of it,
// so cfg may be discarded or reloaded afterwards. Errors name the config key.
func New(cfg *config.Config, log zerolog.Logger) (*Engine, error) {
	e := &Engine{
		keys:   make(map[[sha256.Size]byte]*keyEntry, len(cfg.Keys)),
		policy: make(map[string]*Policy),
	}

	// Index the [[policies]] entries by tenant.
	entries := make(map[string]int, len(cfg.Policies))
	for i := range cfg.Policies {
		t := cfg.Policies[i].Tenant
		if t == "" {
			return nil, fmt.Errorf("policies[%d].tenant: required (\"*\" for every tenant)", i)
		}
		if j, dup := entries[t]; dup {
			return nil, fmt.Errorf("policies[%d]: tenant %q already has policies[%d]", i, t, j)
		}
		entries[t] = i
	}
	var defaults *config.Policy
	if i, ok := entries["*"]; ok {
		defaults = &cfg.Policies[i]
	}
	policyFor := func(tenant string) (*Policy, error) {
		if p, ok := e.policy[tenant]; ok {
			return p, nil
		}
		var own *config.Policy
		at := "policies[*]"
		if i, ok := entries[tenant]; ok {
			own, at = &cfg.Policies[i], fmt.Sprintf("policies[%d]", i)
		}
		p, err := merge(tenant, defaults, own)
		if err != nil {
			return nil, fmt.Errorf("%s.%w", at, err)
		}
		e.policy[tenant] = p
		return p, nil
	}

	names := make(map[[sha256.Size]byte]int, len(cfg.Keys))
	for i, k := range cfg.Keys {
		at := fmt.Sprintf("keys[%d]", i)
		if k.Tenant == "" {
			return nil, fmt.Errorf("%s.tenant: required", at)
		}
		var sum [sha256.Size]byte
		switch {
		case k.Key != "" && k.SHA256 != "":
			return nil, fmt.Errorf("%s: set only one of key, sha256", at)
		case k.Key != "":
			sum = sha256.Sum256([]byte(k.Key))
		case k.SHA256 != "":
			b, err := hex.DecodeString(k.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%s.sha256: not 64 hex digits", at)
			}
			copy(sum[:], b)
		default:
			return nil, fmt.Errorf("%s: set key or sha256", at)
		}
		if j, dup := names[sum]; dup {
			return nil, fmt.Errorf("%s: same secret as keys[%d]", at, j)
		}
		if admin := cfg.Server.AdminKey; admin != "" && sum == sha256.Sum256([]byte(admin)) {
			// The tenant's key would open /metrics and every tenant's usage.
			return nil, fmt.Errorf("%s: same secret as server.admin_key", at)
		}
		names[sum] = i
		p, err := policyFor(k.Tenant)
		if err != nil {
			return nil, err
		}
		name := k.Name
		if name == "" {
			name = at
		}
		e.keys[sum] = &keyEntry{sum: sum, tenant: &pipeline.Tenant{Name: k.Tenant, Key: name, Admin: k.Role == "admin", Policy: p}}
	}

	if len(e.keys) == 0 {
		p, err := policyFor(DefaultTenant)
		if err != nil {
			return nil, err
		}
		e.open = &pipeline.Tenant{Name: DefaultTenant, Policy: p}
		log.Warn().Msg("policies: no [[keys]] configured: the gateway is open, every request runs as tenant \"default\"")
	} else {
		for t, i := range entries {
			if _, ok := e.policy[t]; !ok && t != "*" {
				log.Warn().Str("tenant", t).Int("policy", i).Msg("policies: policy names a tenant that no key uses")
			}
		}
	}
	// The defaults also serve callers that ask for an unknown tenant's policy.
	if _, err := policyFor("*"); err != nil {
		return nil, err
	}
	log.Info().Int("keys", len(e.keys)).Int("tenants", len(e.policy)-1).Msg("policies: loaded")
	return e, nil
}

// Open reports whether the gateway runs without keys (single-user).
func (e *Engine) Open() bool { return e.open != nil }

// Policy returns the merged policy of tenant, or the "*" defaults for a
// tenant without keys or entry. Never nil; read-only.
func (e *Engine) Policy(tenant string) *Policy {
	if p, ok := e.policy[tenant]; ok {
		return p
	}
	return e.policy["*"]
}

// Authenticate maps the bearer token a client presented to its tenant. The
// returned Tenant is shared and read-only. On an open gateway every
// credential (or none) is the tenant "default". Otherwise a missing or
// unknown key is a 401 *pipeline.Error that never echoes the key.
//
// Why a map lookup is constant-time enough: the map is keyed by the SHA-256
// of the key, never by the key, so whatever timing a lookup leaks (hash
// bucket, early exit of the key comparison) is about SHA-256(guess) and the
// stored digests; learning digest bytes does not let an attacker build a key
// with a chosen digest, so it reveals nothing usable about a secret. The hit
// is confirmed with subtle.ConstantTimeCompare as defence in depth. A linear
// subtle scan over every digest would add nothing but O(keys) cost.
func (e *Engine) Authenticate(credential string) (*pipeline.Tenant, error) {
	if e.open != nil {
		return e.open, nil
	}
	if credential == "" {
		return nil, pipeline.Unauthorized(nil, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	}
	// Copy into a stack buffer: []byte(credential) would allocate for any
	// key longer than 32 bytes.
	var buf [128]byte
	var sum [sha256.Size]byte
	if len(credential) <= len(buf) {
		sum = sha256.Sum256(append(buf[:0], credential...))
	} else {
		sum = sha256.Sum256([]byte(credential))
	}
	if k, ok := e.keys[sum]; ok && subtle.ConstantTimeCompare(k.sum[:], sum[:]) == 1 {
		return k.tenant, nil
	}
	return nil, pipeline.Unauthorized(errUnknownKey, "Incorrect API key provided.")
}

var errUnknownKey = errors.New("policies: unknown key")
