package config

import (
	"fmt"
	"path"
	"strings"
)

// setLimitDefaults fills the defaults of [[limits]], [[budgets]] and
// [middleware.limits].
func (c *Config) setLimitDefaults() {
	setStr(&c.Middleware.Limits.Fail, "open")
	setStr(&c.Tracing.Protocol, "http/protobuf")
	setStr(&c.Tracing.ServiceName, "llmgw")
	for i := range c.Budgets {
		b := &c.Budgets[i]
		setStr(&b.Period, "month")
		if b.WarnAt == 0 {
			b.WarnAt = 0.8
		}
	}
	for i := range c.Models {
		if p := c.Models[i].Price; p != nil && p.CachedInput == 0 {
			p.CachedInput = p.Input
		}
	}
}

// validateLimits checks [tracing], [middleware.limits], [[limits]],
// [[budgets]], prices and key roles.
func (c *Config) validateLimits(p *problems, o *origin) {
	p.checkEnum("tracing.protocol", c.Tracing.Protocol, "http/protobuf", "grpc")
	if r := c.Tracing.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		p.add("tracing.sample_ratio", "must be between 0 and 1")
	}
	p.checkEnum("middleware.limits.fail", c.Middleware.Limits.Fail, "open", "closed")
	c.validateLimitRules(p)
	c.validateBudgets(p)
	for i, m := range c.Models {
		if pr := m.Price; pr != nil && (pr.Input < 0 || pr.Output < 0 || pr.CachedInput < 0) {
			p.add(fmt.Sprintf("models[%d].price", o.model(i)), "prices must not be negative")
		}
	}
	for i, k := range c.Keys {
		if !oneOf(k.Role, "", "admin") {
			p.add(fmt.Sprintf("keys[%d].role", i), "%q is not one of admin (or unset)", k.Role)
		}
	}
}

// validateLimitRules checks [[limits]]: patterns that compile, and at
// least one limit, none negative.
func (c *Config) validateLimitRules(p *problems) {
	for i, l := range c.Limits {
		at := fmt.Sprintf("limits[%d]", i)
		for _, g := range []struct{ key, pattern string }{{"tenant", l.Tenant}, {"key", l.Key}, {"model", l.Model}} {
			if _, err := path.Match(g.pattern, ""); err != nil {
				p.add(at+"."+g.key, "bad pattern %q", g.pattern)
			}
		}
		if l.RequestsPerMinute < 0 || l.TokensPerMinute < 0 || l.Concurrent < 0 || l.ToolCallsPerMinute < 0 {
			p.add(at, "limits must not be negative")
		}
		if l.RequestsPerMinute == 0 && l.TokensPerMinute == 0 && l.Concurrent == 0 && l.ToolCallsPerMinute == 0 {
			p.add(at, "set at least one of requests_per_minute, tokens_per_minute, concurrent, tool_calls_per_minute")
		}
		c.checkCaller(p, at, l.Tenant, l.Key)
	}
}

// checkCaller reports a rule's tenant or key name (not a pattern) that no
// [[keys]] entry has: a typo ("team_a" for "team-a", "alcie") would
// silently leave every caller outside the rule, a spend cap or a rate
// limit that never applies. Without keys every request is the tenant
// "default" and has no key name, which the check leaves alone.
func (c *Config) checkCaller(p *problems, at, tenant, key string) {
	if len(c.Keys) == 0 {
		return
	}
	pattern := func(s string) bool { return strings.ContainsAny(s, "*?[\\") }
	hasTenant, hasKey := false, false
	for i, k := range c.Keys {
		hasTenant = hasTenant || k.Tenant == tenant
		// A key without a name is named by its place (as the policy engine names it).
		hasKey = hasKey || k.Name == key || (k.Name == "" && fmt.Sprintf("keys[%d]", i) == key)
	}
	if tenant != "" && !pattern(tenant) && !hasTenant {
		p.add(at+".tenant", "no [[keys]] entry has the tenant %q", tenant)
	}
	if key != "" && !pattern(key) && !hasKey {
		p.add(at+".key", "no [[keys]] entry is named %q", key)
	}
}

// validateBudgets checks [[budgets]].
func (c *Config) validateBudgets(p *problems) {
	for i, b := range c.Budgets {
		at := fmt.Sprintf("budgets[%d]", i)
		if (b.Tenant == "") == (b.Key == "") {
			p.add(at, "set one of tenant, key")
		}
		if b.Amount <= 0 {
			p.add(at+".amount", "must be positive (dollars)")
		}
		p.checkEnum(at+".period", b.Period, "day", "month", "total")
		if b.WarnAt < 0 || b.WarnAt > 1 {
			p.add(at+".warn_at", "must be a fraction between 0 and 1")
		}
		if (b.Tenant == "") != (b.Key == "") {
			c.checkCaller(p, at, b.Tenant, b.Key)
		}
	}
}
