package limits

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
		return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			tenant, key := who(r)
			now := l.now()
			l.countRequest(now, tenant, key, r.Model)
			var est int64
			checks := l.plan(r, now, true, func() int64 {
				if est == 0 {
					est = max(1, estimate(r))
				}
				return est
			})
			if len(checks) == 0 {
				return next.Chat(ctx, r)
			}
			out, err := l.store.Take(ctx, now, r.ID, checks)
			if err != nil {
				if err := l.storeFailed(err); err != nil {
					return nil, err
				}
				return next.Chat(ctx, r)
			}
			l.report(r.Meta, checks, out)
			if out.denied >= 0 {
				c := checks[out.denied]
				limited.WithLabelValues(string(rune(c.kind))).Inc()
				return nil, denial(c, out.retryAfter)
			}
			if est > 0 {
				ctx = context.WithValue(ctx, stateKey{}, &reqState{estimate: est, model: r.Model})
			}
			var slots []string
			for _, c := range checks {
				if c.kind == kindConcurrent {
					slots = append(slots, c.key)
				}
			}
			resp, err := next.Chat(ctx, r)
			if len(slots) == 0 {
				return resp, err
			}
			// Freed with the next batched write (at once in memory): no
			// store round trip on the request's path.
			release := func() {
				adds := make([]addition, len(slots))
				for i, k := range slots {
					adds[i] = addition{key: k, kind: kindRelease, field: r.ID}
				}
				l.record(adds)
			}
			if err != nil || resp.Stream == nil {
				release()
				return resp, err
			}
			resp.Stream = &releasingStream{Stream: resp.Stream, release: release}
			return resp, nil
		})
	}
}

// plan lists the counters r must pass: for each matching rule its requests,
// its tokens (tokens() units; 0 for a call whose tokens are counted when it
// ends) and, when slots, a slot in flight; then the matching budgets. A
// request that matches nothing gets nil, at the cost of the matching.
func (l *Limiter) plan(r *pipeline.Request, now time.Time, slots bool, tokens func() int64) []check {
	tenant, key := who(r)
	var checks []check
	for i := range l.rules {
		rl := &l.rules[i]
		s, ok := rl.scope(tenant, key, r.Model)
		if !ok || (rl.rpm == 0 && rl.tpm == 0 && (rl.conc == 0 || !slots)) {
			continue
		}
		if checks == nil {
			checks = make([]check, 0, 3*len(l.rules)+len(l.budgets))
		}
		if rl.rpm > 0 {
			checks = append(checks, check{key: rl.keyR + s, kind: kindRate, limit: rl.rpm, cost: 1, hdr: hdrRequests})
		}
		if rl.tpm > 0 {
			var cost int64
			if tokens != nil {
				cost = tokens()
			}
			checks = append(checks, check{key: rl.keyT + s, kind: kindRate, limit: rl.tpm, cost: cost, hdr: hdrTokens})
		}
		if rl.conc > 0 && slots {
			checks = append(checks, check{key: rl.keyC + s, kind: kindConcurrent, limit: rl.conc})
		}
	}
	for i := range l.budgets {
		b := &l.budgets[i]
		if b.applies(tenant, key) {
			k, _ := l.periodKey(b, tenant, key, now)
			checks = append(checks, check{key: k, kind: kindBudget, limit: b.micro, warn: 1 - b.warnAt})
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
	l.countRequest(now, tenant, key, r.Model)
	checks := l.plan(r, now, false, nil)
	if len(checks) == 0 {
		return nil
	}
	out, err := l.store.Take(context.Background(), now, r.ID, checks)
	if err != nil {
		return l.storeFailed(err)
	}
	if out.denied >= 0 {
		c := checks[out.denied]
		limited.WithLabelValues(string(rune(c.kind))).Inc()
		return denial(c, out.retryAfter)
	}
	return nil
}

// report sets the x-ratelimit-* headers from the tightest counters, and
// x-gateway-budget-remaining once a budget passed its warning threshold.
func (l *Limiter) report(m *pipeline.Meta, checks []check, out outcome) {
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
	for h := hdrRequests; h <= hdrTokens; h++ {
		i := best[h]
		if i < 0 {
			continue
		}
		names := headerNames[h]
		m.Set(names[0], strconv.FormatInt(checks[i].limit, 10))
		m.Set(names[1], strconv.FormatInt(out.remaining[i], 10))
		m.Set(names[2], out.reset[i].Round(time.Millisecond).String())
	}
	for i, c := range checks {
		if c.kind == kindBudget && float64(out.remaining[i]) <= c.warn*float64(c.limit) {
			m.Set("x-gateway-budget-remaining", strconv.FormatFloat(float64(out.remaining[i])/1e6, 'f', -1, 64))
		}
	}
}

// headerNames are OpenAI's x-ratelimit-* headers of each trio: limit,
// remaining, reset.
var headerNames = [3][3]string{
	hdrRequests: {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
	hdrTokens:   {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
}

// denial is the 429 for the check that refused.
func denial(c check, retry time.Duration) error {
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
	if c.cost > c.limit {
		// More than a whole minute's worth: waiting never helps.
		return &pipeline.Error{Status: http.StatusTooManyRequests, Type: what, Code: pipeline.CodeTooLargeForLimit,
			Message: fmt.Sprintf("Request too large on %s per min (%s): Limit %d, Requested %d. Make the request smaller.", what, unit, c.limit, c.cost)}
	}
	if retry < time.Millisecond {
		retry = time.Millisecond
	}
	return pipeline.RateLimited(what, retry, "Rate limit reached on %s per min (%s): Limit %d, Requested %d. Please try again in %s.",
		what, unit, c.limit, c.cost, retry.Round(time.Millisecond))
}

// releasingStream frees the request's slots when the stream is closed.
type releasingStream struct {
	pipeline.Stream
	release func()
	done    bool
}

func (s *releasingStream) Close() {
	s.Stream.Close()
	if !s.done {
		s.done = true
		s.release()
	}
}
