package limits

import (
	"context"
	"sync/atomic"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// Call is a client request served outside the chat pipeline (a
// pass-through call) that Hold admitted. It holds what Middleware holds for
// a chat request: the request's slots in flight, until End, and the input
// estimate taken from the token counters, which Charge subtracts from the
// usage it charges. Safe for concurrent use.
type Call struct {
	l     *Limiter
	r     *pipeline.Request
	ctx   context.Context // carries the request's state (the estimate taken) to charge, as Middleware's does to Meter
	slots held            // what r holds in flight
	ended atomic.Bool
}

// Hold admits r, a pass-through request that passed its tenant's policy,
// as Middleware admits a chat request, through the same admit: it takes a
// request, its estimated input tokens (estimate) and a slot in flight from
// every matching counter, all or nothing, and is refused over a limit or a
// spent budget with the 429 chat gives. The caller ends the Call once r's
// answer has ended, on every path. r is kept until then.
func (l *Limiter) Hold(r *pipeline.Request) (*Call, error) {
	ctx, slots, err := l.admit(context.Background(), r)
	if err != nil {
		return nil, err
	}
	return &Call{l: l, r: r, ctx: ctx, slots: slots}, nil
}

// Charge records the call as Meter records a model call, once its upstream
// answered, with the tokens of u: the usage its answer reported, or the
// caller's estimate. estimateInput counts an estimate of the request body's
// tokens as its input instead of u's. The estimate Hold took is not counted
// twice.
//
// A model the config does not name (server.passthrough_unknown_models) is
// limited and priced by its name as the rules say, but metered under
// UnconfiguredModel in the metrics and the usage record: a client's names
// never become labels or records of their own, or any client could add
// series and records without bound.
func (c *Call) Charge(u wire.ChatUsage, estimateInput bool) {
	t := tokensOf(u)
	r := c.r
	if estimateInput {
		t.input = estimate(r)
	}
	if r.Route == nil && r.Model != "" {
		c.l.chargeAs(c.ctx, r, t, true, UnconfiguredModel)
		return
	}
	c.l.charge(c.ctx, r, t, true)
}

// End frees the call's slots in flight, as Middleware frees a chat
// request's when its answer ends (with the next batched write, at once in
// memory). Only the first End frees them.
func (c *Call) End() {
	if c.slots.checks != nil && !c.ended.Swap(true) {
		c.l.release(c.slots.checks, c.slots.id)
	}
}
