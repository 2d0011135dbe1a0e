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
	model string          // the model of r's scope: r.Model, or anyModel (HoldUnnamed)
	ended atomic.Bool
}

// Hold admits r, a pass-through request that passed its tenant's policy,
// as Middleware admits a chat request, through the same admit: it takes a
// request, its estimated input tokens (estimate) and a slot in flight from
// every matching counter, all or nothing, and is refused over a limit or a
// spent budget with the 429 chat gives. The caller ends the Call once r's
// answer has ended, on every path. r is kept until then.
func (l *Limiter) Hold(r *pipeline.Request) (*Call, error) {
	if err := namedModel(r.Model); err != nil {
		return nil, err
	}
	return l.hold(r, r.Model)
}

// HoldUnnamed is Hold for r, a call of a model whose body names none (a
// pass-through body the upstream answers with its default model, an image
// generation or a Responses call of a saved prompt, where the SDKs make
// the model optional). It may be a call of any model, so it counts against
// every rate rule of its tenant and key, tenant-wide and per model (see
// rule.scope): it can neither get around a per-model rule nor be refused
// for naming none. Its tokens are charged to the same counters. A budget
// refuses it first (RefuseUnnamed).
func (l *Limiter) HoldUnnamed(r *pipeline.Request) (*Call, error) {
	return l.hold(r, anyModel)
}

func (l *Limiter) hold(r *pipeline.Request, model string) (*Call, error) {
	ctx, slots, err := l.admit(context.Background(), r, model, false)
	if err != nil {
		return nil, err
	}
	return &Call{l: l, r: r, ctx: ctx, slots: slots, model: model}, nil
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
		t.input = estimateAtEnd(r)
	}
	switch {
	case c.model == anyModel:
		c.l.chargeIn(c.ctx, r, t, true, "", anyModel)
	case r.Route == nil && r.Model != "":
		c.l.chargeAs(c.ctx, r, t, true, UnconfiguredModel)
	default:
		c.l.charge(c.ctx, r, t, true)
	}
}

// End frees the call's slots in flight, as Middleware frees a chat
// request's when its answer ends (with the next batched write, at once in
// memory). Only the first End frees them.
func (c *Call) End() {
	if c.slots.checks != nil && !c.ended.Swap(true) {
		c.l.release(c.slots.checks, c.slots.id)
	}
}
