package config

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
)

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// validate checks every cross-reference and value; the first problem wins and
// names the key.
func (c *Config) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !oneOf(c.Server.LogLevel, "debug", "info", "warn", "error") {
		add("server.log_level: %q is not one of debug, info, warn, error", c.Server.LogLevel)
	}
	if !oneOf(c.Server.LogFormat, "json", "console") {
		add("server.log_format: %q is not one of json, console", c.Server.LogFormat)
	}
	if c.Server.MaxBodyBytes < 0 {
		add("server.max_body_bytes: must be positive")
	}

	providers := map[string]bool{}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		switch {
		case p.Name == "":
			add("%s.name: required", at)
		case providers[p.Name]:
			add("%s.name: %q is defined twice", at, p.Name)
		}
		providers[p.Name] = true
		switch p.Kind {
		case "openai":
			u, err := url.Parse(p.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add("%s.base_url: %q is not an http(s) URL", at, p.BaseURL)
			}
		case "mock":
		default:
			add("%s.kind: %q is not one of openai, mock", at, p.Kind)
		}
		if !oneOf(p.PromptCache, "none", "openai", "anthropic") {
			add("%s.prompt_cache: %q is not one of none, openai, anthropic", at, p.PromptCache)
		}
		if p.MaxResponseBytes < 0 {
			add("%s.max_response_bytes: must be positive", at)
		}
		if *p.Retries < 0 || *p.Retries > 10 {
			add("%s.retries: %d is outside 0..10", at, *p.Retries)
		}
	}
	if c.Server.DefaultProvider != "" && !providers[c.Server.DefaultProvider] {
		add("server.default_provider: unknown provider %q", c.Server.DefaultProvider)
	}

	models := map[string]bool{}
	for _, m := range c.Models {
		models[m.Name] = true
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		at := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			add("%s.name: required", at)
		} else if seen[m.Name] {
			add("%s.name: %q is defined twice", at, m.Name)
		}
		seen[m.Name] = true
		if len(m.Deployments) == 0 {
			add("%s: needs provider or deployments", at)
		}
		for j, d := range m.Deployments {
			if !providers[d.Provider] {
				add("%s.deployments[%d].provider: unknown provider %q", at, j, d.Provider)
			}
			if d.Weight < 0 {
				add("%s.deployments[%d].weight: must be positive", at, j)
			}
		}
		for j, f := range m.Fallbacks {
			if !models[f] {
				add("%s.fallbacks[%d]: unknown model %q", at, j, f)
			} else if f == m.Name {
				add("%s.fallbacks[%d]: a model cannot fall back to itself", at, j)
			}
		}
		for j, mw := range m.Middleware {
			if !oneOf(mw, "context_edit", "prompt_cache", "fallback") {
				add("%s.middleware[%d]: %q is not one of context_edit, prompt_cache, fallback", at, j, mw)
			}
		}
		if m.ContextWindow < 0 {
			add("%s.context_window: must be positive", at)
		}
		if !oneOf(m.Encoding, "o200k_base", "cl100k_base", "p50k_base", "r50k_base") {
			add("%s.encoding: %q is not one of o200k_base, cl100k_base, p50k_base, r50k_base", at, m.Encoding)
		}
	}

	tools := map[string]bool{}
	for i, t := range c.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		if !toolName.MatchString(t.Name) {
			add("%s.name: %q must match [a-zA-Z0-9_-]{1,64}", at, t.Name)
		}
		if tools[t.Name] {
			add("%s.name: %q is defined twice", at, t.Name)
		}
		tools[t.Name] = true
		if t.Parameters != "" && !json.Valid([]byte(t.Parameters)) {
			add("%s.parameters: not valid JSON", at)
		}
		switch t.Kind {
		case "builtin":
		case "http":
			u, err := url.Parse(t.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add("%s.url: %q is not an http(s) URL", at, t.URL)
			}
		case "agent":
			if !models[t.Model] {
				add("%s.model: unknown model %q", at, t.Model)
			}
		case "mcp":
			add("%s.kind: MCP tools are not listed one by one: add the server as [[mcp_servers]] (its tools are listed at start, with prefix, allow and deny)", at)
		default:
			add("%s.kind: %q is not one of builtin, http, agent", at, t.Kind)
		}
		for j, g := range t.Models {
			if _, err := path.Match(g, ""); err != nil {
				add("%s.models[%d]: bad pattern %q", at, j, g)
			}
		}
	}
	mcpNames := map[string]bool{}
	for i, s := range c.MCPServers {
		at := fmt.Sprintf("mcp_servers[%d]", i)
		switch {
		case s.Name == "":
			add("%s.name: required", at)
		case mcpNames[s.Name]:
			add("%s.name: %q is defined twice", at, s.Name)
		}
		mcpNames[s.Name] = true
		if (s.Command == "") == (s.URL == "") {
			add("%s: set exactly one of command, url", at)
		}
		if s.URL != "" {
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add("%s.url: %q is not an http(s) URL", at, s.URL)
			}
		}
		if s.Command != "" && (len(s.Headers) > 0) {
			add("%s.headers: only for url (streamable HTTP) servers", at)
		}
		if s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0) {
			add("%s: args and env are only for command (stdio) servers", at)
		}
		if s.Prefix != "" && !toolName.MatchString(s.Prefix) {
			add("%s.prefix: %q must match [a-zA-Z0-9_-]{1,64}", at, s.Prefix)
		}
		if s.Timeout < 0 {
			add("%s.timeout: must be positive", at)
		}
		for j, g := range append(append(append([]string(nil), s.Allow...), s.Deny...), s.Models...) {
			if _, err := path.Match(g, ""); err != nil {
				add("%s: bad pattern %q (#%d of allow, deny, models)", at, g, j)
			}
		}
	}

	for i, mw := range c.Middleware.Request {
		if !oneOf(mw, "policy", "limits", "cache") {
			add("middleware.request[%d]: %q is not one of policy, limits, cache", i, mw)
		}
	}
	c.validateLimits(add)
	if !oneOf(c.Middleware.Cache.Store, "memory", "redis") {
		add("middleware.cache.store: %q is not one of memory, redis", c.Middleware.Cache.Store)
	}
	if c.Middleware.Cache.Store == "redis" && c.Redis == nil {
		add("middleware.cache.store: redis needs a [redis] section")
	}
	if !oneOf(c.Middleware.ContextEdit.LastResort, "error", "drop_turns") {
		add("middleware.context_edit.last_resort: %q is not one of error, drop_turns", c.Middleware.ContextEdit.LastResort)
	}

	tenants := map[string]bool{}
	for i, k := range c.Keys {
		at := fmt.Sprintf("keys[%d]", i)
		if k.Tenant == "" {
			add("%s.tenant: required", at)
		}
		tenants[k.Tenant] = true
		switch {
		case k.Key == "" && k.SHA256 == "":
			add("%s: set key or sha256 (the ${ENV} reference may be unset)", at)
		case k.Key != "" && k.SHA256 != "":
			add("%s: set only one of key, sha256", at)
		case k.SHA256 != "":
			if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
				add("%s.sha256: not 64 hex digits", at)
			}
		}
	}
	for i, p := range c.Policies {
		at := fmt.Sprintf("policies[%d]", i)
		if p.Tenant == "" {
			add("%s.tenant: required (\"*\" for every tenant)", at)
		}
		if !oneOf(p.MaxTokensMode, "clamp", "reject") {
			add("%s.max_tokens_mode: %q is not one of clamp, reject", at, p.MaxTokensMode)
		}
		for j, g := range append(append(append([]string(nil), p.Models...), p.Tools...), p.Passthrough...) {
			if _, err := path.Match(g, ""); err != nil {
				add("%s: bad pattern %q (#%d)", at, g, j)
			}
		}
	}
	if c.Redis != nil && c.Redis.Addr == "" {
		add("redis.addr: required")
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}
