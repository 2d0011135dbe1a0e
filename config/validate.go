package config

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
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

// validate checks every cross-reference and value and returns every
// problem, each a *KeyError naming its key as the file writes it (o maps
// indexes back to the file's, since defaults drop optional providers and
// their models). Lines are filled in by the caller.
func (c *Config) validate(o *origin) error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}

	if !oneOf(c.Server.LogLevel, "debug", "info", "warn", "error") {
		add("server.log_level", "%q is not one of debug, info, warn, error", c.Server.LogLevel)
	}
	if !oneOf(c.Server.LogFormat, "json", "console") {
		add("server.log_format", "%q is not one of json, console", c.Server.LogFormat)
	}
	if c.Server.MaxBodyBytes < 0 {
		add("server.max_body_bytes", "must be positive")
	}

	providers := map[string]bool{}
	for i, p := range c.Providers {
		at := fmt.Sprintf("providers[%d]", o.provider(i))
		switch {
		case p.Name == "":
			add(at+".name", "required")
		case providers[p.Name]:
			add(at+".name", "%q is defined twice", p.Name)
		}
		providers[p.Name] = true
		switch p.Kind {
		case "openai":
			u, err := url.Parse(p.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add(at+".base_url", "%q is not an http(s) URL", redactURL(p.BaseURL))
			}
		case "mock":
		default:
			add(at+".kind", "%q is not one of openai, mock", p.Kind)
		}
		if !oneOf(p.PromptCache, "none", "openai", "anthropic") {
			add(at+".prompt_cache", "%q is not one of none, openai, anthropic", p.PromptCache)
		}
		if p.MaxResponseBytes < 0 {
			add(at+".max_response_bytes", "must be positive")
		}
		if *p.Retries < 0 || *p.Retries > 10 {
			add(at+".retries", "%d is outside 0..10", *p.Retries)
		}
	}
	if c.Server.DefaultProvider != "" && !providers[c.Server.DefaultProvider] {
		add("server.default_provider", "unknown provider %q", c.Server.DefaultProvider)
	}

	models := map[string]bool{}
	for _, m := range c.Models {
		models[m.Name] = true
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		at := fmt.Sprintf("models[%d]", o.model(i))
		if m.Name == "" {
			add(at+".name", "required")
		} else if seen[m.Name] {
			add(at+".name", "%q is defined twice", m.Name)
		}
		seen[m.Name] = true
		if len(m.Deployments) == 0 {
			add(at, "needs provider or deployments")
		}
		for j, d := range m.Deployments {
			dep, shorthand := o.deployment(i, j)
			if !providers[d.Provider] {
				if shorthand {
					add(at+".provider", "unknown provider %q", d.Provider)
				} else {
					add(fmt.Sprintf("%s.deployments[%d].provider", at, dep), "unknown provider %q", d.Provider)
				}
			}
			if d.Weight < 0 {
				add(fmt.Sprintf("%s.deployments[%d].weight", at, dep), "must be positive")
			}
		}
		for j, f := range m.Fallbacks {
			if !models[f] {
				add(fmt.Sprintf("%s.fallbacks[%d]", at, o.fallback(i, j)), "unknown model %q", f)
			} else if f == m.Name {
				add(fmt.Sprintf("%s.fallbacks[%d]", at, o.fallback(i, j)), "a model cannot fall back to itself")
			}
		}
		for j, mw := range m.Middleware {
			if !oneOf(mw, "context_edit", "prompt_cache", "fallback") {
				add(fmt.Sprintf("%s.middleware[%d]", at, j), "%q is not one of context_edit, prompt_cache, fallback", mw)
			}
		}
		if m.ContextWindow < 0 {
			add(at+".context_window", "must be positive")
		}
		if !oneOf(m.Encoding, "o200k_base", "cl100k_base", "p50k_base", "r50k_base") {
			add(at+".encoding", "%q is not one of o200k_base, cl100k_base, p50k_base, r50k_base", m.Encoding)
		}
	}

	tools := map[string]bool{}
	for i, t := range c.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		if !toolName.MatchString(t.Name) {
			add(at+".name", "%q must match [a-zA-Z0-9_-]{1,64}", t.Name)
		}
		if tools[t.Name] {
			add(at+".name", "%q is defined twice", t.Name)
		}
		tools[t.Name] = true
		if t.Parameters != "" && !json.Valid([]byte(t.Parameters)) {
			add(at+".parameters", "not valid JSON")
		}
		if t.System != "" && t.Kind != "agent" && !(t.Kind == "builtin" && t.Builtin == "write_todos") {
			add(at+".system", "only for kind agent and the builtin write_todos")
		}
		switch t.Kind {
		case "builtin":
		case "http":
			u, err := url.Parse(t.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add(at+".url", "%q is not an http(s) URL", redactURL(t.URL))
			}
		case "agent":
			if !models[t.Model] {
				add(at+".model", "unknown model %q", t.Model)
			}
		case "mcp":
			add(at+".kind", "MCP tools are not listed one by one: add the server as [[mcp_servers]] (its tools are listed at start, with prefix, allow and deny)")
		default:
			add(at+".kind", "%q is not one of builtin, http, agent", t.Kind)
		}
		for j, g := range t.Models {
			if _, err := path.Match(g, ""); err != nil {
				add(fmt.Sprintf("%s.models[%d]", at, j), "bad pattern %q", g)
			}
		}
		if t.MaxCalls < 0 {
			add(at+".max_calls", "must be 0 (unlimited) or more")
		}
	}
	if c.ToolLoop.MaxToolCalls < 1 {
		add("tool_loop.max_tool_calls", "must be at least 1")
	}
	if c.ToolLoop.MaxModelCalls < 2 {
		add("tool_loop.max_model_calls", "must be at least 2: the first model call and a final answer")
	}
	mcpNames := map[string]bool{}
	for i, s := range c.MCPServers {
		at := fmt.Sprintf("mcp_servers[%d]", i)
		switch {
		case s.Name == "":
			add(at+".name", "required")
		case mcpNames[s.Name]:
			add(at+".name", "%q is defined twice", s.Name)
		}
		mcpNames[s.Name] = true
		if (s.Command == "") == (s.URL == "") {
			add(at, "set exactly one of command, url")
		}
		if s.URL != "" {
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add(at+".url", "%q is not an http(s) URL", redactURL(s.URL))
			}
		}
		if s.Command != "" && (len(s.Headers) > 0) {
			add(at+".headers", "only for url (streamable HTTP) servers")
		}
		if s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0) {
			add(at, "args and env are only for command (stdio) servers")
		}
		if s.Prefix != "" && !toolName.MatchString(s.Prefix) {
			add(at+".prefix", "%q must match [a-zA-Z0-9_-]{1,64}", s.Prefix)
		}
		if s.Timeout < 0 {
			add(at+".timeout", "must be positive")
		}
		if s.MaxCalls < 0 {
			add(at+".max_calls", "must be 0 (unlimited) or more")
		}
		for _, l := range []struct {
			name string
			list []string
		}{{"allow", s.Allow}, {"deny", s.Deny}, {"models", s.Models}} {
			for j, g := range l.list {
				if _, err := path.Match(g, ""); err != nil {
					add(fmt.Sprintf("%s.%s[%d]", at, l.name, j), "bad pattern %q", g)
				}
			}
		}
	}

	for i, mw := range c.Middleware.Request {
		if !oneOf(mw, "policy", "limits", "cache") {
			add(fmt.Sprintf("middleware.request[%d]", i), "%q is not one of policy, limits, cache", mw)
		}
	}
	c.validateLimits(func(format string, args ...any) {
		// validateLimits writes "key: message"; its model indexes are
		// counted after defaults, like everything validate sees.
		key, msg, ok := strings.Cut(fmt.Sprintf(format, args...), ": ")
		if !ok {
			key, msg = "", key
		}
		if rest, ok := strings.CutPrefix(key, "models["); ok {
			if n, tail, ok := strings.Cut(rest, "]"); ok {
				if i, err := strconv.Atoi(n); err == nil {
					key = fmt.Sprintf("models[%d]%s", o.model(i), tail)
				}
			}
		}
		errs = append(errs, &KeyError{Key: key, Msg: msg})
	})
	if !oneOf(c.Middleware.Cache.Store, "memory", "redis") {
		add("middleware.cache.store", "%q is not one of memory, redis", c.Middleware.Cache.Store)
	}
	if c.Middleware.Cache.Store == "redis" && c.Redis == nil {
		add("middleware.cache.store", "redis needs a [redis] section")
	}
	ce := c.Middleware.ContextEdit
	if !oneOf(ce.LastResort, "error", "drop_turns", "summarize") {
		add("middleware.context_edit.last_resort", "%q is not one of error, drop_turns, summarize", ce.LastResort)
	}
	if !oneOf(ce.SummaryFallback, "error", "drop_turns") {
		add("middleware.context_edit.summary_fallback", "%q is not one of error, drop_turns", ce.SummaryFallback)
	}
	if ce.LastResort == "summarize" && !models[ce.SummaryModel] {
		add("middleware.context_edit.summary_model", "summarize needs a configured model, not %q", ce.SummaryModel)
	}

	tenants := map[string]bool{}
	for i, k := range c.Keys {
		at := fmt.Sprintf("keys[%d]", i)
		if k.Tenant == "" {
			add(at+".tenant", "required")
		}
		tenants[k.Tenant] = true
		switch {
		case k.Key == "" && k.SHA256 == "":
			add(at, "set key or sha256 (the ${ENV} reference may be unset)")
		case k.Key != "" && k.SHA256 != "":
			add(at, "set only one of key, sha256")
		case k.SHA256 != "":
			if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
				add(at+".sha256", "not 64 hex digits")
			}
		}
	}
	for i, p := range c.Policies {
		at := fmt.Sprintf("policies[%d]", i)
		if p.Tenant == "" {
			add(at+".tenant", "required (\"*\" for every tenant)")
		}
		if !oneOf(p.MaxTokensMode, "clamp", "reject") {
			add(at+".max_tokens_mode", "%q is not one of clamp, reject", p.MaxTokensMode)
		}
		for _, l := range []struct {
			name string
			list []string
		}{{"models", p.Models}, {"tools", p.Tools}, {"passthrough", p.Passthrough}} {
			for j, g := range l.list {
				if _, err := path.Match(g, ""); err != nil {
					add(fmt.Sprintf("%s.%s[%d]", at, l.name, j), "bad pattern %q", g)
				}
			}
		}
	}
	if c.Redis != nil && c.Redis.Addr == "" {
		add("redis.addr", "required")
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// redactURL returns u without the password of its user info, for messages.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return u
}

// origin maps the indexes of the validated config back to the file's:
// defaults drop optional providers without a key, with their models,
// deployments and fallbacks, and turn a model's provider shorthand into a
// deployment. It holds what the file had before defaults ran.
type origin struct {
	providers []string
	models    []modelOrigin
	// after, filled by mapTo: the file's index of each kept element.
	provIdx, modelIdx []int
	after             *Config
}

type modelOrigin struct {
	key         string // name and provider
	deployments []string
	fallbacks   []string
}

// newOrigin records c before defaults.
func newOrigin(c *Config) *origin {
	o := &origin{}
	for _, p := range c.Providers {
		o.providers = append(o.providers, p.Name)
	}
	for _, m := range c.Models {
		mo := modelOrigin{key: m.Name + "\x00" + m.Provider, fallbacks: append([]string(nil), m.Fallbacks...)}
		for _, d := range m.Deployments {
			mo.deployments = append(mo.deployments, d.Provider)
		}
		o.models = append(o.models, mo)
	}
	return o
}

// mapTo matches c, the config after defaults, to what was recorded. Kept
// elements keep their order, so the k-th kept one is matched to the first
// unmatched recorded one with the same key.
func (o *origin) mapTo(c *Config) {
	o.after = c
	provs := make([]string, len(c.Providers))
	for i, p := range c.Providers {
		provs[i] = p.Name
	}
	o.provIdx = subsequence(o.providers, provs)
	keys := make([]string, len(c.Models))
	for i, m := range c.Models {
		keys[i] = m.Name + "\x00" + m.Provider
	}
	mk := make([]string, len(o.models))
	for i, m := range o.models {
		mk[i] = m.key
	}
	o.modelIdx = subsequence(mk, keys)
}

// subsequence returns, for each element of kept, the index in orig it came
// from; kept is orig with elements removed.
func subsequence(orig, kept []string) []int {
	idx := make([]int, len(kept))
	j := 0
	for i, k := range kept {
		for j < len(orig) && orig[j] != k {
			j++
		}
		if j == len(orig) { // not a subsequence after all: keep the index as is
			idx[i] = i
			continue
		}
		idx[i] = j
		j++
	}
	return idx
}

func (o *origin) provider(i int) int {
	if o == nil || i >= len(o.provIdx) {
		return i
	}
	return o.provIdx[i]
}

func (o *origin) model(i int) int {
	if o == nil || i >= len(o.modelIdx) {
		return i
	}
	return o.modelIdx[i]
}

// deployment returns the file's index of deployment j of model i, and
// whether the file wrote it as the model's provider shorthand.
func (o *origin) deployment(i, j int) (int, bool) {
	if o == nil || o.after == nil || o.model(i) >= len(o.models) {
		return j, false
	}
	orig := o.models[o.model(i)].deployments
	if len(orig) == 0 {
		return 0, true
	}
	kept := make([]string, len(o.after.Models[i].Deployments))
	for k, d := range o.after.Models[i].Deployments {
		kept[k] = d.Provider
	}
	if idx := subsequence(orig, kept); j < len(idx) {
		return idx[j], false
	}
	return j, false
}

// fallback returns the file's index of fallback j of model i.
func (o *origin) fallback(i, j int) int {
	if o == nil || o.after == nil || o.model(i) >= len(o.models) {
		return j
	}
	if idx := subsequence(o.models[o.model(i)].fallbacks, o.after.Models[i].Fallbacks); j < len(idx) {
		return idx[j]
	}
	return j
}
