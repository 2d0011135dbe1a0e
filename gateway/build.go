// Package gateway wires one config into a running gateway: providers and
// their upstream clients, the in-process demo models, the model-call chain of
// every route, the tool loop, and the request layer. It is the one place the
// chains are composed (DESIGN.md §2); cmd/gateway only adds flags, signals
// and the listener.
package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/policies"
	"github.com/llmgw/gateway/proxy"
	"github.com/llmgw/gateway/toolloop"
)

// Build turns cfg into a Runtime. On error everything started is stopped.
// The caller calls Runtime.Close after the runtime's last request.
func Build(cfg *config.Config, log zerolog.Logger) (rt *proxy.Runtime, err error) {
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	providers := append([]config.Provider(nil), cfg.Providers...)
	for i := range providers {
		if providers[i].Kind != "mock" {
			continue
		}
		url, stop, err := startMock(providers[i], cfg.Models, log)
		if err != nil {
			return nil, fmt.Errorf("providers[%d] %q: %w", i, providers[i].Name, err)
		}
		closers = append(closers, stop)
		providers[i].BaseURL = url
	}
	upstream, err := proxy.NewUpstream(providers)
	if err != nil {
		return nil, err
	}
	closers = append(closers, upstream.Close)

	engine, err := policies.New(cfg, log)
	if err != nil {
		return nil, err
	}

	routes := make(map[string]*pipeline.Route, len(cfg.Models))
	for _, m := range cfg.Models {
		r := &pipeline.Route{Name: m.Name, ContextWindow: m.ContextWindow, Encoding: m.Encoding, Fallbacks: m.Fallbacks}
		for _, d := range m.Deployments {
			r.Deployments = append(r.Deployments, pipeline.Target{Provider: d.Provider, Upstream: d.Upstream, Weight: d.Weight, Model: m.Name})
		}
		routes[m.Name] = r
	}
	lookup := func(name string) *pipeline.Route { return routes[name] }

	// The model-call layer, per route, in the order the model lists.
	for _, m := range cfg.Models {
		if _, err := contextedit.CounterFor(m.Encoding); err != nil { // built once, shared; fail at start
			return nil, fmt.Errorf("models %q: encoding: %w", m.Name, err)
		}
	}
	store, closeStore := buildStore(cfg)
	closers = append(closers, closeStore)

	modelMW := map[string]pipeline.Middleware{
		"prompt_cache": caching.NewPromptCache(caching.PromptOptions{Providers: caching.PromptProviders(providers), Logger: log}),
		"context_edit": contextedit.New(contextedit.Options{Config: cfg.Middleware.ContextEdit, Logger: log}),
		"fallback":     fallback.New(fallback.Options{Providers: providers, Models: cfg.Models, Fallback: cfg.Middleware.Fallback, Logger: log}, lookup),
	}
	for _, m := range cfg.Models {
		var mws []pipeline.Middleware
		for _, name := range m.Middleware {
			mws = append(mws, modelMW[name]) // nil (not built yet) is skipped by Chain
		}
		routes[m.Name].ModelLayer = pipeline.Chain(upstream, mws...)
	}

	// The request layer, ending in the tool loop.
	loop, err := toolloop.New(toolloop.Options{
		Tools:       cfg.Tools,
		Loop:        cfg.ToolLoop,
		Lookup:      lookup,
		ToolAllowed: policies.ToolAllowed,
		ToolTrace:   policies.ToolTrace,
		ToolMiddleware: []pipeline.ToolMiddleware{
			caching.NewToolResultCache(store, toolTTL(cfg.Tools)),
		},
		Logger: log,
	})
	if err != nil {
		return nil, err
	}
	requestMW := map[string]pipeline.Middleware{
		"policy": engine.Middleware(),
		"cache": caching.NewResponseCache(caching.Options{
			Config:         cfg.Middleware.Cache,
			Store:          store,
			ToolSetVersion: toolSetVersion(cfg.Tools),
			Logger:         log,
			Enabled: func(r *pipeline.Request) bool {
				return policies.CacheEnabled(r.Tenant, cfg.Middleware.Cache.Enabled)
			},
		}),
	}
	var mws []pipeline.Middleware
	for _, name := range cfg.Middleware.Request {
		mws = append(mws, requestMW[name])
	}
	rt = &proxy.Runtime{
		Config:   cfg,
		Routes:   routes,
		Chat:     pipeline.Chain(loop, mws...),
		Upstream: upstream,
		Close: func() {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		},
	}
	if !engine.Open() {
		rt.Auth = engine.Authenticate
	}
	return rt, nil
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
func buildStore(cfg *config.Config) (caching.Store, func()) {
	c := cfg.Middleware.Cache
	if c.Store == "redis" && cfg.Redis != nil {
		client := redisClient(cfg.Redis)
		return caching.NewRedisStore(client, cfg.Redis.Prefix+"cache:", cfg.Redis.Timeout.D()), func() { _ = client.Close() }
	}
	return caching.NewMemoryStore(c.MaxBytes), func() {}
}

// redisClient builds a client whose every call is bounded by the config's timeout.
func redisClient(r *config.Redis) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: r.Addr, Password: r.Password, DB: r.DB,
		DialTimeout: r.Timeout.D(), ReadTimeout: r.Timeout.D(), WriteTimeout: r.Timeout.D(),
		MaxRetries: -1, // fail fast: callers fail open
	})
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

// toolSetVersion hashes the server tool definitions: changing a tool
// changes every response-cache key, so answers produced with other tools are
// never served.
func toolSetVersion(tools []config.Tool) string {
	h := sha256.New()
	for _, t := range tools {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00", t.Name, t.Kind, t.Description, t.Parameters, t.URL, t.Model)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
