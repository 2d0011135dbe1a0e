package toolloop

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
)

// The per-request limits on calls: tools.max_calls (per tool),
// tool_loop.max_tool_calls (server calls) and tool_loop.max_model_calls
// (every model call the request causes). A server call past a limit is not
// run: the model gets an error result naming the limit. A model call a tool
// wants to make past the limit is refused the same way. When nothing else
// can run, checkBudget makes the next round the final one, so the loop ends
// with an answer like it does for max_iterations.

// callLimits is what one client request has used of its limits. The
// session owns it; only model is shared (see modelCalls).
type callLimits struct {
	toolCalls int   // server calls passed to the tool chain
	perTool   []int // by index in the plan's tool set; nil when no offered tool has max_calls
	scanned   bool  // perTool decided
	model     modelCalls
	ctx       limitCtx // the request's context with model (withLimits)
}

// modelCalls counts the model calls of one client request. It travels in
// the context, so every route's model-call layer (ModelCallLimit) counts the
// calls made under it: the loop's rounds, agent tools', and any later helper
// that calls a model for the request. Safe for concurrent use: parallel
// agent tools take calls at the same time.
type modelCalls struct {
	max  int64
	used atomic.Int64
	// round is the request of the loop's next round. Only it may take the
	// last call: every other call leaves one, so the loop always has a call
	// left for its final answer.
	round atomic.Pointer[pipeline.Request]
	// first is the request of the loop's first round, which the request
	// layer admitted; admit (Options.AdmitRound) admits every later one.
	first atomic.Pointer[pipeline.Request]
	admit func(r *pipeline.Request) error
}

type modelCallsKey struct{}

// limitCtx is a request's context carrying its model-call counter. It lives
// in the session, so the counter travels without an allocation of its own:
// Value answers modelCallsKey and defers every other key, and Done, Err and
// Deadline, to the request's context (so context.WithCancel on it still
// attaches to the parent's cancellation without a goroutine).
type limitCtx struct {
	context.Context
	calls *modelCalls
}

func (c *limitCtx) Value(key any) any {
	if _, ok := key.(modelCallsKey); ok { // a type check: no interface comparison on every lookup that passes
		return c.calls
	}
	return c.Context.Value(key)
}

// ErrModelCallLimit is wrapped by the error ModelCallLimit returns for a
// model call past tool_loop.max_model_calls.
var ErrModelCallLimit = errors.New("toolloop: the request reached tool_loop.max_model_calls")

// take counts one call for r, or reports false when r may not have one.
func (m *modelCalls) take(r *pipeline.Request) bool {
	if m.round.Load() == r {
		return m.takeLeaving(0)
	}
	return m.takeLeaving(1)
}

// takeLeaving counts one call if reserve calls are still left after it.
func (m *modelCalls) takeLeaving(reserve int64) bool {
	for {
		u := m.used.Load()
		if u+reserve >= m.max {
			return false
		}
		if m.used.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// ModelCallLimit is the outermost step of every route's model-call layer:
// inside a tool loop it counts the call against tool_loop.max_model_calls
// and refuses one past it with an error wrapping ErrModelCallLimit; a
// round after the first must also pass the tenant's limits and budgets
// (Options.AdmitRound), whose refusal it returns as it is. Retries and
// fallbacks are attempts of the same call (a fallback route's own layer
// does not count it again). Outside a tool loop it only calls next.
func ModelCallLimit(next pipeline.Handler) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if m, ok := ctx.Value(modelCallsKey{}).(*modelCalls); ok && !fallback.Nested(ctx) {
			if !m.take(r) {
				return nil, m.refused()
			}
			// The first round was admitted by the request layer, and a
			// tool's own call by its tool (Options.Admit): neither is
			// admitted again.
			if m.admit != nil && m.round.Load() == r && m.first.Load() != r {
				if err := m.admit(r); err != nil {
					return nil, err
				}
			}
		}
		return next.Chat(ctx, r)
	})
}

// TakeModelCall counts one more model call, r, against the
// tool_loop.max_model_calls of the request ctx carries, for a call made
// inside a model's call layer, below ModelCallLimit (a prompted model's
// re-ask), and admits it as a later round is (the tenant's limits and
// budgets, Options.AdmitRound). It returns the refusal of a call past the
// count (it may never take the call kept for the loop's final answer) or
// of a refused one, nil when the call may be made. Outside a tool loop it
// takes nothing and returns nil.
func TakeModelCall(ctx context.Context, r *pipeline.Request) error {
	m, ok := ctx.Value(modelCallsKey{}).(*modelCalls)
	if !ok {
		return nil
	}
	if !m.takeLeaving(1) {
		return m.refused()
	}
	if m.admit != nil {
		if err := m.admit(r); err != nil {
			m.used.Add(-1) // refused: not made
			return err
		}
	}
	return nil
}

// refused is the error of a call past tool_loop.max_model_calls.
func (m *modelCalls) refused() error {
	e := pipeline.Invalid(http.StatusBadRequest, pipeline.CodeMaxModelCalls,
		"this request reached the gateway's limit of %d model calls (tool_loop.max_model_calls)", m.max)
	e.Err = ErrModelCallLimit
	return e
}

// withLimits starts counting the request's model calls: the context it
// returns carries the counter to every model-call layer the request reaches.
func (s *session) withLimits(ctx context.Context) context.Context {
	s.lim.model.max = int64(s.l.cfg.MaxModelCalls)
	s.lim.model.admit = s.l.opts.AdmitRound
	s.lim.ctx = limitCtx{Context: ctx, calls: &s.lim.model}
	return &s.lim.ctx
}

// admit decides, in call order, which of a turn's server calls may run. A
// call past tools.max_calls or tool_loop.max_tool_calls gets its error
// result in results and is not run; every other call is counted.
func (s *session) admit(tcs []pipeline.ToolCall, results []*pipeline.ToolResult) {
	max, whose := s.maxToolCalls()
	for i := range tcs {
		c := &tcs[i]
		if s.lim.toolCalls >= max {
			results[i] = s.refuse(c, "max_tool_calls",
				fmt.Sprintf("this request reached its limit of %d server tool calls (%s); the call was not run", max, whose))
			continue
		}
		if k := s.limitedTool(c.Name); k >= 0 {
			t := s.p.set.tools[k]
			if s.lim.perTool[k] >= t.cfg.MaxCalls {
				key := "tools.max_calls"
				if t.cfg.Kind == "mcp" {
					key = "mcp_servers.max_calls" // a server's tools share its setting
				}
				results[i] = s.refuse(c, "max_calls",
					fmt.Sprintf("tool %q reached its limit of %d calls per request (%s); the call was not run", t.cfg.Name, t.cfg.MaxCalls, key))
				continue
			}
			s.lim.perTool[k]++
		}
		s.lim.toolCalls++
	}
}

// maxToolCalls is the request's limit on server tool calls and the name
// of the setting it comes from: tool_loop.max_tool_calls, or the client's
// own lower cap (the Responses API's max_tool_calls).
func (s *session) maxToolCalls() (int, string) {
	if s.req.LimitToolCalls && s.req.MaxToolCalls < s.l.cfg.MaxToolCalls {
		return s.req.MaxToolCalls, "the request's max_tool_calls"
	}
	return s.l.cfg.MaxToolCalls, "tool_loop.max_tool_calls"
}

// refuse returns the error result of a call a limit stops, and logs it.
func (s *session) refuse(c *pipeline.ToolCall, limit, msg string) *pipeline.ToolResult {
	s.l.log.Info().Str("request_id", s.req.ID).Str("tool", c.Name).Str("limit", limit).Msg("tool loop: call refused by a limit")
	return s.l.errResult(c, &ToolError{Kind: "limit_reached", Message: msg})
}

// limitedTool returns the index in the request's tool set of the tool name
// resolves to (as the tool chain resolves it), when that tool has
// max_calls; else -1.
func (s *session) limitedTool(name string) int {
	tools := s.p.set.tools
	if !s.lim.scanned {
		s.lim.scanned = true
		for _, t := range tools {
			if t.cfg.MaxCalls > 0 {
				s.lim.perTool = make([]int, len(tools))
				break
			}
		}
	}
	if s.lim.perTool == nil {
		return -1
	}
	t := s.l.resolve(tools, name)
	for k, u := range tools {
		if u == t && t.cfg.MaxCalls > 0 {
			return k
		}
	}
	return -1
}

// limitReason names the limit that makes the next model call the final
// one, or "". The model-call limit leaves one call, for the answer. The tool
// limits end the loop when no server tool can run any more and the client
// offered no tools of its own (it may still call those).
func (s *session) limitReason() string {
	if m := &s.lim.model; m.max > 0 && m.used.Load()+1 >= m.max {
		return "max_model_calls"
	}
	if len(s.p.clientNames) > 0 {
		return ""
	}
	if max, _ := s.maxToolCalls(); s.lim.toolCalls >= max {
		return "max_tool_calls"
	}
	if s.lim.perTool == nil {
		return ""
	}
	for k, t := range s.p.set.tools {
		if t.cfg.MaxCalls == 0 || s.lim.perTool[k] < t.cfg.MaxCalls {
			return ""
		}
	}
	return "max_calls"
}
