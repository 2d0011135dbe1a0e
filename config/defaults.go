package config

import (
	"fmt"
	"slices"
	"time"
)

func setDur(d *Duration, v time.Duration) {
	if *d == 0 {
		*d = Duration(v)
	}
}

func setInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func setStr(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

// DefaultModelMiddleware is the model-call layer when a model lists none.
// fallback is outermost so that every attempt, including one on a fallback
// model, is edited for the window of the model it goes to, and a prompt the
// primary's window cannot hold still reaches a larger fallback.
var DefaultModelMiddleware = []string{"fallback", "context_edit", "prompt_cache"}

// DefaultMaxToolCalls and DefaultMaxModelCalls are the request-wide limits
// of the tool loop (tool_loop.max_tool_calls, max_model_calls): a runaway
// loop stops well before it costs much, and a loop of ten rounds with a few
// parallel calls or an agent tool each stays inside them.
const (
	DefaultMaxToolCalls  = 50
	DefaultMaxModelCalls = 25
)

// DefaultConnBuffer is the default size of the per-connection buffers
// (server.read_buffer, write_buffer, providers.read_buffer). LLM traffic
// has small heads and bodies that are read apart from the buffer: chat
// request headers are a few hundred bytes (a key, a content type, maybe a
// trace context), provider response headers one to two KiB, and each
// stream event a few hundred bytes, so 4 KiB (fasthttp's own default)
// holds any head with room and a burst of events per write. Every open
// stream holds three of them (client read and write, upstream read), so a
// smaller size saves memory only by refusing larger headers.
const DefaultConnBuffer = 4 << 10

// Bounds of the connection buffer sizes: below 1 KiB ordinary headers no
// longer fit; above 1 MiB each connection costs more than any head needs.
const (
	MinConnBuffer = 1 << 10
	MaxConnBuffer = 1 << 20
)

// DefaultEncoding is models.encoding when unset: the tokenizer of the
// gpt-4o and later families.
const DefaultEncoding = "o200k_base"

// DefaultRequestMiddleware is the request layer when config lists none.
var DefaultRequestMiddleware = []string{"policy", "limits", "cache"}

// DefaultSummaryPrompt is middleware.context_edit.summary_prompt when unset:
// the summary model's system prompt for last_resort = "summarize".
const DefaultSummaryPrompt = "You condense the earlier part of a conversation between a user and an AI assistant " +
	"so that the assistant can continue it without the original messages. Keep every fact, decision, " +
	"number, name, file, tool result and open question that later turns may need; drop pleasantries. " +
	"Write plain prose or short bullet points, in the conversation's language, at most about 400 words."

// Defaults returns the configuration an empty file gives: every section with
// its defaults applied and no providers, models or tools. It is the one
// source of default values for code that builds a config section without a
// file (tests, benchmarks): take the section and change what differs.
func Defaults() *Config {
	var c Config
	c.ApplyDefaults()
	return &c
}

// ApplyDefaults fills every unset field of c that has a default, as Parse does
// between decoding and validating. It is the only place defaults live: the
// constructors that take a config section (fallback.New, toolloop.New,
// contextedit.New, caching, mcpclient) use it as given. Fields already set
// are kept, so a test may set what it cares about and call ApplyDefaults for
// the rest.
func (c *Config) ApplyDefaults() {
	c.setServerDefaults()
	c.dropOptionalProviders()
	if c.Server.DefaultProvider == "" && len(c.Providers) > 0 {
		// The first provider, but not an in-process mock while another
		// exists: a pass-through call that names no model (GET /v1/files)
		// is an HTTP API's, which the demo model only echoes.
		c.Server.DefaultProvider = c.Providers[0].Name
		for _, p := range c.Providers {
			if p.Kind != "mock" {
				c.Server.DefaultProvider = p.Name
				break
			}
		}
	}
	c.setProviderDefaults()
	c.setModelDefaults()
	c.setToolLoopDefaults() // before tools, MCP servers and OpenAPI specs, whose timeouts inherit tool_timeout
	c.setLimitDefaults()
	c.setResponsesDefaults()
	c.setToolCallingDefaults()
	c.setOpenAPIDefaults()
	c.setMiddlewareDefaults()
	for i := range c.Policies {
		setStr(&c.Policies[i].MaxTokensMode, "clamp")
	}
	if c.Redis != nil {
		setDur(&c.Redis.Timeout, 200*time.Millisecond)
		setStr(&c.Redis.Prefix, "gw:")
		setStr(&c.Redis.Mode, "single")
	}
}

func (c *Config) setServerDefaults() {
	s := &c.Server
	setStr(&s.Listen, "127.0.0.1:8080")
	setInt(&s.MaxBodyBytes, 8<<20)
	setDur(&s.ReadTimeout, 30*time.Second)
	setDur(&s.WriteTimeout, 60*time.Second)
	setDur(&s.IdleTimeout, 120*time.Second)
	setDur(&s.ShutdownTimeout, 30*time.Second)
	setStr(&s.LogLevel, "info")
	setStr(&s.LogFormat, "json")
	setInt(&s.ReadBuffer, DefaultConnBuffer)
	setInt(&s.WriteBuffer, DefaultConnBuffer)
	if s.GCMinGrowthBytes == nil {
		g := int64(DefaultGCMinGrowth)
		s.GCMinGrowthBytes = &g
	}
}

// DefaultGCMinGrowth is server.gc_min_growth_bytes's default.
const DefaultGCMinGrowth = 32 << 20

// dropOptionalProviders removes the optional providers whose key is unset,
// with what only they serve: their models, their deployments, and fallbacks
// to the models that go. What the drop does not remove (a model with no
// provider at all, a fallback that never existed) is left for validate to
// report.
func (c *Config) dropOptionalProviders() {
	kept := c.Providers[:0]
	dropped := map[string]bool{}
	for _, p := range c.Providers {
		if p.Optional && p.APIKey == "" && p.Name != "" { // unnamed: left for validate to report
			dropped[p.Name] = true
			c.Dropped = append(c.Dropped, p.Name)
			continue
		}
		kept = append(kept, p)
	}
	c.Providers = kept
	if len(dropped) == 0 {
		return
	}
	models := c.Models[:0]
	gone := map[string]bool{}
	for _, m := range c.Models {
		if dropped[m.Provider] {
			gone[m.Name] = true
			c.dropModel(m.Name, m.Provider)
			continue
		}
		had := len(m.Deployments)
		var first string // the first deployment's provider
		if had > 0 {
			first = m.Deployments[0].Provider
		}
		m.Deployments = slices.DeleteFunc(m.Deployments, func(d Deployment) bool { return dropped[d.Provider] })
		if m.Provider == "" && had > 0 && len(m.Deployments) == 0 {
			gone[m.Name] = true
			c.dropModel(m.Name, first)
			continue
		}
		models = append(models, m)
	}
	c.Models = models
	for i := range c.Models {
		c.Models[i].Fallbacks = slices.DeleteFunc(c.Models[i].Fallbacks, func(f string) bool { return gone[f] })
	}
}

// dropModel records that model went with the optional provider provider.
func (c *Config) dropModel(model, provider string) {
	if c.droppedModels == nil {
		c.droppedModels = map[string]string{}
	}
	c.droppedModels[model] = provider
}

// unknownModel is the problem with a setting that names model, which is
// not configured: a model an optional provider took with it when its
// api_key expanded empty says so (the setting needs it, so the drop cannot
// prune the setting as it prunes a fallback).
func (c *Config) unknownModel(model string) string {
	if provider, gone := c.droppedModels[model]; gone {
		return fmt.Sprintf("model %q was left out with its optional provider %q, whose api_key is empty: set the key, or name another model", model, provider)
	}
	return fmt.Sprintf("unknown model %q", model)
}

func (c *Config) setProviderDefaults() {
	for i := range c.Providers {
		p := &c.Providers[i]
		setDur(&p.ConnectTimeout, 10*time.Second)
		setDur(&p.FirstByteTimeout, 60*time.Second)
		setDur(&p.StreamIdleTimeout, 60*time.Second)
		setDur(&p.TotalTimeout, 10*time.Minute)
		setDur(&p.RetryAfterCap, 10*time.Second)
		setInt(&p.MaxConns, 1024)
		setInt(&p.MaxResponseBytes, 32<<20)
		setInt(&p.ReadBuffer, DefaultConnBuffer)
		if p.Kind == "anthropic" {
			setStr(&p.BaseURL, "https://api.anthropic.com")
			setStr(&p.AnthropicVersion, "2023-06-01")
			setStr(&p.PromptCache, "anthropic")
		}
		setStr(&p.PromptCache, "none")
		if p.Retries == nil {
			two := 2
			p.Retries = &two
		}
		if p.Kind == "mock" && p.Mock == nil {
			p.Mock = &Mock{}
		}
		if p.Mock != nil {
			setInt(&p.Mock.ChunkSize, 8)
		}
	}
}

func (c *Config) setModelDefaults() {
	for i := range c.Models {
		m := &c.Models[i]
		setStr(&m.Upstream, m.Name)
		setStr(&m.Encoding, DefaultEncoding)
		setStr(&m.OwnedBy, "gateway")
		if len(m.Deployments) == 0 && m.Provider != "" {
			m.Deployments = []Deployment{{Provider: m.Provider, Upstream: m.Upstream, Weight: 1}}
		}
		for j := range m.Deployments {
			setInt(&m.Deployments[j].Weight, 1)
			setStr(&m.Deployments[j].Upstream, m.Upstream)
		}
		if m.Middleware == nil {
			m.Middleware = DefaultModelMiddleware
		}
	}
}

// setToolLoopDefaults fills [tool_loop], then the tools and MCP servers,
// whose timeout is tool_loop.tool_timeout when unset.
func (c *Config) setToolLoopDefaults() {
	l := &c.ToolLoop
	setInt(&l.MaxIterations, 10)
	setInt(&l.MaxConsecutiveErrors, 3)
	if l.Parallel == nil {
		t := true
		l.Parallel = &t
	}
	setDur(&l.ToolTimeout, 30*time.Second)
	setDur(&l.WallTime, 5*time.Minute)
	setInt(&l.MaxResultBytes, 64<<10)
	setDur(&l.KeepAliveInterval, 5*time.Second)
	setDur(&l.StateTTL, time.Hour)
	setInt(&l.StateMaxEntries, 10000)
	setInt(&l.StateMaxBytes, 64<<20)
	setInt(&l.MaxToolCalls, DefaultMaxToolCalls)
	setInt(&l.MaxModelCalls, DefaultMaxModelCalls)
	for i := range c.Tools {
		t := &c.Tools[i]
		setDur(&t.Timeout, l.ToolTimeout.D())
		if t.Kind == "builtin" {
			setStr(&t.Builtin, t.Name)
		}
	}
	for i := range c.MCPServers {
		setDur(&c.MCPServers[i].Timeout, l.ToolTimeout.D())
	}
}

// setMiddlewareDefaults fills [middleware]: the request layer (guardrails
// join it when any are configured), then each middleware's own section.
func (c *Config) setMiddlewareDefaults() {
	mw := &c.Middleware
	if mw.Request == nil {
		mw.Request = DefaultRequestMiddleware
	}
	c.setGuardrailDefaults()
	f := &mw.Fallback
	setDur(&f.BaseBackoff, 200*time.Millisecond)
	setDur(&f.MaxBackoff, 5*time.Second)
	if f.Deadline == 0 {
		// The chain may take as long as a provider's attempt may: a JSON
		// answer arrives whole at its end, and a reasoning model's takes
		// minutes, which a shorter deadline cut whatever total_timeout
		// allowed.
		d := 2 * time.Minute
		for _, p := range c.Providers {
			d = max(d, p.TotalTimeout.D())
		}
		f.Deadline = Duration(d)
	}
	setInt(&f.BreakerFailures, 5)
	setDur(&f.BreakerCooldown, 30*time.Second)
	ch := &mw.Cache
	setStr(&ch.Store, "memory")
	if ch.MaxBytes == 0 {
		ch.MaxBytes = 64 << 20
	}
	setDur(&ch.TTL, 10*time.Minute)
	ce := &mw.ContextEdit
	if ce.Trigger == 0 {
		ce.Trigger = 0.8
	}
	setInt(&ce.Keep, 3)
	setStr(&ce.Placeholder, "[tool result cleared]")
	setStr(&ce.LastResort, "error")
	setStr(&ce.SummaryFallback, "error")
	setStr(&ce.SummaryPrompt, DefaultSummaryPrompt)
	setInt(&mw.ToolSelect.MaxTools, DefaultSelectMaxTools) // a model's [models.tool_select] inherits unset keys
	setInt(&mw.ToolSelect.MinTools, DefaultSelectMinTools)
}
