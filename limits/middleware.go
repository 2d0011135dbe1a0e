package limits

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// header names which x-ratelimit-* trio a check reports.
type header byte

const (
	hdrNone header = iota
	hdrRequests
	hdrTokens
)

// Middleware returns the request-layer middleware. After the policy
// middleware has named the tenant, it takes every matching limit and budget
// in one store call: a request, its estimated input tokens, a slot in
// flight. Over a limit it answers 429 (rate_limit_exceeded, or
// insufficient_quota for a budget) with retry-after; either way it reports
// OpenAI's x-ratelimit-* headers for the most constrained requests and
// tokens counters. A request that matches no rule and no budget passes at no
// cost beyond the matching.
func (l *Limiter) Middleware() pipeline.Middleware {
	return func(next pipeline.Handler) pipeline.Handler {
		// The work before and after next.Chat is in functions of their
		// own, so that their locals are not on the stack while next runs.
		return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			if err := namedModel(r.Model); err != nil {
				return nil, err
			}
			ctx, slots, err := l.admit(ctx, r, r.Model, true)
			if err != nil {
				return nil, err
			}
			if slots.checks == nil {
				return next.Chat(ctx, r)
			}
			// A layer inside that panics (the server answers 500) must not
			// keep the slot: nothing would ever free it.
			freed := false
			defer func() {
				if !freed {
					l.release(slots.checks, slots.id)
				}
			}()
			resp, err := next.Chat(ctx, r)
			freed = true
			return l.freeSlots(slots, resp, err)
		})
	}
}

// held is what a request holds in flight: the checks whose concurrency
// slots it took (nil when none) and the slots' name.
type held struct {
	checks []check
	id     string
}

// admit takes r's requests and tokens from the counters of its scope (that
// of model: r.Model, or anyModel) and refuses it over a limit. slots are what r holds in flight, to be freed
// when its answer ends. A slot is named for this admission alone, never by
// r.ID: that is the client's X-Request-Id when it sends one, and requests
// sharing a name would share one slot. memo: r is a chat request, whose
// model calls may fall back (its state goes into the context returned).
//
//go:noinline
func (l *Limiter) admit(ctx context.Context, r *pipeline.Request, model string, memo bool) (_ context.Context, slots held, _ error) {
	tenant, key := who(r)
	now := l.now()
	sc := l.scopeOf(tenant, key, model, now)
	l.countRequest(now, sc)
	// A chat request's model calls may fall back to a model with a rule
	// of its own, taken once for the request (AdmitFallback): its state
	// remembers them.
	memo = memo && l.modelRules
	if len(sc.checks) == 0 {
		if memo {
			ctx = context.WithValue(ctx, stateKey{}, &reqState{model: model})
		}
		return ctx, held{}, nil
	}
	if sc.unpriced {
		limited.WithLabelValues(string(rune(kindBudget))).Inc()
		return ctx, held{}, unpriced(r.Model)
	}
	id := r.ID
	if sc.slots {
		id = l.slotName()
	}
	st := &reqState{model: model} // one allocation: the outcome's counts, the meter's estimate
	if len(sc.tokens) > 0 {
		st.estimate = max(1, estimate(r))
	}
	checks, out := sc.checks, &st.out
	out.buf = st.counts[:]
	if err := l.store.Take(ctx, now, id, checks, st.estimate, out); err != nil {
		if sc.slots {
			// The script may have run and only its answer been lost (Redis
			// slower than its timeout): a slot taken then would be held for
			// slotTTL. Releasing one never taken is harmless.
			l.release(checks, id)
		}
		return ctx, held{}, l.storeFailed(err)
	}
	l.report(r.Meta, checks, out, &st.headers)
	if out.denied >= 0 {
		c := checks[out.denied]
		limited.WithLabelValues(string(rune(c.kind))).Inc()
		return ctx, held{}, denial(c, st.estimate, out.retryAfter)
	}
	if st.estimate > 0 || memo {
		ctx = context.WithValue(ctx, stateKey{}, st)
	}
	if sc.slots {
		slots = held{checks: checks, id: id}
	}
	return ctx, slots, nil
}

// slotName returns a name no other admission of any replica has: the
// limiter's random prefix and a sequence number.
func (l *Limiter) slotName() string {
	return l.slotPfx + strconv.FormatUint(l.slotSeq.Add(1), 36)
}

// freeSlots frees the in-flight slots of request id when its answer ends:
// at once for an error or a body, at the end of a stream. Freed with the
// next batched write (at once in memory): no store round trip on the
// request's path.
//
//go:noinline
func (l *Limiter) freeSlots(slots held, resp *pipeline.Response, err error) (*pipeline.Response, error) {
	if err != nil || resp.Stream == nil {
		l.release(slots.checks, slots.id)
		return resp, err
	}
	resp.Stream = &releasingStream{Stream: resp.Stream, l: l, checks: slots.checks, id: slots.id}
	return resp, nil
}

// release frees the concurrency slots that checks took for request id.
func (l *Limiter) release(checks []check, id string) {
	adds := newAdditions()
	for _, c := range checks {
		if c.kind == kindConcurrent {
			adds.add(addition{key: c.key, kind: kindRelease, field: id})
		}
	}
	l.record(l.now(), adds)
}

// admitted lists the counters a model call made on the caller's behalf
// must pass: the scope's checks without the in-flight counters (the scope's
// own slice when it has none; callers only read it), nil when nothing is left.
func (sc *scope) admitted() []check {
	if !sc.slots {
		return sc.checks
	}
	var checks []check
	for _, c := range sc.checks {
		if c.kind != kindConcurrent {
			checks = append(checks, c)
		}
	}
	return checks
}

// Admit applies the limits and budgets to a model call a tool makes on the
// caller's behalf (an agent tool): the call takes a request from the
// counters of its own model, and is refused over a limit or budget, like a
// client request; its tokens count when it ends (Meter). It holds no slot
// in flight (the client request that runs the tool already does) and sets
// no headers.
func (l *Limiter) Admit(r *pipeline.Request) error {
	tenant, key := who(r)
	now := l.now()
	sc := l.scopeOf(tenant, key, r.Model, now)
	l.countRequest(now, sc)
	return l.takeCall(now, r.ID, sc.admitted())
}

// AdmitRound applies the limits and budgets to a later model call of r, a
// client request the request layer admitted (Middleware): a tool loop's
// round after the first, for the same model. The request layer took the
// request, its estimated input and its slot once, for the first call; a
// later call takes none of them again (requests_per_minute counts client
// requests; its tokens are charged by Meter when it ends). It is refused,
// with the 429 the request layer gives, when a budget of r's scope is spent
// or a tokens_per_minute counter has no token left (at zero or overdrawn):
// by this request's earlier calls or by any other. On a shared store, what is queued for the store
// (the earlier calls' spend and tokens) is written first, so that a later
// call sees its own request's earlier calls on either store; unless an
// earlier write failed: then the round does not wait on the store's
// retries, and is admitted on what the store holds. Like Admit it
// holds no slot and sets no headers.
func (l *Limiter) AdmitRound(r *pipeline.Request) error {
	tenant, key := who(r)
	now := l.now()
	checks := l.scopeOf(tenant, key, r.Model, now).later
	if len(checks) == 0 {
		return nil
	}
	if !l.sync {
		// Only what is new, never a retry of a failed write: a failing
		// store must not hold up the round (the backlog is the background
		// writer's).
		l.rec.flushNew()
		now = l.now()
	}
	return l.takeCall(now, r.ID, checks)
}

// takeCall takes one call of request id from checks (no slot in flight),
// or refuses it with the first spent one's denial.
func (l *Limiter) takeCall(now time.Time, id string, checks []check) error {
	if len(checks) == 0 {
		return nil
	}
	var out outcome
	if err := l.store.Take(context.Background(), now, id, checks, 0, &out); err != nil {
		return l.storeFailed(err)
	}
	if out.denied >= 0 {
		c := checks[out.denied]
		limited.WithLabelValues(string(rune(c.kind))).Inc()
		return denial(c, 0, out.retryAfter)
	}
	return nil
}

// AdmitFallback applies the limits of model to a fallback call the model
// layer makes for r, a request admitted for r.Model (ctx is its model
// call's): the first such call of the client request takes a request from
// each counter of model's scope that r.Model's admission did not already
// take (a rule of model's own: a fallback must not get around it), and is
// refused when one of them is spent. A later one (a tool loop's next round
// falling back again) takes no request again, as a later round of r.Model
// takes none: it passes model's tokens counters and budgets as AdmitRound
// does (requests_per_minute counts client requests). Budgets and rules both
// models match were taken once, by the request. Like Admit it holds no slot
// and sets no headers.
func (l *Limiter) AdmitFallback(ctx context.Context, r *pipeline.Request, model string) error {
	tenant, key := who(r)
	now := l.now()
	taken := l.scopeOf(tenant, key, r.Model, now).checks
	sc := l.scopeOf(tenant, key, model, now)
	st := stateFrom(ctx)
	mine := sc.admitted()
	// Remembered per model asked for: the loop's rounds of r.Model share
	// one fallback request, an agent tool's calls of another model their
	// own.
	memo := r.Model + "\x00" + model
	if st.fellBackTo(memo) {
		mine = sc.later
	}
	var checks []check
	for _, c := range mine {
		if !hasCheck(taken, c.key) {
			checks = append(checks, c)
		}
	}
	if err := l.takeCall(now, r.ID, checks); err != nil {
		return err
	}
	st.noteFallback(memo)
	return nil
}

// hasCheck reports whether checks holds the counter key.
func hasCheck(checks []check, key string) bool {
	for i := range checks {
		if checks[i].key == key {
			return true
		}
	}
	return false
}

// report sets the x-ratelimit-* headers from the tightest counters, and
// x-gateway-budget-remaining once a budget passed its warning threshold.
func (l *Limiter) report(m *pipeline.Meta, checks []check, out *outcome, hs *[6]pipeline.Header) {
	best := [3]int{-1, -1, -1}
	for i, c := range checks {
		h := c.hdr
		if h == hdrNone {
			continue
		}
		if b := best[h]; b < 0 || out.remaining[i]*checks[b].limit < out.remaining[b]*checks[i].limit {
			best[h] = i
		}
	}
	// The remaining and reset values of both trios are written into one
	// string, which the headers slice: one allocation instead of four.
	var buf [64]byte
	b := buf[:0]
	var ends [3][2]int // per trio: where its remaining and its reset end in b
	for h := hdrRequests; h <= hdrTokens; h++ {
		if i := best[h]; i >= 0 {
			b = strconv.AppendInt(b, out.remaining[i], 10)
			ends[h][0] = len(b)
			b = appendReset(b, out.resetMS[i])
			ends[h][1] = len(b)
		}
	}
	values, start := string(b), 0
	n := 0
	for h := hdrRequests; h <= hdrTokens; h++ {
		i := best[h]
		if i < 0 {
			continue
		}
		names := headerNames[h]
		hs[n] = pipeline.Header{Key: names[0], Value: checks[i].limitText}
		hs[n+1] = pipeline.Header{Key: names[1], Value: values[start:ends[h][0]]}
		hs[n+2] = pipeline.Header{Key: names[2], Value: values[ends[h][0]:ends[h][1]]}
		n, start = n+3, ends[h][1]
	}
	m.SetGroup(hs[:n:n])
	for i, c := range checks {
		if c.kind == kindBudget && out.remaining[i] <= c.warn {
			m.Set("x-gateway-budget-remaining", strconv.FormatFloat(float64(out.remaining[i])/1e6, 'f', -1, 64))
		}
	}
}

// appendReset appends ms milliseconds as time.Duration's String writes
// them ("0s", "250ms", "1.5s"), without its allocation below a minute, the
// longest a per-minute counter takes to refill.
func appendReset(b []byte, ms int64) []byte {
	switch {
	case ms == 0:
		return append(b, "0s"...)
	case ms < 0 || ms >= 60_000:
		return append(b, (time.Duration(ms) * time.Millisecond).String()...)
	case ms < 1000:
		return append(strconv.AppendInt(b, ms, 10), "ms"...)
	}
	b = strconv.AppendInt(b, ms/1000, 10)
	if frac := ms % 1000; frac > 0 {
		b = append(b, '.', byte('0'+frac/100))
		if frac%100 > 0 {
			b = append(b, byte('0'+frac/10%10))
			if frac%10 > 0 {
				b = append(b, byte('0'+frac%10))
			}
		}
	}
	return append(b, 's')
}

// headerNames are OpenAI's x-ratelimit-* headers of each trio: limit,
// remaining, reset.
var headerNames = [3][3]string{
	hdrRequests: {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
	hdrTokens:   {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
}

// denial is the 429 for the check that refused a request of tokens input
// tokens.
func denial(c check, tokens int64, retry time.Duration) error {
	cost := c.costOf(tokens)
	switch c.kind {
	case kindBudget:
		return pipeline.Errorf(http.StatusTooManyRequests, pipeline.TypeInsufficientQuota, pipeline.CodeInsufficientQuota,
			"You exceeded your current budget on this gateway; ask its operator to raise it.")
	case kindConcurrent:
		return pipeline.RateLimited(pipeline.TypeRequests, time.Second,
			"Too many requests in flight: limit %d. Retry when one has finished.", c.limit)
	}
	what, unit := pipeline.TypeRequests, "RPM"
	if c.hdr == hdrTokens {
		what, unit = pipeline.TypeTokens, "TPM"
	}
	if cost > c.limit {
		// More than a whole minute's worth: waiting never helps.
		return &pipeline.Error{Status: http.StatusTooManyRequests, Type: what, Code: pipeline.CodeTooLargeForLimit,
			Message: fmt.Sprintf("Request too large on %s per min (%s): Limit %d, Requested %d. Make the request smaller.", what, unit, c.limit, cost)}
	}
	if retry < time.Millisecond {
		retry = time.Millisecond
	}
	var e *pipeline.Error
	if cost == 0 {
		// A later call of an admitted request, which takes nothing before
		// it is made (AdmitRound, Admit): the counter is overdrawn.
		e = pipeline.RateLimited(what, retry, "Rate limit reached on %s per min (%s): Limit %d, used up by earlier calls. Please try again in %s.",
			what, unit, c.limit, retry.Round(time.Millisecond))
	} else {
		e = pipeline.RateLimited(what, retry, "Rate limit reached on %s per min (%s): Limit %d, Requested %d. Please try again in %s.",
			what, unit, c.limit, cost, retry.Round(time.Millisecond))
	}
	e.Spent = true
	return e
}

// RefuseUnnamed refuses r, a call of a model whose body names none (a
// pass-through body the upstream answers with its default model), when a
// budget applies to r's tenant or key: nothing prices a call of no model,
// so it would spend the budget without a trace, as an unpriced model would
// (unpriced); 403 model_not_priced. nil when no budget applies. Rate rules
// count such a call (HoldUnnamed) instead of refusing it.
func (l *Limiter) RefuseUnnamed(r *pipeline.Request) error {
	tenant, key := who(r)
	for i := range l.budgets {
		if l.budgets[i].applies(tenant, key) {
			limited.WithLabelValues(string(rune(kindBudget))).Inc()
			e := pipeline.Forbidden(pipeline.CodeModelNotPriced,
				"Your spend has a budget, and a call that names no model cannot be priced: name a model the gateway prices.")
			e.Param = "model"
			return e
		}
	}
	return nil
}

// unpriced is the refusal of a call of model, which the config does not
// name and no default price matches, under a budget: a budget it could
// spend without a trace is not a budget. 403, as for a model the tenant may
// not use: retrying does not help, another model or a price does.
func unpriced(model string) error {
	if len(model) > 256 {
		model = strings.ToValidUTF8(model[:256], "")
	}
	return pipeline.Forbidden(pipeline.CodeModelNotPriced,
		"The model '%s' has no price on this gateway, and your spend has a budget: use a model the gateway prices, or ask its operator to configure this one with a price.", model)
}

// releasingStream frees the request's slots when the stream is closed.
type releasingStream struct {
	pipeline.Stream
	l      *Limiter
	checks []check
	id     string
	done   bool
}

func (s *releasingStream) Close() {
	s.Stream.Close()
	if !s.done {
		s.done = true
		s.l.release(s.checks, s.id)
	}
}
