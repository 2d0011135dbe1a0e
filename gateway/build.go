// Package gateway wires one config into a running gateway: providers and
// their upstream clients, the in-process demo models, the model-call chain of
// every route, the tool loop, and the request layer. It is the one place the
// chains are composed (DESIGN.md §2); cmd/gateway only adds flags, signals
// and the listener.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/policies"
	"github.com/llmgw/gateway/proxy"
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
	modelMW := map[string]pipeline.Middleware{
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
	terminal := pipeline.HandlerFunc(func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		return req.Route.ModelLayer.Chat(ctx, req)
	})
	requestMW := map[string]pipeline.Middleware{"policy": engine.Middleware()}
	var mws []pipeline.Middleware
	for _, name := range cfg.Middleware.Request {
		mws = append(mws, requestMW[name])
	}
	rt = &proxy.Runtime{
		Config:   cfg,
		Routes:   routes,
		Chat:     pipeline.Chain(terminal, mws...),
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
