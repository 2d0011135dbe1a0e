package toolloop

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// Options configure a Loop. Everything is read once, in New.
type Options struct {
	Tools []config.Tool   // [[tools]]: kinds builtin, http, agent
	Loop  config.ToolLoop // [tool_loop] budgets (defaults already applied by config)
	// RoundMax bounds what the loop keeps of one streamed round (and an
	// agent tool's model stream); 0 = maxRoundBytes. The gateway gives the
	// largest providers.max_response_bytes: the loop cannot tell which
	// provider a round came from (fallback picks it).
	RoundMax int
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
	// AdmitRound applies the tenant's limits and budgets to each round of
	// the loop after the first (limits.Limiter.AdmitRound), in the round's
	// model-call layer (ModelCallLimit): a spent budget or an overdrawn
	// tokens_per_minute stops the loop's model calls. Its error (a 429)
	// ends the request: the JSON answer is that error, a stream ends with
	// it as its error event. It must not take another client request or
	// input estimate: the request layer took those for the first round.
	// nil admits every round.
	AdmitRound func(r *pipeline.Request) error
	// ToolMiddleware is inserted into the function layer after the loop's
	// own policy and validation steps and before the size cap, retry and
	// timeout (e.g. a result cache). mws[0] is outermost.
	ToolMiddleware []pipeline.ToolMiddleware
	// Outer is outermost on the function layer, before the loop's own
	// steps: it sees every server call, those they refuse (an unknown
	// tool, a policy's denial, invalid arguments) too. The tracer's
	// execute_tool span goes here. nil = none.
	Outer pipeline.ToolMiddleware
	// Source adds tools that come and go at run time (MCP servers); nil = none.
	Source ToolSource
	// ServerPrefixes are the configured MCP servers' name prefixes, by
	// server name: a called name with one of them is never resolved, as a
	// near miss, to another server's tool (when its server is down, its
	// tools are not offered, and a near miss would run another's).
	ServerPrefixes map[string]string
	// State keeps the hidden part of mixed turns; nil = not kept (see StateStore).
	State StateStore
	// ApprovalKey keys the ids of calls awaiting approval when
	// Loop.ApprovalSecret is unset (NewApprovalKey); nil = a random key of
	// this Loop's own. A process passes the same key to the loops of its
	// reloads, so that an id handed out before a reload is still its.
	ApprovalKey []byte
	// NewEditLog returns the context-edit log of one client request
	// (contextedit.NewEditLog), put on every round's Request.EditLog so that
	// each round gets the same edits; nil = none, each round is edited on
	// its own.
	NewEditLog func() pipeline.EditLog

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

	roundMax int // bytes kept of one streamed round: maxRoundBytes (tests set less)

	approval  approvalKey              // tags the ids of calls awaiting approval (approval.go)
	static    *registry                // the configured tools, built once
	cur       atomic.Pointer[registry] // static + the source's tools; see registry()
	refreshMu sync.Mutex
}

var _ pipeline.Handler = (*Loop)(nil)

// New builds the registry (tool definitions serialised once, schemas
// compiled, executors), and the tool middleware chain. opts.Loop and
// opts.Tools are used as given: config applies their defaults
// (config.ApplyDefaults) and validates them.
func New(opts Options) (*Loop, error) {
	cfg := opts.Loop
	l := &Loop{opts: opts, cfg: cfg, log: opts.Logger, approval: newApprovalKey(cfg.ApprovalSecret, opts.ApprovalKey), roundMax: cmp.Or(opts.RoundMax, maxRoundBytes)}
	reg, err := buildRegistry(&opts, newHTTPClient(opts.HTTPClient))
	if err != nil {
		return nil, err
	}
	l.static = reg
	l.cur.Store(reg)
	if opts.Source != nil {
		reg.version = opts.Source.Version() - 1 // differs: the first request builds the snapshot
	}
	l.chain = l.buildChain(opts.Outer, opts.ToolMiddleware)
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
	offered := tools // before tool selection and allowed_tools narrow them
	var settled *settledRuns
	if hasApprovals(req.Body) {
		var err error
		if req, settled, err = l.settle(ctx, req, tools); err != nil {
			return nil, err
		}
	}
	req, tools, sel := l.selectTools(ctx, req, tools)
	if len(tools) == 0 && !offersTools(req.Body) {
		return req.Route.ModelLayer.Chat(ctx, req)
	}
	// A request offering client tools goes through the loop even without a
	// server tool: it normalizes the client's tool calls (an id for a call
	// without one, "tool_calls" as the finish of an answer that calls,
	// sequential calls with one first delta each in a stream), the JSON
	// answer as the stream, so that both forms of a request carry the same
	// calls.
	p, err := l.prepare(req, offered, tools)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return req.Route.ModelLayer.Chat(ctx, req)
	}
	p.sel = sel
	// One edit log per client request: context editing then re-applies
	// earlier rounds' clears first, so every round shares the edited prefix.
	s := l.newSession(req, p)
	s.noteSettled(settled)
	if s.elog = req.EditLog; s.elog == nil && l.opts.NewEditLog != nil {
		s.elog = l.opts.NewEditLog()
	}
	ctx = s.withLimits(ctx)
	s.lim.model.used.Add(sel.modelCalls())
	if req.Stream {
		return s.startStream(ctx)
	}
	resp, err := s.runBlocking(ctx)
	if err != nil && s.lim.toolCalls > 0 {
		// A JSON answer that fails after server tools ran: a retry would
		// run them again (a stream's error event is never retried).
		err = pipeline.AfterSideEffects(err)
	}
	return resp, err
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
	if len(tools) == 0 {
		return tools
	}
	var out []*tool
	for i, t := range tools {
		if !req.Tenant.AllowsTool(t.cfg.Name) {
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
