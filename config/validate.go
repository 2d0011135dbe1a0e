package config

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
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

// problems collects what validate finds, each a *KeyError naming its key.
type problems struct{ errs []error }

func (p *problems) add(key, format string, args ...any) {
	p.errs = append(p.errs, &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// checkEnum reports v unless it is one of allowed.
func (p *problems) checkEnum(key, v string, allowed ...string) {
	if !oneOf(v, allowed...) {
		p.add(key, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

// checkHTTPURL reports raw unless it is an absolute http(s) URL with a
// host; the message never shows its password.
func (p *problems) checkHTTPURL(key, raw string) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add(key, "%q is not an http(s) URL", redactURL(raw))
	}
}

// checkName reports an empty name or one seen before, and records it.
func (p *problems) checkName(key, name string, seen map[string]bool) {
	switch {
	case name == "":
		p.add(key, "required")
	case seen[name]:
		p.add(key, "%q is defined twice", name)
	}
	seen[name] = true
}

// checkPatterns reports every entry of the list at key that is not a
// path.Match pattern.
func (p *problems) checkPatterns(key string, list []string) {
	for j, g := range list {
		if _, err := path.Match(g, ""); err != nil {
			p.add(fmt.Sprintf("%s[%d]", key, j), "bad pattern %q", g)
		}
	}
}

// maxShutdownDelay bounds server.shutdown_delay: a load balancer's health
// checks take seconds to notice a replica leaving, not minutes.
const maxShutdownDelay = 5 * time.Minute

// checkPositive reports a negative n.
func (p *problems) checkPositive(key string, n int64) {
	if n < 0 {
		p.add(key, "must be positive")
	}
}

// validate checks every cross-reference and value and returns every
// problem, each a *KeyError naming its key as the file writes it (o maps
// indexes back to the file's, since defaults drop optional providers and
// their models). Lines are filled in by the caller.
func (c *Config) validate(o *origin) error {
	var p problems
	c.validateServer(&p)
	providers := c.validateProviders(&p, o)
	if c.Server.DefaultProvider != "" && !providers[c.Server.DefaultProvider] {
		p.add("server.default_provider", "unknown provider %q", c.Server.DefaultProvider)
	}
	models := c.validateModels(&p, o, providers)
	c.validateTools(&p, models)
	c.validateMCPServers(&p)
	c.validateMiddleware(&p, o)
	c.validateToolSelect(&p, o, models)
	c.validateKeys(&p)
	c.validatePolicies(&p)
	c.validateResponses(&p, o)
	c.validateToolCalling(&p, o)
	c.validateGuardrails(&p)
	c.validateOpenAPI(&p)
	c.Redis.validate(&p)
	for _, key := range c.emptied {
		// Every call would fail NOAUTH: with fail = "open", no limit or
		// budget enforced, by a fleet that says it is ready.
		p.add(key, "is empty once read (an unset or blank ${NAME}); leave it out for none")
	}
	c.validateHeaders(&p, o)
	if c.Tracing.Endpoint != "" {
		p.checkHTTPURL("tracing.endpoint", c.Tracing.Endpoint)
		if u, err := url.Parse(c.Tracing.Endpoint); err == nil && (u.RawQuery != "" || u.ForceQuery) {
			// The OTLP exporter sends no query string: a token in it was
			// dropped, and after a base endpoint's query the exporter's
			// path went astray.
			p.add("tracing.endpoint", "takes no query string: the OTLP exporter does not send one (put a token in [tracing] headers)")
		}
		if u, err := url.Parse(c.Tracing.Endpoint); err == nil && u.User != nil {
			// Nor user info: the credentials would be dropped unsent.
			p.add("tracing.endpoint", "takes no user info: the OTLP exporter does not send it (put an Authorization header in [tracing] headers)")
		}
	}
	return errors.Join(p.errs...)
}

// validateHeaders reports a configured header whose name is not an HTTP
// token, or whose value holds a control character (inside it: the
// whitespace around a value is trimmed, expandHeaders): sent as written,
// it made a malformed request (a name with a space), or a mangled one.
func (c *Config) validateHeaders(p *problems, o *origin) {
	for i, pr := range c.Providers {
		p.checkHeaders(fmt.Sprintf("providers[%d].headers", o.provider(i)), pr.Headers)
		if hasControl(pr.APIKey) { // sent in a header too
			p.add(fmt.Sprintf("providers[%d].api_key", o.provider(i)), "the value holds a control character")
		}
	}
	for i, t := range c.Tools {
		p.checkHeaders(fmt.Sprintf("tools[%d].headers", i), t.Headers)
	}
	for i, s := range c.MCPServers {
		p.checkHeaders(fmt.Sprintf("mcp_servers[%d].headers", i), s.Headers)
	}
	for i, s := range c.OpenAPI {
		p.checkHeaders(fmt.Sprintf("openapi[%d].headers", i), s.Headers)
	}
	for i, g := range c.Guardrails {
		p.checkHeaders(fmt.Sprintf("guardrails[%d].headers", i), g.Headers)
	}
	p.checkHeaders("tracing.headers", c.Tracing.Headers)
}

func (p *problems) checkHeaders(key string, h map[string]string) {
	names := slices.Sorted(maps.Keys(h))
	for i, name := range names {
		if !IsToken(name) {
			p.add(key, "%q is not a header name", name)
		}
		// Header names are case-insensitive: two entries naming one
		// header sent one of the two values, which changed with the
		// map's order from request to request.
		if j := slices.IndexFunc(names[:i], func(n string) bool { return strings.EqualFold(n, name) }); j >= 0 {
			p.add(key, "%q and %q name the same header", names[j], name)
		}
		if hasControl(h[name]) {
			p.add(key+"."+name, "the value holds a control character")
		}
	}
}

// hasControl reports whether s holds a control character other than tab,
// which a header value may not.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f })
}

// IsToken reports whether s is an HTTP token (RFC 9110 tchar), as a
// header name or a method is.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// LogLevels and LogFormats are the values server.log_level and
// server.log_format take (the command's -log-level and -log-format too).
var (
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"json", "console"}
)

func (c *Config) validateServer(p *problems) {
	p.checkEnum("server.log_level", c.Server.LogLevel, LogLevels...)
	p.checkEnum("server.log_format", c.Server.LogFormat, LogFormats...)
	p.checkPositive("server.max_body_bytes", int64(c.Server.MaxBodyBytes))
	p.checkPositive("server.read_timeout", int64(c.Server.ReadTimeout))
	p.checkPositive("server.write_timeout", int64(c.Server.WriteTimeout))
	p.checkPositive("server.idle_timeout", int64(c.Server.IdleTimeout))
	p.checkPositive("server.shutdown_timeout", int64(c.Server.ShutdownTimeout))
	if d := c.Server.ShutdownDelay.D(); d < 0 || d > maxShutdownDelay {
		p.add("server.shutdown_delay", "%s is outside 0..%s", d, maxShutdownDelay)
	}
	p.checkBuffer("server.read_buffer", c.Server.ReadBuffer)
	p.checkBuffer("server.write_buffer", c.Server.WriteBuffer)
	if g := c.Server.GCMinGrowthBytes; g != nil && (*g < 0 || *g > 1<<30) {
		p.add("server.gc_min_growth_bytes", "%d is outside 0..1073741824 (1 GiB)", *g)
	}
}

// CheckListen reports listen addresses the listeners cannot take: each
// host:port (the host may be empty, for every interface) with a port in
// 0..65535 or a service name, and metrics_listen not listen's own port.
// The command checks them once -listen has had its say (a file's listen
// may be a placeholder the flag replaces), at start and by -check.
func (s *Server) CheckListen() error {
	var p problems
	lh, lp := p.checkListen("server.listen", s.Listen)
	if s.MetricsListen != "" {
		mh, mp := p.checkListen("server.metrics_listen", s.MetricsListen)
		if lp != "" && lp == mp && lp != "0" && (lh == mh || anyHost(lh) || anyHost(mh)) {
			p.add("server.metrics_listen", "%q takes listen's port (%q): give it a port of its own, or leave it out to serve /metrics on listen", s.MetricsListen, s.Listen)
		}
	}
	return errors.Join(p.errs...)
}

// checkListen reports an address a listener cannot take, and returns its
// host and port ("" when it is not host:port).
func (p *problems) checkListen(key, addr string) (host, port string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add(key, "%q is not host:port", addr)
		return "", ""
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		p.add(key, "%q: the port is neither a number in 0..65535 nor a service name", addr)
		return "", ""
	}
	return host, port
}

// anyHost reports whether a listen host is every interface's.
func anyHost(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

// checkBuffer reports a connection buffer size outside MinConnBuffer..MaxConnBuffer.
func (p *problems) checkBuffer(key string, n int) {
	if n < MinConnBuffer || n > MaxConnBuffer {
		p.add(key, "%d is outside %d..%d bytes", n, MinConnBuffer, MaxConnBuffer)
	}
}

// validateProviders returns the set of provider names.
func (c *Config) validateProviders(p *problems, o *origin) map[string]bool {
	providers := map[string]bool{}
	for i, pr := range c.Providers {
		at := fmt.Sprintf("providers[%d]", o.provider(i))
		p.checkName(at+".name", pr.Name, providers)
		p.checkEnum(at+".kind", pr.Kind, "openai", "anthropic", "mock")
		if pr.Kind == "openai" || pr.Kind == "anthropic" {
			p.checkHTTPURL(at+".base_url", pr.BaseURL)
			if u, err := url.Parse(pr.BaseURL); err == nil && u.User != nil {
				// No request's URL carries it: refused, not dropped.
				p.add(at+".base_url", "holds user info (user:password@), which no request sends; set api_key or headers")
			}
		}
		p.checkEnum(at+".prompt_cache", pr.PromptCache, "none", "openai", "anthropic")
		// Sent as is in every cache_control marker: a value Anthropic does
		// not take would fail every request.
		if pr.PromptCacheTTL != "" {
			p.checkEnum(at+".prompt_cache_ttl", pr.PromptCacheTTL, "5m", "1h")
		}
		validateAnthropic(p, at, pr)
		p.checkPositive(at+".max_response_bytes", int64(pr.MaxResponseBytes))
		p.checkBuffer(at+".read_buffer", pr.ReadBuffer)
		p.checkPositive(at+".retry_after_cap", int64(pr.RetryAfterCap))
		p.checkPositive(at+".connect_timeout", int64(pr.ConnectTimeout))
		p.checkPositive(at+".first_byte_timeout", int64(pr.FirstByteTimeout))
		p.checkPositive(at+".stream_idle_timeout", int64(pr.StreamIdleTimeout))
		p.checkPositive(at+".total_timeout", int64(pr.TotalTimeout))
		p.checkPositive(at+".max_conns", int64(pr.MaxConns))
		if pr.Mock != nil {
			p.checkPositive(at+".mock.chunk_size", int64(pr.Mock.ChunkSize))
			p.checkPositive(at+".mock.first_byte_delay", int64(pr.Mock.FirstByteDelay))
			p.checkPositive(at+".mock.chunk_delay", int64(pr.Mock.ChunkDelay))
		}
		if *pr.Retries < 0 || *pr.Retries > 10 {
			p.add(at+".retries", "%d is outside 0..10", *pr.Retries)
		}
	}
	return providers
}

// validateModels returns the set of model names.
func (c *Config) validateModels(p *problems, o *origin, providers map[string]bool) map[string]bool {
	models := map[string]bool{}
	for _, m := range c.Models {
		models[m.Name] = true
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		at := fmt.Sprintf("models[%d]", o.model(i))
		p.checkName(at+".name", m.Name, seen)
		if len(m.Deployments) == 0 {
			p.add(at, "needs provider or deployments")
		}
		if o.both(i) {
			// The deployments would win, and the provider go unused.
			p.add(at+".provider", "set provider or deployments, not both")
		}
		for j, d := range m.Deployments {
			dep, shorthand := o.deployment(i, j)
			if !providers[d.Provider] {
				if shorthand {
					p.add(at+".provider", "unknown provider %q", d.Provider)
				} else {
					p.add(fmt.Sprintf("%s.deployments[%d].provider", at, dep), "unknown provider %q", d.Provider)
				}
			}
			p.checkPositive(fmt.Sprintf("%s.deployments[%d].weight", at, dep), int64(d.Weight))
		}
		for j, f := range m.Fallbacks {
			key := fmt.Sprintf("%s.fallbacks[%d]", at, o.fallback(i, j))
			switch {
			case !models[f]:
				p.add(key, "unknown model %q", f)
			case f == m.Name:
				p.add(key, "a model cannot fall back to itself")
			case slices.Contains(m.Fallbacks[:j], f):
				p.add(key, "%q is listed twice", f)
			}
		}
		if len(m.Fallbacks) > 0 && !slices.Contains(m.Middleware, "fallback") {
			// Nothing else reads them: the model's failures went to the
			// client with no retry and no fallback, without a word.
			p.add(at+".fallbacks", "need \"fallback\" in the model's middleware")
		}
		for j, mw := range m.Middleware {
			key := fmt.Sprintf("%s.middleware[%d]", at, j)
			p.checkEnum(key, mw, "context_edit", "prompt_cache", "fallback")
			if slices.Contains(m.Middleware[:j], mw) {
				// Each would run: a second fallback retries every attempt of the first.
				p.add(key, "%q is listed twice", mw)
			}
		}
		p.checkPositive(at+".context_window", int64(m.ContextWindow))
		p.checkPositive(at+".max_tokens", int64(m.MaxTokens))
		p.checkEnum(at+".encoding", m.Encoding, "o200k_base", "cl100k_base", "p50k_base", "r50k_base")
	}
	return models
}

func (c *Config) validateTools(p *problems, models map[string]bool) {
	tools := map[string]bool{}
	for i, t := range c.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		if !toolName.MatchString(t.Name) {
			p.add(at+".name", "%q must match [a-zA-Z0-9_-]{1,64}", t.Name)
		}
		if tools[t.Name] {
			p.add(at+".name", "%q is defined twice", t.Name)
		}
		tools[t.Name] = true
		p.checkPositive(at+".timeout", int64(t.Timeout))
		p.checkPositive(at+".concurrency", int64(t.Concurrency))
		p.checkPositive(at+".cache_ttl", int64(t.CacheTTL))
		if t.Parameters != "" && !json.Valid([]byte(t.Parameters)) {
			p.add(at+".parameters", "not valid JSON")
		}
		if t.System != "" && t.Kind != "agent" && !(t.Kind == "builtin" && t.Builtin == "write_todos") {
			p.add(at+".system", "only for kind agent and the builtin write_todos")
		}
		switch t.Kind {
		case "http":
			p.checkHTTPURL(at+".url", t.URL)
		case "agent":
			if !models[t.Model] {
				p.add(at+".model", "%s", c.unknownModel(t.Model))
			}
		case "mcp":
			p.add(at+".kind", "MCP tools are not listed one by one: add the server as [[mcp_servers]] (its tools are listed at start, with prefix, allow and deny)")
		default:
			p.checkEnum(at+".kind", t.Kind, "builtin", "http", "agent")
		}
		p.checkPatterns(at+".models", t.Models)
		if t.MaxCalls < 0 {
			p.add(at+".max_calls", "must be 0 (unlimited) or more")
		}
		if t.Approval != "" {
			p.checkEnum(at+".approval", t.Approval, "always", "never")
		}
	}
	l := c.ToolLoop
	for _, f := range []struct {
		key string
		n   int64
	}{
		{"max_iterations", int64(l.MaxIterations)}, {"max_consecutive_errors", int64(l.MaxConsecutiveErrors)},
		{"tool_timeout", int64(l.ToolTimeout)}, {"wall_time", int64(l.WallTime)},
		{"max_result_bytes", int64(l.MaxResultBytes)}, {"keepalive_interval", int64(l.KeepAliveInterval)},
		{"state_ttl", int64(l.StateTTL)}, {"state_max_entries", int64(l.StateMaxEntries)}, {"state_max_bytes", int64(l.StateMaxBytes)},
	} {
		p.checkPositive("tool_loop."+f.key, f.n)
	}
	if c.approvalUnset {
		// Replicas would each make up a key of their own, silently.
		p.add("tool_loop.approval_secret", "is empty once read and trimmed (an unset or blank ${NAME}); leave it out for a random key per process")
	}
	if d := l.KeepAliveInterval.D(); d > 0 && d < minKeepAlive {
		// Each interval writes a comment to every waiting stream: at 1ns a
		// 3 s tool run wrote 275,000 of them (3.8 MB).
		p.add("tool_loop.keepalive_interval", "%v is below the minimum of %v", d, minKeepAlive)
	}
	if c.ToolLoop.MaxToolCalls < 1 {
		p.add("tool_loop.max_tool_calls", "must be at least 1")
	}
	if c.ToolLoop.MaxModelCalls < 2 {
		p.add("tool_loop.max_model_calls", "must be at least 2: the first model call and a final answer")
	}
}

// minKeepAlive bounds tool_loop.keepalive_interval from below.
const minKeepAlive = 10 * time.Millisecond

func (c *Config) validateMCPServers(p *problems) {
	names := map[string]bool{}
	for i, s := range c.MCPServers {
		at := fmt.Sprintf("mcp_servers[%d]", i)
		p.checkName(at+".name", s.Name, names)
		if (s.Command == "") == (s.URL == "") {
			p.add(at, "set exactly one of command, url")
		}
		if s.URL != "" {
			p.checkHTTPURL(at+".url", s.URL)
		}
		if s.Command != "" && len(s.Headers) > 0 {
			p.add(at+".headers", "only for url (streamable HTTP) servers")
		}
		if s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0) {
			p.add(at, "args and env are only for command (stdio) servers")
		}
		if s.Prefix != "" && !toolName.MatchString(s.Prefix) {
			p.add(at+".prefix", "%q must match [a-zA-Z0-9_-]{1,64}", s.Prefix)
		}
		p.checkPositive(at+".timeout", int64(s.Timeout))
		if s.MaxCalls < 0 {
			p.add(at+".max_calls", "must be 0 (unlimited) or more")
		}
		p.checkPatterns(at+".allow", s.Allow)
		p.checkPatterns(at+".deny", s.Deny)
		p.checkPatterns(at+".models", s.Models)
		p.checkPatterns(at+".approval", s.Approval)
	}
}

func (c *Config) validateMiddleware(p *problems, o *origin) {
	seen := map[string]bool{}
	for i, mw := range c.Middleware.Request {
		at := i
		if placed := c.Middleware.placedGuardrails - 1; placed >= 0 && i > placed {
			at-- // the file's index: the defaults placed guardrails before it
		}
		key := fmt.Sprintf("middleware.request[%d]", at)
		p.checkEnum(key, mw, "policy", "limits", "guardrails", "cache")
		if seen[mw] {
			p.add(key, "%q is listed twice", mw)
		}
		seen[mw] = true
	}
	// Chat requests are authenticated by the policy middleware alone, and
	// the others need the tenant it names: with keys, a list without it
	// (or with a layer before it) would serve chat to anyone, or limit,
	// check and cache every caller as one.
	if len(c.Keys) > 0 && (len(c.Middleware.Request) == 0 || c.Middleware.Request[0] != "policy") {
		p.add("middleware.request", "must start with \"policy\" when [[keys]] are set: it authenticates chat requests")
	}
	// Every other route applies the policies (pass-through, /v1/models,
	// agent tools): without the layer, chat alone would pass the model
	// allow-lists, the body limits and the max_tokens caps.
	if len(c.Policies) > 0 && !seen["policy"] {
		p.add("middleware.request", "must list \"policy\" when [[policies]] are set")
	}
	// Every other route applies them (pass-through, agent tools, summaries):
	// without the layer, chat alone would pass every limit and budget.
	if (len(c.Limits) > 0 || len(c.Budgets) > 0) && !seen["limits"] {
		p.add("middleware.request", "must list \"limits\" when [[limits]] or [[budgets]] are set")
	}
	// Without the layer the setting did nothing, without a word.
	if c.Middleware.Cache.Enabled && !seen["cache"] {
		p.add("middleware.cache.enabled", "true needs \"cache\" in middleware.request")
	}
	for i, pol := range c.Policies {
		if pol.Cache != nil && *pol.Cache && !seen["cache"] {
			p.add(fmt.Sprintf("policies[%d].cache", i), "true needs \"cache\" in middleware.request")
		}
	}
	c.validateLimits(p, o)
	f := c.Middleware.Fallback
	for _, d := range []struct {
		key string
		n   int64
	}{
		{"fallback.base_backoff", int64(f.BaseBackoff)}, {"fallback.max_backoff", int64(f.MaxBackoff)},
		{"fallback.deadline", int64(f.Deadline)}, {"fallback.breaker_failures", int64(f.BreakerFailures)},
		{"fallback.breaker_cooldown", int64(f.BreakerCooldown)},
		{"cache.max_bytes", c.Middleware.Cache.MaxBytes}, {"cache.ttl", int64(c.Middleware.Cache.TTL)},
	} {
		p.checkPositive("middleware."+d.key, d.n)
	}
	if f.BaseBackoff > f.MaxBackoff && f.MaxBackoff > 0 {
		p.add("middleware.fallback.base_backoff", "%v is above max_backoff (%v)", f.BaseBackoff.D(), f.MaxBackoff.D())
	}
	p.checkEnum("middleware.cache.store", c.Middleware.Cache.Store, "memory", "redis")
	if c.Middleware.Cache.Store == "redis" && c.Redis == nil {
		p.add("middleware.cache.store", "redis needs a [redis] section")
	}
	if f.SharedBreakers && c.Redis == nil {
		p.add("middleware.fallback.shared_breakers", "true needs a [redis] section")
	}
	ce := c.Middleware.ContextEdit
	p.checkPositive("middleware.context_edit.keep", int64(ce.Keep))
	p.checkPositive("middleware.context_edit.clear_at_least", int64(ce.ClearAtLeast))
	if ce.Trigger < 0 {
		p.add("middleware.context_edit.trigger", "%v is negative", ce.Trigger)
	}
	p.checkEnum("middleware.context_edit.last_resort", ce.LastResort, "error", "drop_turns", "summarize")
	p.checkEnum("middleware.context_edit.summary_fallback", ce.SummaryFallback, "error", "drop_turns")
	if ce.LastResort == "summarize" && !slices.ContainsFunc(c.Models, func(m Model) bool { return m.Name == ce.SummaryModel }) {
		if _, gone := c.droppedModels[ce.SummaryModel]; gone {
			p.add("middleware.context_edit.summary_model", "summarize needs a configured model: %s", c.unknownModel(ce.SummaryModel))
		} else {
			p.add("middleware.context_edit.summary_model", "summarize needs a configured model, not %q", ce.SummaryModel)
		}
	}
}

func (c *Config) validateKeys(p *problems) {
	names := map[string]int{}
	for i, k := range c.Keys {
		at := fmt.Sprintf("keys[%d]", i)
		switch {
		case k.Tenant == "":
			p.add(at+".tenant", "required")
		case strings.ContainsFunc(k.Tenant, unicode.IsControl):
			// Stores key records by tenant, a NUL before the id: a
			// tenant name with one could spell another's key.
			p.add(at+".tenant", "%q has a control character", k.Tenant)
		}
		// A key's name scopes limits, budgets and usage: two keys of one
		// name would share them, even across tenants.
		if k.Name != "" {
			if j, dup := names[k.Name]; dup {
				p.add(at+".name", "%q is already the name of keys[%d]", k.Name, j)
			}
			names[k.Name] = i
		}
		switch {
		case k.Key == "" && k.SHA256 == "":
			p.add(at, "set key or sha256 (the ${ENV} reference may be unset)")
		case k.Key != "" && k.SHA256 != "":
			p.add(at, "set only one of key, sha256")
		case k.SHA256 != "":
			if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
				p.add(at+".sha256", "not 64 hex digits")
			}
		}
	}
}

func (c *Config) validatePolicies(p *problems) {
	for i, pol := range c.Policies {
		at := fmt.Sprintf("policies[%d]", i)
		if pol.Tenant == "" {
			p.add(at+".tenant", "required (\"*\" for every tenant)")
		}
		p.checkEnum(at+".max_tokens_mode", pol.MaxTokensMode, "clamp", "reject")
		p.checkPositive(at+".max_tokens", int64(pol.MaxTokens))
		p.checkPositive(at+".max_body_bytes", int64(pol.MaxBodyBytes))
		p.checkPatterns(at+".models", pol.Models)
		p.checkPatterns(at+".tools", pol.Tools)
		p.checkPatterns(at+".passthrough", pol.Passthrough)
		for j, g := range pol.Passthrough {
			if !strings.HasPrefix(g, "/") && g != "*" {
				p.add(fmt.Sprintf("%s.passthrough[%d]", at, j), "%q matches no path: a path starts with /, as in \"/v1/embeddings\"", g)
			}
		}
		p.checkPatterns(at+".approval_tools", pol.ApprovalTools)
	}
}

// redactURL returns u for a message without what may be a credential: the
// password of its user info, and its query, which may hold a key (${NAME}
// in a URL is read from the environment). One that does not parse is not
// shown at all.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if p.RawQuery != "" {
		p.RawQuery = "..."
	}
	return p.Redacted()
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
	both        bool // the file set provider and deployments
}

// newOrigin records c before defaults.
func newOrigin(c *Config) *origin {
	o := &origin{}
	for _, p := range c.Providers {
		o.providers = append(o.providers, p.Name)
	}
	for _, m := range c.Models {
		mo := modelOrigin{key: m.Name + "\x00" + m.Provider, fallbacks: append([]string(nil), m.Fallbacks...),
			both: m.Provider != "" && len(m.Deployments) > 0}
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

// both reports whether the file set both provider and deployments for
// model i.
func (o *origin) both(i int) bool {
	return o != nil && o.model(i) < len(o.models) && o.models[o.model(i)].both
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

// validateAnthropic checks the settings that only an anthropic provider
// reads, and that it reads them right.
func validateAnthropic(p *problems, at string, pr Provider) {
	if pr.Kind != "anthropic" {
		if pr.AnthropicVersion != "" {
			p.add(at+".anthropic_version", "only for kind anthropic")
		}
		if len(pr.AnthropicBeta) > 0 {
			p.add(at+".anthropic_beta", "only for kind anthropic")
		}
		return
	}
	if pr.PromptCache == "openai" {
		p.add(at+".prompt_cache", "an anthropic provider caches with anthropic breakpoints or none")
	}
	if pr.Responses == "native" {
		p.add(at+".responses", "an anthropic provider has no Responses API: use translate")
	}
	for j, b := range pr.AnthropicBeta {
		if b == "" || strings.ContainsAny(b, ", \t") {
			p.add(fmt.Sprintf("%s.anthropic_beta[%d]", at, j), "%q is not a feature name", b)
		}
	}
}
