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
	}
}

// UnknownCallers returns, for each [[limits]] and [[budgets]] entry whose
// tenant or key names no [[keys]] entry's (a limit's pattern aside), its
// key path and the name: a typo ("team_a" for "team-a", "alcie") leaves
// every caller outside the rule, a spend cap or a rate limit that never
// applies. Not an error: a reload that revokes a key may leave its rules
// behind for a while, and must not be refused (the key would keep
// working). The limiter logs them. Without keys every request is the
// tenant "default" and has no key name: none is reported.
func (c *Config) UnknownCallers() [][2]string {
	if len(c.Keys) == 0 {
		return nil
	}
	var out [][2]string
	// glob: a limit's names are patterns (path.Match); a budget's are names.
	check := func(at, tenant, key string, glob bool) {
		literal := func(s string) bool { return !glob || !strings.ContainsAny(s, "*?[\\") }
		hasTenant, hasKey := false, false
		for i, k := range c.Keys {
			hasTenant = hasTenant || k.Tenant == tenant
			// A key without a name is named by its place (as the policy engine names it).
			hasKey = hasKey || k.Name == key || (k.Name == "" && fmt.Sprintf("keys[%d]", i) == key)
		}
		if tenant != "" && literal(tenant) && !hasTenant {
			out = append(out, [2]string{at + ".tenant", tenant})
		}
		if key != "" && literal(key) && !hasKey {
			out = append(out, [2]string{at + ".key", key})
		}
	}
	for i, l := range c.Limits {
		check(fmt.Sprintf("limits[%d]", i), l.Tenant, l.Key, true)
	}
	for i, b := range c.Budgets {
		check(fmt.Sprintf("budgets[%d]", i), b.Tenant, b.Key, false)
	}
	return out
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
	}
}
