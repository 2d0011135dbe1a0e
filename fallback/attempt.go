package fallback

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// maxStackDeps is the deployment count handled without allocating.
const maxStackDeps = 8

// tryRoute serves req from route's deployments: weighted choice among those
// whose circuit admits a request, untried ones first, each retried up to its
// provider's retries with backoff. It returns the first answer, the first
// error that is not retryable, the last retryable error once the deployments
// (or the time) are used up, or the circuit-open 503 when no attempt could be
// made at all.
func (h *handler) tryRoute(ctx context.Context, st *callState, req *pipeline.Request, route *pipeline.Route) (*pipeline.Response, error) {
	if len(route.Deployments) == 0 {
		st.attempts++
		return h.attempt(ctx, req, "")
	}
	rs := h.t.route(route)
	var triesBuf [maxStackDeps]int
	var blockedBuf [maxStackDeps]bool
	var tries []int
	var blocked []bool
	if n := len(rs.deps); n <= maxStackDeps {
		tries, blocked = triesBuf[:n], blockedBuf[:n]
	} else {
		tries, blocked = make([]int, n), make([]bool, n)
	}

	var lastErr, refused error // refused: a deployment's refusal before any call (classUnsupported)
	nRefused := 0
	var lastRetryAfter time.Duration
	last := -1
	for {
		i, probe := h.pick(rs, tries, blocked)
		if i < 0 {
			switch {
			case lastErr != nil:
				return nil, lastErr
			case nRefused == len(rs.deps):
				return nil, refused
			}
			return nil, h.circuitOpen(rs) // the others' circuits are open: retrying later may help
		}
		d := &rs.deps[i]
		var wait time.Duration
		if tries[i] > 0 {
			wait = h.backoff(tries[i] - 1)
			if i == last && lastRetryAfter > 0 {
				wait = min(lastRetryAfter, d.raCap)
			}
		}
		if !h.fits(st, wait) {
			d.br.done(h.now(), probe, resultNeutral)
			if lastErr == nil {
				return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamTimeout, Provider: d.target.Provider, Err: ErrDeadline}
			}
			return nil, lastErr // no time left for this route; a fallback may still fit
		}
		if wait > 0 {
			if err := h.sleep(ctx, wait); err != nil {
				d.br.done(h.now(), probe, resultNeutral)
				return nil, err
			}
		}

		tries[i]++
		st.attempts++
		st.provider = d.target.Provider
		c := req
		if req.Route != route || req.TargetOrDefault() != d.target {
			// Only a request that does not already go there needs a copy
			// (no layer writes a request it was given).
			c = req.Clone()
			c.Route = route
			c.Target = d.target
		}
		var resp *pipeline.Response
		var err error
		if probe {
			resp, err = h.attemptProbe(ctx, c, d)
		} else {
			resp, err = h.attempt(ctx, c, d.target.Provider)
		}
		if err == nil {
			d.br.done(h.now(), probe, resultSuccess)
			d.attempts[outcomeSuccess].Inc()
			return resp, nil
		}
		retry, retryAfter := h.failed(ctx, d, probe, route, tries[i], err)
		if !retry {
			return nil, err
		}
		if classify(err) == classUnsupported {
			// This deployment cannot take the request at all: the others
			// may. Its refusal is the answer only if nothing else failed.
			// It made no upstream call, which x-gateway-attempts counts.
			st.attempts--
			blocked[i] = true
			if nRefused++; refused == nil {
				refused = err
			}
			continue
		}
		if quotaSpent(err) {
			// No wait makes a spent quota pass: this deployment is not
			// tried again for the request; the others and the fallbacks are.
			blocked[i] = true
		}
		lastErr, last, lastRetryAfter = err, i, retryAfter
	}
}

// quotaSpent reports whether err is an upstream's 429 about a spent quota
// (OpenAI's insufficient_quota, as the Anthropic provider reports a
// billing_error), not a rate limit that passes with time.
func quotaSpent(err error) bool {
	var ue *pipeline.UpstreamError
	return errors.As(err, &ue) && ue.Kind == pipeline.UpstreamStatus && ue.Status == 429 &&
		bytes.Contains(ue.Body, []byte("insufficient_quota"))
}

// failed records an attempt on d that failed with err and says whether
// another attempt may follow, and after what wait the upstream asked for.
// A function of its own, so that its locals are not on the stack while an
// attempt runs.
//
//go:noinline
func (h *handler) failed(ctx context.Context, d *deployment, probe bool, route *pipeline.Route, try int, err error) (retry bool, retryAfter time.Duration) {
	now := h.now()
	if ctx.Err() != nil {
		d.br.done(now, probe, resultNeutral)
		d.attempts[outcomeCanceled].Inc()
		return false, 0
	}
	var ue *pipeline.UpstreamError
	isUpstream := errors.As(err, &ue)
	switch classify(err) {
	case classRetryable:
		r := resultFailure
		if isUpstream && ue.Kind == pipeline.UpstreamStatus && ue.Status == 429 && !quotaSpent(err) {
			// A rate limit: the deployment is up and says when to come
			// back (retry-after, which the retry waits out). Counted as a
			// failure, five of them opened the circuit for its whole
			// cooldown, refusing every caller for longer than asked. A
			// spent quota (OpenAI's insufficient_quota 429) does not pass
			// with time: it still counts.
			r = resultNeutral
		}
		d.br.done(now, probe, r)
		d.attempts[outcomeRetryable].Inc()
		h.log.Warn().Str("model", route.Name).Str("provider", d.target.Provider).
			Int("attempt", try).Err(err).Msg("upstream attempt failed")
		return true, ue.RetryAfter
	case classContextLength:
		d.br.done(now, probe, resultSuccess) // the deployment answered
		d.attempts[outcomeContextLength].Inc()
		return false, 0
	case classUnsupported:
		d.br.done(now, probe, resultNeutral) // refused before any call
		d.attempts[outcomeClientError].Inc()
		return true, 0
	default:
		r := resultNeutral
		if isUpstream {
			r = resultSuccess // a 4xx is the caller's fault, the deployment is up
		}
		d.br.done(now, probe, r)
		d.attempts[outcomeClientError].Inc()
		return false, 0
	}
}

// attemptProbe is attempt for the half-open probe of d's circuit. A panic
// below (a bug, which the request's recovery answers with a 500) still
// frees the probe slot; otherwise the circuit would wait for ever for a
// probe that never ends, and refuse every request to d until a reload.
//
//go:noinline
func (h *handler) attemptProbe(ctx context.Context, req *pipeline.Request, d *deployment) (*pipeline.Response, error) {
	ended := false
	defer func() {
		if !ended {
			d.br.done(h.now(), true, resultNeutral)
		}
	}()
	resp, err := h.attempt(ctx, req, d.target.Provider)
	ended = true
	return resp, err
}

// attempt makes one call to next; a stream is primed up to its first content.
func (h *handler) attempt(ctx context.Context, req *pipeline.Request, provider string) (*pipeline.Response, error) {
	resp, err := h.next.Chat(ctx, req)
	if err != nil {
		return nil, err
	}
	return h.primeResponse(ctx, resp, provider, req.Lookahead)
}

// primeResponse primes resp's stream unless that was done already (by the
// nested fallback middleware of a fallback route).
func (h *handler) primeResponse(ctx context.Context, resp *pipeline.Response, provider string, look *pipeline.Lookahead) (*pipeline.Response, error) {
	if resp == nil {
		return nil, errors.New("fallback: handler returned neither response nor error")
	}
	if resp.Stream == nil {
		return resp, nil
	}
	if _, ok := resp.Stream.(*replayStream); ok {
		return resp, nil
	}
	s, err := prime(ctx, resp.Stream, provider, look)
	if err != nil {
		return nil, err
	}
	resp.Stream = s
	return resp, nil
}

// pick chooses a deployment and claims its breaker: weighted random among
// the admitted ones not tried yet, else among those with retries left.
// It returns -1 when none is left. probe reports a half-open probe.
func (h *handler) pick(rs *routeState, tries []int, blocked []bool) (int, bool) {
	for {
		now := h.now()
		i := -1
		for pass := 0; pass < 2 && i < 0; pass++ {
			i = h.weighted(rs, tries, blocked, pass == 0, now)
		}
		if i < 0 {
			return -1, false
		}
		if ok, probe := rs.deps[i].br.allow(now); ok {
			return i, probe
		}
		blocked[i] = true // lost a race for the half-open probe
	}
}

// weighted draws one eligible deployment by weight, or returns -1. A
// deployment whose circuit does not admit requests is blocked for the rest
// of this call.
func (h *handler) weighted(rs *routeState, tries []int, blocked []bool, untried bool, now time.Time) int {
	eligible := func(i int) bool {
		return !blocked[i] && tries[i] < rs.deps[i].maxTries && (!untried || tries[i] == 0)
	}
	total, only := 0, -1
	for i := range rs.deps {
		if !eligible(i) {
			continue
		}
		if !rs.deps[i].br.available(now) {
			blocked[i] = true
			continue
		}
		total += rs.deps[i].weight
		only = i
	}
	if total == 0 || total == rs.deps[only].weight {
		return only // none, or a single candidate: no draw
	}
	r := int(h.rand() * float64(total))
	for i := range rs.deps {
		if !eligible(i) {
			continue
		}
		if r < rs.deps[i].weight {
			return i
		}
		r -= rs.deps[i].weight
	}
	return only // r was out of range (a Rand returning 1)
}

// backoff is the full-jitter wait before retry n (0-based): uniform in
// [0, min(max, base·2^n)].
func (h *handler) backoff(n int) time.Duration {
	d := h.max
	if n < 30 {
		if e := h.base << n; e > 0 && e < d {
			d = e
		}
	}
	return time.Duration(h.rand() * float64(d))
}

// fits reports whether waiting wait still leaves time for an attempt.
func (h *handler) fits(st *callState, wait time.Duration) bool {
	return h.now().Add(wait).Before(st.deadline)
}

// circuitOpen is the 503 for a route whose deployments all have an open
// circuit; RetryAfter is the shortest wait until one admits a probe.
func (h *handler) circuitOpen(rs *routeState) *pipeline.Error {
	now := h.now()
	wait := time.Duration(-1)
	for i := range rs.deps {
		if w := rs.deps[i].br.retryIn(now); wait < 0 || w < wait {
			wait = w
		}
	}
	if wait <= 0 {
		wait = time.Second
	}
	return pipeline.Unavailable(pipeline.CodeCircuitOpen, wait, ErrCircuitOpen, "the model is temporarily unavailable; retry later")
}
