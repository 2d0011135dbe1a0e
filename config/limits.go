package config

import (
	"fmt"
	"path"
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

// validateLimits checks [[limits]], [[budgets]], prices and key roles.
func (c *Config) validateLimits(add func(format string, args ...any)) {
	if !oneOf(c.Tracing.Protocol, "http/protobuf", "grpc") {
		add("tracing.protocol: %q is not one of http/protobuf, grpc", c.Tracing.Protocol)
	}
	if r := c.Tracing.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		add("tracing.sample_ratio: must be between 0 and 1")
	}
	if !oneOf(c.Middleware.Limits.Fail, "open", "closed") {
		add("middleware.limits.fail: %q is not one of open, closed", c.Middleware.Limits.Fail)
	}
	for i, l := range c.Limits {
		at := fmt.Sprintf("limits[%d]", i)
		for _, g := range []string{l.Tenant, l.Key, l.Model} {
			if _, err := path.Match(g, ""); err != nil {
				add("%s: bad pattern %q", at, g)
			}
		}
		if l.RequestsPerMinute < 0 || l.TokensPerMinute < 0 || l.Concurrent < 0 || l.ToolCallsPerMinute < 0 {
			add("%s: limits must not be negative", at)
		}
		if l.RequestsPerMinute == 0 && l.TokensPerMinute == 0 && l.Concurrent == 0 && l.ToolCallsPerMinute == 0 {
			add("%s: set at least one of requests_per_minute, tokens_per_minute, concurrent, tool_calls_per_minute", at)
		}
	}
	for i, b := range c.Budgets {
		at := fmt.Sprintf("budgets[%d]", i)
		if (b.Tenant == "") == (b.Key == "") {
			add("%s: set one of tenant, key", at)
		}
		if b.Amount <= 0 {
			add("%s.amount: must be positive (dollars)", at)
		}
		if !oneOf(b.Period, "day", "month", "total") {
			add("%s.period: %q is not one of day, month, total", at, b.Period)
		}
		if b.WarnAt < 0 || b.WarnAt > 1 {
			add("%s.warn_at: must be a fraction between 0 and 1", at)
		}
	}
	for i, m := range c.Models {
		if p := m.Price; p != nil && (p.Input < 0 || p.Output < 0 || p.CachedInput < 0) {
			add("models[%d].price: prices must not be negative", i)
		}
	}
	for i, k := range c.Keys {
		if !oneOf(k.Role, "", "admin") {
			add("keys[%d].role: %q is not one of admin (or unset)", i, k.Role)
		}
	}
}
