package fallback

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/gateway/pipeline"
)

// walk tries the request's route, then its fallbacks in order, and returns
// the answer with the route that gave it. Every error it returns is either
// the last upstream error, an error to return as it is, or the 503 for
// circuits that were all open.
func (h *handler) walk(ctx context.Context, st *callState, req *pipeline.Request) (*pipeline.Response, *pipeline.Route, error) {
	primary := req.Route
	resp, err := h.tryRoute(ctx, st, req, primary)
	if err == nil || len(primary.Fallbacks) == 0 || ctx.Err() != nil {
		return resp, primary, err
	}
	return h.fallBack(ctx, st, req, err)
}

// fallBack walks the fallbacks of req's route after its own deployments
// failed with err. A function of its own, so that its locals are not on
// the stack of every call, which tries the route alone.
//
//go:noinline
func (h *handler) fallBack(ctx context.Context, st *callState, req *pipeline.Request, err error) (*pipeline.Response, *pipeline.Route, error) {
	primary := req.Route
	var resp *pipeline.Response

	// The nested layers share the bookkeeping through the context; a heap
	// copy keeps st itself on the caller's stack on the fast path.
	shared := new(callState)
	*shared = *st
	defer func() { *st = *shared }()
	nctx := context.WithValue(ctx, nestedKey{}, shared)

	var (
		lastErr  error
		refused  error           // a target's refusal before any call (classUnsupported)
		openErr  *pipeline.Error // the shortest circuit wait seen
		window   = -1            // after a context-length error: the prompt needs more tokens than this
		tried    = []*pipeline.Route{primary}
		route    = primary
		position = 0 // next index in primary.Fallbacks
	)
	for {
		var reason prometheus.Counter
		var pe *pipeline.Error
		switch {
		case ctx.Err() != nil:
			return nil, nil, err
		case errors.Is(err, ErrCircuitOpen) && errors.As(err, &pe):
			if openErr == nil || pe.RetryAfter < openErr.RetryAfter {
				openErr = pe
			}
			reason = fallbackOnCircuitOpen
		default:
			switch classify(err) {
			case classRetryable:
				reason, lastErr = fallbackOnError, err
			case classContextLength:
				window = max(window, route.ContextWindow)
				reason = fallbackOnContextLength
				if lastErr == nil || classify(lastErr) == classContextLength {
					// A fallback too small for a prompt an earlier model
					// took says nothing of that model's failure (a 429 with
					// its retry-after, a 500): the earlier error is the answer.
					lastErr = err
				}
			case classUnsupported:
				// The model's provider cannot take the request: another
				// model's may. A failure of an earlier attempt says more.
				reason = fallbackOnError
				if refused == nil {
					refused = err
				}
			default:
				return nil, nil, err
			}
		}

		next := h.nextFallback(ctx, req, primary, &position, window, tried)
		if next == nil || !h.fits(shared, 0) {
			break
		}
		tried = append(tried, next)
		reason.Inc()
		h.log.Warn().Str("model", route.Name).Str("fallback", next.Name).Err(err).Msg("falling back")
		resp, err = h.callFallback(nctx, shared, req, next)
		if err == nil {
			return resp, next, nil
		}
		route = next
	}
	switch {
	case lastErr != nil:
		return nil, nil, lastErr
	case openErr != nil:
		return nil, nil, openErr // no upstream attempt at all: every circuit was open, or open and refusing
	}
	return nil, nil, refused
}

// nextFallback resolves the next usable fallback of primary from *position
// on. After a context-length error (window >= 0) only models with a larger
// context window qualify; the others are skipped without being called. A
// model the caller's policy refuses is never one: a fallback must not reach
// a model the caller could not ask for, nor one whose limits it has spent.
func (h *handler) nextFallback(ctx context.Context, req *pipeline.Request, primary *pipeline.Route, position *int, window int, tried []*pipeline.Route) *pipeline.Route {
	for *position < len(primary.Fallbacks) {
		name := primary.Fallbacks[*position]
		*position++
		r := h.lookup(name)
		switch {
		case r == nil:
			h.log.Warn().Str("model", primary.Name).Str("fallback", name).Msg("unknown fallback model skipped")
			continue
		case !h.allows(req.Tenant, name):
			h.log.Debug().Str("model", primary.Name).Str("fallback", name).Msg("fallback skipped: not allowed for the tenant")
			continue
		case window >= 0 && r.ContextWindow <= window:
			h.log.Debug().Str("model", primary.Name).Str("fallback", name).Int("window", r.ContextWindow).
				Msg("fallback skipped: context window not larger")
			continue
		}
		seen := false
		for _, t := range tried {
			seen = seen || t == r
		}
		if seen {
			continue
		}
		if err := h.admit(ctx, req, name); err != nil {
			h.log.Debug().Str("model", primary.Name).Str("fallback", name).Err(err).Msg("fallback skipped: refused by the caller's limits")
			continue
		}
		return r
	}
	return nil
}

// callFallback runs route's own model-call chain (its context editing runs
// for its window) on a clone of req; the nested fallback middleware finds st
// in ctx and only retries and picks deployments.
func (h *handler) callFallback(ctx context.Context, st *callState, req *pipeline.Request, route *pipeline.Route) (*pipeline.Response, error) {
	c := req.Clone()
	c.Route = route
	c.Target = nil
	if route.ModelLayer == nil {
		return h.tryRoute(ctx, st, c, route)
	}
	before := st.attempts
	resp, err := route.ModelLayer.Chat(ctx, c)
	if st.attempts == before {
		st.attempts++ // that chain has no fallback middleware of its own
	}
	if err != nil {
		return nil, err
	}
	return h.primeResponse(ctx, resp, "", c.Lookahead)
}
