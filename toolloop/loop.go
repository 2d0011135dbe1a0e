package toolloop

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// Options configure a Loop. Everything is read once, in New.
type Options struct {
	Tools []config.Tool   // [[tools]]: kinds builtin, http, agent
	Loop  config.ToolLoop // [tool_loop] budgets (defaults already applied by config)
	// Lookup resolves a client-facing model name for agent tools.
	Lookup func(model string) *pipeline.Route
	// Admit applies the caller's policy (model allow-list, body size,
	// max_tokens cap, and whatever later limits the request layer enforces)
	// to a model call a tool makes on the caller's behalf (an agent tool's
	// call to its model), before it is made. It may replace r.Body (a
	// clamped max_tokens); an error denies the call and becomes the tool's
	// error result. nil admits every call. The loop's own rounds are not
	// passed to it: the request layer admitted the client's request, and
	// every round's body is built from that admitted body for the same
	// model.
	Admit func(r *pipeline.Request) error
	// ToolAllowed reports whether tenant may use the server tool name; nil
	// allows every tool.
	ToolAllowed func(t *pipeline.Tenant, name string) bool
	// ToolTrace reports whether responses to tenant carry x_gateway; nil = off
	// (the x-gateway-tool-trace hint still turns it on per request).
	ToolTrace func(t *pipeline.Tenant) bool
	// ToolMiddleware is inserted into the function layer after the loop's
	// own policy and validation steps and before the size cap, retry and
	// timeout (e.g. a result cache). mws[0] is outermost.
	ToolMiddleware []pipeline.ToolMiddleware
	// Source adds tools that come and go at run time (MCP servers); nil = none.
	Source ToolSource
	// State keeps the hidden part of mixed turns; nil = not kept (see StateStore).
	State      StateStore
	Logger     zerolog.Logger
	HTTPClient *http.Client // http tools; nil = a default client. Redirects are never followed.

	// Selector narrows the tools of requests that offer too many (LLM tool
	// selection); nil = off.
	Selector ToolSelector
}

// Loop is the tool loop, the terminal handler of the request layer. Built
// once by New; safe for concurrent use.
type Loop struct {
	opts  Options
	cfg   config.ToolLoop
	log   zerolog.Logger
	chain pipeline.ToolHandler

	static    *registry                // the configured tools, built once
	cur       atomic.Pointer[registry] // static + the source's tools; see registry()
	refreshMu sync.Mutex
}

var _ pipeline.Handler = (*Loop)(nil)

// New builds the registry (tool definitions serialised once, schemas
// compiled, executors), and the tool middleware chain.
func New(opts Options) (*Loop, error) {
	cfg := opts.Loop
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = 10
	}
	if cfg.MaxConsecutiveErrors <= 0 {
		cfg.MaxConsecutiveErrors = 3
	}
	if cfg.Parallel == nil {
		t := true
		cfg.Parallel = &t
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = config.Duration(30 * time.Second)
	}
	if cfg.WallTime <= 0 {
		cfg.WallTime = config.Duration(5 * time.Minute)
	}
	if cfg.KeepAliveInterval <= 0 {
		cfg.KeepAliveInterval = config.Duration(5 * time.Second)
	}
	if cfg.MaxToolCalls <= 0 {
		cfg.MaxToolCalls = config.DefaultMaxToolCalls
	}
	switch {
	case cfg.MaxModelCalls <= 0:
		cfg.MaxModelCalls = config.DefaultMaxModelCalls
	case cfg.MaxModelCalls < 2:
		cfg.MaxModelCalls = 2 // the first call and the final answer (config refuses less)
	}
	opts.Loop = cfg
	l := &Loop{opts: opts, cfg: cfg, log: opts.Logger}
	reg, err := buildRegistry(&opts, newHTTPClient(opts.HTTPClient))
	if err != nil {
		return nil, err
	}
	l.static = reg
	l.cur.Store(reg)
	if opts.Source != nil {
		reg.version = opts.Source.Version() - 1 // differs: the first request builds the snapshot
	}
	l.chain = l.buildChain(opts.ToolMiddleware)
	return l, nil
}

// Tools returns the function layer (the composed tool middleware chain) for
// callers that run a server tool outside a chat call. Safe for concurrent use.
func (l *Loop) Tools() pipeline.ToolHandler { return l.chain }

// Chat serves one client request. Without an applicable server tool, or with
// tool_choice "none", it calls the route's model layer with req unchanged and
// returns its Response as is (the fast path). Otherwise it runs the loop and
// returns one chat.completion (Body) or one chunk Stream the caller must Close.
func (l *Loop) Chat(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	if req.Route == nil || req.Route.ModelLayer == nil {
		return nil, pipeline.Errorf(http.StatusInternalServerError, pipeline.TypeServer, pipeline.CodeNoRoute, "the model %q has no route", req.Model)
	}
	if l.opts.State != nil {
		req = l.resume(ctx, req)
	}
	reg := l.registry()
	tools := l.applicable(reg, req)
	req, tools, sel := l.selectTools(ctx, req, tools)
	if len(tools) == 0 && !(req.Stream && offersTools(req.Body)) {
		return req.Route.ModelLayer.Chat(ctx, req)
	}
	// A stream offering client tools goes through the loop even without a
	// server tool: its re-streamer normalizes the client's tool calls
	// (sequential, one first delta each), which an upstream may interleave.
	p, err := l.prepare(reg, req, tools)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return req.Route.ModelLayer.Chat(ctx, req)
	}
	p.sel = sel
	// One edit log per client request: context editing then re-applies
	// earlier rounds' clears first, so every round shares the edited prefix.
	ctx, elog := contextedit.WithEditLog(ctx)
	s := l.newSession(req, p)
	s.elog = elog
	ctx = s.withLimits(ctx)
	s.lim.model.used.Add(sel.modelCalls())
	if req.Stream {
		return s.startStream(ctx)
	}
	return s.runBlocking(ctx)
}

// offersTools reports whether body has a non-empty tools array.
func offersTools(body []byte) bool {
	if !bytes.Contains(body, []byte(`"tools"`)) {
		return false
	}
	t := gjson.GetBytes(body, "tools")
	return t.IsArray() && len(t.Raw) > 2 && bytes.ContainsRune([]byte(t.Raw), '{')
}

// applicable returns the server tools of reg for req's model and tenant.
func (l *Loop) applicable(reg *registry, req *pipeline.Request) []*tool {
	if len(reg.tools) == 0 {
		return nil
	}
	var tools []*tool
	if v, ok := reg.byModel.Load(req.Model); ok {
		tools = v.([]*tool)
	} else {
		for _, t := range reg.tools {
			if t.appliesTo(req.Model) {
				tools = append(tools, t)
			}
		}
		if reg.byModelCount.Load() < 4096 { // bounded: model names come from config
			if _, loaded := reg.byModel.LoadOrStore(req.Model, tools); !loaded {
				reg.byModelCount.Add(1)
			}
		}
	}
	if l.opts.ToolAllowed == nil || len(tools) == 0 {
		return tools
	}
	var out []*tool
	for i, t := range tools {
		if !l.opts.ToolAllowed(req.Tenant, t.cfg.Name) {
			if out == nil {
				out = append(make([]*tool, 0, len(tools)), tools[:i]...)
			}
			continue
		}
		if out != nil {
			out = append(out, t)
		}
	}
	if out == nil {
		return tools
	}
	return out
}

// isEOF reports a clean end. Only io.EOF itself: an UpstreamError may wrap
// io.EOF, and that is a cut stream, never a complete answer.
func isEOF(err error) bool { return err == io.EOF }
