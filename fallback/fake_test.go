package fallback

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// step is one scripted upstream answer.
type step struct {
	err    error    // returned before any body
	body   string   // non-stream answer (when chunks is nil)
	chunks []string // stream answer
	end    error    // after the chunks; nil = io.EOF
	block  bool     // wait for ctx to end, then fail with a timeout
	panics bool     // panic, as a bug in a layer below would
}

// fake is a scripted inner handler, keyed by "provider/upstream"; the last
// step of a script repeats. It records every request it receives.
type fake struct {
	mu     sync.Mutex
	script map[string][]step
	calls  map[string]int
	reqs   []*pipeline.Request
}

func newFake(script map[string][]step) *fake {
	return &fake{script: script, calls: map[string]int{}}
}

func (f *fake) Chat(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
	key, provider := "none", ""
	if t := r.TargetOrDefault(); t != nil {
		key, provider = t.Provider+"/"+t.Upstream, t.Provider
	}
	f.mu.Lock()
	n := f.calls[key]
	f.calls[key]++
	f.reqs = append(f.reqs, r)
	steps := f.script[key]
	f.mu.Unlock()
	if len(steps) == 0 {
		return &pipeline.Response{Body: []byte(`{"ok":"` + key + `"}`)}, nil
	}
	s := steps[min(n, len(steps)-1)]
	switch {
	case s.panics:
		panic("fake: a bug below the fallback layer")
	case s.block:
		<-ctx.Done()
		return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamTimeout, Provider: provider, Err: ctx.Err()}
	case s.err != nil:
		return nil, s.err
	case s.chunks == nil:
		return &pipeline.Response{Body: []byte(s.body)}, nil
	}
	return &pipeline.Response{Stream: newFakeStream(ctx, s.chunks, s.end)}, nil
}

func (f *fake) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

func (f *fake) requests() []*pipeline.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pipeline.Request(nil), f.reqs...)
}

// fakeStream yields its chunks then end, like the upstream client: each
// chunk in one reused buffer (valid until the next call), and a cut once its
// context ends or it is closed.
type fakeStream struct {
	ctx    context.Context
	chunks []string
	end    error
	buf    []byte
	mu     sync.Mutex
	closed bool
}

func newFakeStream(ctx context.Context, chunks []string, end error) *fakeStream {
	return &fakeStream{ctx: ctx, chunks: chunks, end: end}
}

func (s *fakeStream) Next() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ctx.Err() != nil {
		return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Err: io.ErrClosedPipe}
	}
	if len(s.chunks) > 0 {
		c := s.chunks[0]
		s.chunks = s.chunks[1:]
		s.buf = append(s.buf[:0], c...)
		return s.buf, nil
	}
	if s.end != nil {
		return nil, s.end
	}
	return nil, io.EOF
}

func (s *fakeStream) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// clock is an injectable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sleeps records the waits asked of an injected Sleep, which returns at once.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// dep is a one-line deployment.
func dep(provider, upstream string, weight int) pipeline.Target {
	return pipeline.Target{Provider: provider, Upstream: upstream, Weight: weight}
}

// withDefaults returns opts as config would give them: its providers, plus
// one for every deployment's provider of routes it does not list, and its
// fallback settings, with config's defaults for every unset field.
func withDefaults(opts Options, routes ...*pipeline.Route) Options {
	c := config.Config{Providers: slices.Clone(opts.Providers), Middleware: config.Middleware{Fallback: opts.Fallback}}
	for _, r := range routes {
		for _, d := range r.Deployments {
			if !slices.ContainsFunc(c.Providers, func(p config.Provider) bool { return p.Name == d.Provider }) {
				c.Providers = append(c.Providers, config.Provider{Name: d.Provider})
			}
		}
	}
	c.ApplyDefaults()
	opts.Providers, opts.Fallback = c.Providers, c.Middleware.Fallback
	return opts
}

// rt builds a route.
func rt(name string, window int, fallbacks []string, deps ...pipeline.Target) *pipeline.Route {
	for i := range deps {
		deps[i].Model = name
	}
	return &pipeline.Route{Name: name, ContextWindow: window, Deployments: deps, Fallbacks: fallbacks}
}

// env wires routes with the middleware around one fake upstream.
type env struct {
	f      *fake
	routes map[string]*pipeline.Route
	mw     pipeline.Middleware
	sl     *sleeps
}

// newEnv builds the middleware; when nested, every route's ModelLayer is its
// own chain (the middleware around the fake), as cmd/gateway wires it.
func newEnv(opts Options, script map[string][]step, nested bool, routes ...*pipeline.Route) *env {
	e := &env{f: newFake(script), routes: map[string]*pipeline.Route{}, sl: &sleeps{}}
	for _, r := range routes {
		e.routes[r.Name] = r
	}
	if opts.Sleep == nil {
		opts.Sleep = e.sl.Sleep
	}
	if opts.Rand == nil {
		opts.Rand = func() float64 { return 0.5 }
	}
	e.mw = New(withDefaults(opts, routes...), func(name string) *pipeline.Route { return e.routes[name] })
	if nested {
		for _, r := range routes {
			r.ModelLayer = pipeline.Chain(e.f, e.mw)
		}
	}
	return e
}

// chat sends a request for model through the model's chain.
func (e *env) chat(t testing.TB, model string, stream bool) (*pipeline.Response, *pipeline.Request, error) {
	t.Helper()
	r := e.routes[model]
	req := &pipeline.Request{Model: model, Stream: stream, Body: []byte(`{"model":"` + model + `"}`), Route: r, Meta: &pipeline.Meta{}}
	h := r.ModelLayer
	if h == nil {
		h = e.mw(e.f)
	}
	resp, err := h.Chat(context.Background(), req)
	return resp, req, err
}

// drain reads a stream to its end.
func drain(s pipeline.Stream) ([]string, error) {
	defer s.Close()
	var out []string
	for {
		c, err := s.Next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, string(c))
	}
}

func status(code int, body string) *pipeline.UpstreamError {
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: code, Body: []byte(body), Provider: "p"}
}
