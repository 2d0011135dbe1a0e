// Package gateway wires one config into a running gateway: providers and
// their upstream clients, the in-process demo models, the model-call chain of
// every route, the tool loop, and the request layer. It is the one place the
// chains are composed (docs/architecture.md §2); cmd/gateway only adds flags, signals
// and the listener.
package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/guardrails"
	"github.com/llmgw/gateway/limits"
	"github.com/llmgw/gateway/mcpclient"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/openapi"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/policies"
	"github.com/llmgw/gateway/proxy"
	"github.com/llmgw/gateway/responses"
	"github.com/llmgw/gateway/toolloop"
	"github.com/llmgw/gateway/toolprompt"
	"github.com/llmgw/gateway/toolselect"
	"github.com/llmgw/gateway/tracing"
)

// Build turns cfg into a Runtime. On error everything started is stopped.
// The caller calls Runtime.Close after the runtime's last request.
func Build(cfg *config.Config, log zerolog.Logger) (*proxy.Runtime, error) {
	return build(cfg, log, seams{})
}

// Check runs every step of Build that can refuse cfg, so that a config
// Check accepts is one Build accepts: it builds the runtime and closes it,
// without starting what outlives a build or reaches outside the process
// (no demo model listens, no MCP server is started).
func Check(cfg *config.Config, log zerolog.Logger) error {
	rt, err := build(cfg, log, seams{check: true})
	if err != nil {
		return err
	}
	rt.Close()
	return nil
}

// seams replace the world outside the process in benchmarks: the handler
// every model call ends in instead of the providers, and the span exporter
// instead of OTLP. Zero values are the real ones. check is Check's build:
// the demo models and the MCP servers are not started.
type seams struct {
	upstream pipeline.Handler
	spans    sdktrace.SpanExporter
	check    bool
}

// builder carries one build's parts as its steps make them. closers are
// the stops of what has started, in start order: Close (or a failed build)
// runs them last first. commits change what the running runtime shares
// with this one (a kept store's bounds): they run once the build can no
// longer fail, so a refused reload changes nothing.
type builder struct {
	cfg   *config.Config
	log   zerolog.Logger
	seams seams

	closers   []func()
	commits   []func()
	providers []config.Provider // cfg.Providers with the demo models' URLs
	upstream  *proxy.Upstream
	routes    map[string]*pipeline.Route
	rdb       redis.UniversalClient // nil without [redis]
	store     caching.Store
	limiter   *limits.Limiter
	tracer    *tracing.Tracer // nil when tracing is off
	mcp       *mcpclient.Manager
}

func build(cfg *config.Config, log zerolog.Logger, s seams) (rt *proxy.Runtime, err error) {
	b := &builder{cfg: cfg, log: log, seams: s}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	registerSecrets(cfg)
	for _, name := range cfg.Dropped {
		log.Info().Str("provider", name).Msg("provider is optional and its api_key is unset: left out, with the models only it serves")
	}
	if err := b.startUpstream(); err != nil {
		return nil, err
	}
	engine, err := policies.New(cfg, log)
	if err != nil {
		return nil, err
	}
	guards, err := guardrails.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := b.buildRoutes(); err != nil {
		return nil, err
	}
	if err := b.startShared(); err != nil {
		return nil, err
	}
	b.buildModelLayers()
	loop, err := b.buildLoop(guards)
	if err != nil {
		return nil, err
	}
	var _ proxy.Policy = passPolicy{} // one policy engine for every route
	rt = &proxy.Runtime{
		Config:   cfg,
		Routes:   b.routes,
		Chat:     b.requestLayer(loop, engine, guards),
		Upstream: b.upstream,
		Policy:   passPolicy{Engine: engine, limiter: b.limiter, guards: guards},
		Close:    b.close,
	}
	rt.Responses, rt.ResponseOwners, rt.NativeResponses = buildResponses(cfg, b.rdb, b.commit)
	limiter := b.limiter
	rt.Usage = func(ctx context.Context, tenant string, from, to time.Time, groupBy string) ([]byte, error) {
		return limiter.Report(ctx, limits.UsageQuery{Tenant: tenant, From: from, To: to, GroupBy: groupBy})
	}
	if b.tracer != nil {
		rt.Refused = b.tracer.Refused
	}
	if mcp := b.mcp; mcp != nil {
		// An MCP server that is down hides only its own tools; the gateway
		// still serves, so it stays ready and /readyz names the server.
		rt.Ready = func() (bool, map[string]string) { return true, mcp.Status() }
	}
	for _, c := range b.commits {
		c()
	}
	return rt, nil
}

// commit adds f to what runs once the build has succeeded.
func (b *builder) commit(f func()) { b.commits = append(b.commits, f) }

// close stops what the build started, last started first.
func (b *builder) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// passPolicy is the policy of the routes outside the chat pipeline (the
// pass-through endpoints): the policy engine's, then the limiter's, through
// the admission the chat pipeline's limits layer uses (limits.Hold), so
// that a pass-through request takes a request, its estimated input tokens
// and a slot in flight from the tenant's limits, and is refused over a
// limit or a spent budget, as a chat request is; the Call it holds charges
// the usage the answer reports and frees the slot when the answer ends.
type passPolicy struct {
	*policies.Engine
	limiter *limits.Limiter
	guards  *guardrails.Engine // nil without [[guardrails]]
}

// Guard runs the tenant's request-stage guardrails over a pass-through
// body's texts, as the chat pipeline's guardrails middleware runs them.
func (p passPolicy) Guard(t *pipeline.Tenant, r *pipeline.Request) error {
	return p.guards.CheckBody(t, r)
}

// Redact applies the tenant's request-stage redactions to a Responses
// body the pipeline serves.
func (p passPolicy) Redact(t *pipeline.Tenant, r *pipeline.Request) error {
	return p.guards.RedactBody(t, r)
}

var _ proxy.Call = (*limits.Call)(nil)

// Limit admits a pass-through request through limits.Hold. A call of a
// model endpoint whose body names no model (the SDKs make it optional for
// images and a Responses call of a saved prompt) may be a call of any
// model: it counts against every rate rule of its tenant and key, per-model
// ones too (limits.Limiter.HoldUnnamed), and is refused under a budget
// (limits.Limiter.RefuseUnnamed): it would be charged at no price. Except
// moderations: the SDKs name no model there either, but a moderation costs
// nothing and calls a moderation model, which a per-model rule of chat
// models does not name; the tenant-wide rules count it.
func (p passPolicy) Limit(r *pipeline.Request) (proxy.Call, error) {
	hold := p.limiter.Hold
	if r.Model == "" && r.Route == nil && p.ModelEndpoint(r.Endpoint) && !strings.EqualFold(r.Endpoint, "/v1/moderations") {
		if err := p.limiter.RefuseUnnamed(r); err != nil {
			return nil, err
		}
		hold = p.limiter.HoldUnnamed
	}
	c, err := hold(r)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return c, nil
}

// allowsModel is the tenant policy's model allow-list, for the calls the
// model layer makes on its own (a fallback).
func allowsModel(t *pipeline.Tenant, model string) bool {
	return policies.PolicyOf(t).AllowsModel(model)
}

// lookup resolves a client-facing model name to its route.
func (b *builder) lookup(name string) *pipeline.Route { return b.routes[name] }

// admit is what a model call made on the caller's behalf (agent tools,
// summaries, tool selection) passes: the caller's policy, limits and budgets.
func (b *builder) admit(r *pipeline.Request) error {
	if err := policies.PolicyOf(r.Tenant).Admit(r); err != nil {
		return err
	}
	return b.limiter.Admit(r)
}

// startUpstream starts the demo models (mock providers) and the upstream
// clients of every provider.
func (b *builder) startUpstream() error {
	b.providers = append([]config.Provider(nil), b.cfg.Providers...)
	for i := range b.providers {
		if b.providers[i].Kind != "mock" {
			continue
		}
		if b.seams.check {
			b.providers[i].BaseURL = "http://127.0.0.1/v1" // not served: a check calls no model
			continue
		}
		url, stop, err := startMock(b.providers[i], b.cfg.Models, b.log)
		if err != nil {
			return fmt.Errorf("providers[%d] %q: %w", i, b.providers[i].Name, err)
		}
		b.closers = append(b.closers, stop)
		b.providers[i].BaseURL = url
	}
	upstream, err := proxy.NewUpstream(b.providers, b.cfg.Models)
	if err != nil {
		return err
	}
	b.upstream = upstream
	b.closers = append(b.closers, upstream.Close)
	return nil
}

// buildRoutes makes one route per model, its model layer still unset. A
// model's encoding is one config validation knows; its token counter is
// built on first use (contextedit.CounterFor), not here: an encoder's
// tables are tens of MB that every garbage collection would mark, and
// only a request near its context window, or an answer without usage,
// needs one.
func (b *builder) buildRoutes() error {
	b.routes = make(map[string]*pipeline.Route, len(b.cfg.Models))
	for _, m := range b.cfg.Models {
		r := &pipeline.Route{Name: m.Name, ContextWindow: m.ContextWindow, Encoding: m.Encoding, Fallbacks: m.Fallbacks}
		for _, d := range m.Deployments {
			r.Deployments = append(r.Deployments, pipeline.Target{Provider: d.Provider, Upstream: d.Upstream, Weight: d.Weight, Model: m.Name})
		}
		b.routes[m.Name] = r
	}
	return nil
}

// startShared starts what every layer shares: one Redis client for every
// shared store (response cache, tool-loop state, limits), the cache store,
// the limiter and the tracer.
func (b *builder) startShared() (err error) {
	cfg := b.cfg
	if cfg.Redis != nil {
		useRedisLogger(b.log)
		if b.rdb, err = redisClient(cfg.Redis); err != nil {
			return err
		}
		rdb := b.rdb
		b.closers = append(b.closers, func() { _ = rdb.Close() })
	}
	b.store = buildStore(cfg, b.rdb)
	b.limiter = buildLimiter(cfg, b.rdb, b.log)
	b.closers = append(b.closers, b.limiter.Close)
	if cfg.Tracing.Enabled {
		useOtelLogger(b.log)
	}
	if b.seams.spans != nil && cfg.Tracing.Enabled {
		b.tracer = tracing.NewWithExporter(cfg.Tracing, b.seams.spans)
	} else if b.tracer, err = tracing.New(context.Background(), cfg.Tracing); err != nil {
		return err
	}
	if tracer := b.tracer; tracer != nil {
		kinds := make(map[string]string, len(cfg.Providers))
		for _, p := range cfg.Providers {
			kinds[p.Name] = p.Kind
		}
		tracer.SetProviders(kinds)
		tracer.SetErrorStatus(proxy.ErrorStatus)
		b.closers = append(b.closers, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tracer.Shutdown(ctx)
		})
	}
	return nil
}

// buildModelLayers composes every route's model-call layer in the order
// its model lists.
func (b *builder) buildModelLayers() {
	cfg, log := b.cfg, b.log
	// Innermost on every model's call layer: the meter, inside the attempt's
	// span when traced.
	var up pipeline.Handler = b.upstream
	if b.seams.upstream != nil {
		up = b.seams.upstream
	}
	call := b.limiter.Meter(up)
	if b.tracer != nil {
		call = b.tracer.ModelCall(call)
	}
	var shared *fallback.SharedBreakers
	if cfg.Middleware.Fallback.SharedBreakers && b.rdb != nil {
		shared = fallback.NewSharedBreakers(b.rdb, cfg.Redis.Prefix, cfg.Redis.Timeout.D(), log)
		b.closers = append(b.closers, shared.Close)
	}
	modelMW := map[string]pipeline.Middleware{
		"prompt_cache": caching.NewPromptCache(caching.PromptOptions{Providers: caching.PromptProviders(b.providers), Logger: log}),
		"context_edit": contextedit.New(contextedit.Options{Config: cfg.Middleware.ContextEdit, Logger: log,
			Lookup: b.lookup, Allows: allowsModel, Admit: b.admit, Store: b.store}),
		"fallback": fallback.New(fallback.Options{Providers: b.providers, Models: cfg.Models, Fallback: cfg.Middleware.Fallback, Logger: log,
			Shared: shared, Allows: allowsModel, Admit: b.limiter.AdmitFallback,
			OnClose: func(release func()) { b.closers = append(b.closers, release) }}, b.lookup),
	}
	for _, m := range cfg.Models {
		// Outermost: a tool loop's model calls are counted once each,
		// whoever makes them (tool_loop.max_model_calls).
		mws := []pipeline.Middleware{toolloop.ModelCallLimit}
		for _, name := range m.Middleware {
			mws = append(mws, modelMW[name]) // nil (not built yet) is skipped by Chain
		}
		if m.ToolCalling == "prompted" {
			// Innermost, so that every attempt and fallback deployment is
			// prompted; but outside prompt_cache when that is the innermost
			// layer, so that its breakpoints are placed on the body the
			// upstream gets (the system message that holds the tool
			// prompt, the rendered results of the latest round): placed
			// before, they were on the tools and tool messages the
			// rewrite replaces, and were lost.
			tp := toolprompt.New(toolprompt.Options{Format: m.PromptedFormat, Prompt: m.ToolPrompt,
				MaxErrors: cfg.ToolLoop.MaxConsecutiveErrors, TakeCall: toolloop.TakeModelCall, Logger: log})
			if n := len(m.Middleware); n > 0 && m.Middleware[n-1] == "prompt_cache" {
				mws = slices.Insert(mws, len(mws)-1, tp)
			} else {
				mws = append(mws, tp)
			}
		}
		b.routes[m.Name].ModelLayer = pipeline.Chain(call, mws...)
	}
}

// buildLoop starts the MCP servers and loads the OpenAPI specs, the tool
// loop's server tools besides config's, and builds the loop.
func (b *builder) buildLoop(guards *guardrails.Engine) (*toolloop.Loop, error) {
	cfg := b.cfg
	// MCP servers: connected now (bounded wait), their tools offered as
	// server tools while they are up. Close stops their child processes.
	if len(cfg.MCPServers) > 0 && !b.seams.check {
		b.mcp = mcpclient.Start(mcpclient.Options{Servers: cfg.MCPServers, Logger: b.log})
		b.closers = append(b.closers, b.mcp.Close)
	}
	// OpenAPI operations as server tools: a spec that does not load fails
	// the start (or the reload), naming the spec.
	specs, err := openapi.Load(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	o := toolloop.Options{
		Tools:  cfg.Tools,
		Loop:   cfg.ToolLoop,
		Lookup: b.lookup,
		Admit:  b.admit,
		// The loop's later rounds, in their model-call layer
		// (toolloop.ModelCallLimit): the tenant's limits and budgets.
		AdmitRound: b.limiter.AdmitRound,
		ToolMiddleware: []pipeline.ToolMiddleware{
			guards.ToolMiddleware(), // outside the result cache: cached results are checked too
			b.limiter.ToolLimit(),
			caching.NewToolResultCache(b.store, toolTTL(cfg.Tools)),
		},
		State: buildState(cfg, b.rdb, b.commit),
		// Without approval_secret: the process's random key, the same
		// after a reload, as the calls awaiting approval are (buildState).
		ApprovalKey: keep(cfg.Path, "approval-key", toolloop.NewApprovalKey),
		NewEditLog:  contextedit.NewEditLog,
		Logger:      b.log,
	}
	for _, p := range cfg.Providers {
		o.RoundMax = max(o.RoundMax, p.MaxResponseBytes)
	}
	o.ServerPrefixes = map[string]string{}
	for _, m := range cfg.MCPServers {
		o.ServerPrefixes[m.Name] = m.Prefix
	}
	var sources []toolloop.ToolSource // never a typed nil in the interface
	if b.mcp != nil {
		sources = append(sources, b.mcp)
	}
	if specs != nil {
		sources = append(sources, specs)
	}
	o.Source = toolloop.JoinSources(sources...)
	if sel := toolselect.New(toolselect.Options{Config: cfg, Lookup: b.lookup, Admit: b.admit, Store: b.store, Log: b.log}); sel != nil {
		o.Selector = sel // the same: nil stays an untyped nil
	}
	if b.tracer != nil {
		o.Outer = b.tracer.Tool() // a span for every server call, those the loop refuses too
	}
	return toolloop.New(o)
}

// requestLayer composes the request layer in the order config lists,
// ending in the tool loop.
func (b *builder) requestLayer(loop *toolloop.Loop, engine *policies.Engine, guards *guardrails.Engine) pipeline.Handler {
	cfg := b.cfg
	requestMW := map[string]pipeline.Middleware{
		"policy":     engine.Middleware(),
		"limits":     b.limiter.Middleware(),
		"guardrails": guards.Middleware(),
		"cache": caching.NewResponseCache(caching.Options{
			Config:         cfg.Middleware.Cache,
			Store:          b.store,
			ToolSetVersion: toolSetVersion(cfg),
			ServerTools:    hasServerTools(cfg),
			Logger:         b.log,
		}),
	}
	var mws []pipeline.Middleware
	if b.tracer != nil {
		mws = append(mws, b.tracer.Request()) // outermost: the span covers the whole request
	}
	for _, name := range cfg.Middleware.Request {
		mws = append(mws, requestMW[name])
	}
	return pipeline.Chain(loop, mws...)
}

// startMock serves an in-process mockllm on a loopback port, so that demo
// traffic takes exactly the path real upstream traffic takes.
func startMock(p config.Provider, models []config.Model, log zerolog.Logger) (string, func(), error) {
	windows := map[string]int{}
	for _, m := range models {
		for _, d := range m.Deployments {
			if d.Provider == p.Name && m.ContextWindow > 0 {
				windows[d.Upstream] = m.ContextWindow
			}
		}
	}
	srv := mockllm.New(mockllm.Options{
		FirstByteDelay: p.Mock.FirstByteDelay.D(),
		ChunkDelay:     p.Mock.ChunkDelay.D(),
		Chunking:       mockllm.Chunking{TextRunes: p.Mock.ChunkSize},
		ContextWindow:  windows,
		MaxRecorded:    -1,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error().Err(err).Str("provider", p.Name).Msg("demo model stopped")
		}
	}()
	return "http://" + ln.Addr().String() + "/v1", func() { _ = srv.Close() }, nil
}

// buildStore returns the shared store of the response and tool-result
// caches: Redis when configured for it, else memory bounded by bytes.
func buildStore(cfg *config.Config, rdb redis.UniversalClient) caching.Store {
	c := cfg.Middleware.Cache
	if c.Store == "redis" && rdb != nil {
		return caching.NewRedisStore(rdb, cfg.Redis.Prefix+"cache:", cfg.Redis.Timeout.D())
	}
	return caching.NewMemoryStore(c.MaxBytes)
}

// buildState returns the mixed-turn state store: Redis when [redis] is set
// (so that any replica can continue a turn), else memory bounded by
// tool_loop.state_max_entries and state_max_bytes, kept across reloads
// (keep; a reload's bounds apply once its build succeeds: commit); nil when
// no server tool can exist.
func buildState(cfg *config.Config, rdb redis.UniversalClient, commit func(func())) toolloop.StateStore {
	if !hasServerTools(cfg) {
		return nil
	}
	c := cfg.ToolLoop
	if rdb != nil {
		return toolloop.NewRedisState(rdb, cfg.Redis.Prefix+"turn:", c.StateTTL.D(), toolloop.RedisStateMaxBytes(c.StateMaxBytes))
	}
	s := keep(cfg.Path, "tool-loop-state", func() *toolloop.MemoryState {
		return toolloop.NewMemoryState(c.StateTTL.D(), c.StateMaxEntries, c.StateMaxBytes)
	})
	commit(func() { s.Resize(c.StateTTL.D(), c.StateMaxEntries, c.StateMaxBytes) }) // a reload's bounds
	return s
}

// kept holds, per config file and kind, what a gateway without Redis keeps
// in memory for the life of the process: a reload (SIGHUP) builds a new
// runtime but must not reset a tenant's rate counters, spend and usage,
// forget the Responses API responses it stored or the owners of its native
// ones, nor the tool loop's turns and calls awaiting approval and the
// generated key of their approval ids. Each build takes the one of its
// file, made on the first; what has bounds takes the config's current
// ones (Resize). A config that was not read from a file gets new ones.
// Keys in these stores are tenant-scoped, as in Redis.
var (
	keptMu sync.Mutex
	kept   = map[keptKey]any{}
)

type keptKey struct{ path, kind string }

// keep returns the value of kind kept for the config file path, made by
// newValue the first time (every time when path is "").
func keep[T any](path, kind string, newValue func() T) T {
	if path == "" {
		return newValue()
	}
	keptMu.Lock()
	defer keptMu.Unlock()
	k := keptKey{path, kind}
	if v, ok := kept[k].(T); ok {
		return v
	}
	v := newValue()
	kept[k] = v
	return v
}

// buildLimiter returns the rate limits, budgets and usage record: shared
// through Redis when [redis] is set, else in memory, kept across reloads.
func buildLimiter(cfg *config.Config, rdb redis.UniversalClient, log zerolog.Logger) *limits.Limiter {
	o := limits.Options{Config: cfg, Logger: log}
	if rdb != nil {
		o.Store, o.Prefix = limits.NewRedisStore(rdb, cfg.Redis.Timeout.D()), limitsPrefix(cfg.Redis)
	} else {
		o.Store = keep(cfg.Path, "limits", limits.NewMemoryStore)
	}
	return limits.New(o)
}

// toolTTL returns the result-cache TTL of idempotent tools.
func toolTTL(tools []config.Tool) func(string) time.Duration {
	ttl := map[string]time.Duration{}
	for _, t := range tools {
		if t.Idempotent && t.CacheTTL > 0 {
			ttl[t.Name] = t.CacheTTL.D()
		}
	}
	return func(name string) time.Duration { return ttl[name] }
}

// hasServerTools reports whether cfg can offer any server tool.
func hasServerTools(cfg *config.Config) bool {
	return len(cfg.Tools) > 0 || len(cfg.MCPServers) > 0 || len(cfg.OpenAPI) > 0
}

// toolSetVersion hashes the server tool definitions: changing a tool
// changes every response-cache key, so answers produced with other tools are
// never served.
func toolSetVersion(cfg *config.Config) string {
	tools, servers := cfg.Tools, cfg.MCPServers
	h := sha256.New()
	// Everything that changes what a model is offered or what a tool
	// does: also the models that get each tool, a builtin's kind and an
	// agent's or write_todos's system prompt.
	for _, s := range cfg.OpenAPI {
		fmt.Fprintf(h, "openapi\x00%s\x00%s\x00%s\x00%s\x00%q\x00%q\x00", s.Name, s.Spec, s.BaseURL, s.Prefix, s.Operations, s.Models)
	}
	for _, t := range tools {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00%q\x00%q\x00", t.Name, t.Kind, t.Description, t.Parameters, t.URL, t.Model,
			t.Builtin, t.System, t.Models)
	}
	for _, s := range servers {
		fmt.Fprintf(h, "mcp\x00%s\x00%s\x00%q\x00%s\x00%s\x00%q\x00%q\x00%q\x00", s.Name, s.Command, s.Args, s.URL, s.Prefix, s.Allow, s.Deny, s.Models)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// buildResponses returns the store of Responses API responses (one that
// keeps nothing when [responses] store = "none"), the record of which
// tenant created each response a provider stores on a pass-through, and
// the models whose provider serves the Responses API natively.
func buildResponses(cfg *config.Config, rdb redis.UniversalClient, commit func(func())) (*responses.Store, *responses.Owners, map[string]bool) {
	native := map[string]bool{}
	nativeProvider := map[string]bool{}
	for _, p := range cfg.Providers {
		nativeProvider[p.Name] = p.Responses == "native"
	}
	for _, m := range cfg.Models {
		if nativeProvider[m.Provider] {
			native[m.Name] = true
		}
	}
	c := cfg.Responses
	var kv responses.KV
	switch {
	case c.Store == "redis" && rdb != nil:
		kv = caching.NewRedisStore(rdb, cfg.Redis.Prefix, cfg.Redis.Timeout.D())
	case c.Store == "none":
		kv = noStore{}
	default:
		kv = memoryKV(cfg.Path, "responses", c.MaxBytes, commit)
	}
	// The owners of the provider's responses are what lets a tenant
	// continue its own native responses at all, whatever the store of the
	// gateway's own: in Redis whenever [redis] is set, so that a follow-up
	// on another replica finds them; else beside the stored responses (in
	// their own memory with store = "none").
	var owners responses.KV
	switch {
	case rdb != nil:
		owners = caching.NewRedisStore(rdb, cfg.Redis.Prefix, cfg.Redis.Timeout.D())
	case c.Store == "none":
		owners = memoryKV(cfg.Path, "response-owners", c.MaxBytes, commit)
	default:
		owners = kv
	}
	return &responses.Store{KV: kv, TTL: c.TTL.D(), MaxBytes: c.MaxResponseBytes},
		&responses.Owners{KV: owners, TTL: c.TTL.D()}, native
}

// memoryKV returns the memory KV of kind kept for the config file path
// (keep), bounded by maxBytes (responses.max_bytes): a reload that changes
// the bound resizes it in place, evicting as a store over its bound does,
// rather than dropping every tenant's responses.
func memoryKV(path, kind string, maxBytes int64, commit func(func())) *responses.MemoryKV {
	kv := keep(path, kind, func() *responses.MemoryKV { return responses.NewMemoryKV(maxBytes) })
	commit(func() { kv.Resize(maxBytes) })
	return kv
}

// noStore keeps nothing: [responses] store = "none".
type noStore struct{}

func (noStore) Get(context.Context, string) ([]byte, bool, error)        { return nil, false, nil }
func (noStore) Set(context.Context, string, []byte, time.Duration) error { return nil }
func (noStore) Delete(context.Context, string) error                     { return nil }
