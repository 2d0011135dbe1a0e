package limits

import (
	"context"
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
			var checks []check
			var hdrs []header
			var slots []string
			var warn []float64 // per check: budget warn threshold (remaining fraction), else 0
			var est int64
			for i := range l.rules {
				rl := &l.rules[i]
				s, ok := rl.scope(tenant, key, r.Model)
				if !ok {
					continue
				}
				if rl.rpm > 0 {
					checks = append(checks, check{key: l.prefix + "rl:r:" + s, kind: kindRate, limit: rl.rpm, cost: 1})
					hdrs, warn = append(hdrs, hdrRequests), append(warn, 0)
				}
				if rl.tpm > 0 {
					if est == 0 {
						est = max(1, estimate(r))
					}
					checks = append(checks, check{key: l.prefix + "rl:t:" + s, kind: kindRate, limit: rl.tpm, cost: est})
					hdrs, warn = append(hdrs, hdrTokens), append(warn, 0)
				}
				if rl.conc > 0 {
					k := l.prefix + "rl:c:" + s
					checks = append(checks, check{key: k, kind: kindConcurrent, limit: rl.conc})
					hdrs, warn = append(hdrs, hdrNone), append(warn, 0)
					slots = append(slots, k)
				}
			}
			for i := range l.budgets {
				b := &l.budgets[i]
				if !b.applies(tenant, key) {
					continue
				}
				k, _ := b.periodKey(l.prefix, tenant, key, now)
				checks = append(checks, check{key: k, kind: kindBudget, limit: b.micro})
				hdrs, warn = append(hdrs, hdrNone), append(warn, 1-b.warnAt)
			}
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
			l.report(r.Meta, checks, hdrs, warn, out)
			if out.denied >= 0 {
				c := checks[out.denied]
				limited.WithLabelValues(string(rune(c.kind))).Inc()
				return nil, denial(c, hdrs[out.denied], out.retryAfter)
			}
			if est > 0 {
				ctx = context.WithValue(ctx, stateKey{}, &reqState{estimate: est, model: r.Model})
			}
			resp, err := next.Chat(ctx, r)
			if len(slots) == 0 {
				return resp, err
			}
			release := func() { l.store.Release(context.WithoutCancel(ctx), r.ID, slots) }
			if err != nil || resp.Stream == nil {
				release()
				return resp, err
			}
			resp.Stream = &releasingStream{Stream: resp.Stream, release: release}
			return resp, nil
		})
	}
}

// Admit applies the limits and budgets to a model call a tool makes on the
// caller's behalf (an agent tool): the call takes a request from the
// counters of its own model, and is refused over a limit
// or budget, like a client request. It holds no slot in flight (the client
// request that runs the tool already does) and sets no headers.
func (l *Limiter) Admit(r *pipeline.Request) error {
	tenant, key := who(r)
	now := l.now()
	var checks []check
	var hdrs []header
	for i := range l.rules {
		rl := &l.rules[i]
		s, ok := rl.scope(tenant, key, r.Model)
		if !ok {
			continue
		}
		if rl.rpm > 0 {
			checks, hdrs = append(checks, check{key: l.prefix + "rl:r:" + s, kind: kindRate, limit: rl.rpm, cost: 1}), append(hdrs, hdrRequests)
		}
		if rl.tpm > 0 {
			// Its tokens are counted when it ends (Meter); a token limit
			// already spent refuses it now.
			checks, hdrs = append(checks, check{key: l.prefix + "rl:t:" + s, kind: kindRate, limit: rl.tpm, cost: 0}), append(hdrs, hdrTokens)
		}
	}
	for i := range l.budgets {
		b := &l.budgets[i]
		if b.applies(tenant, key) {
			k, _ := b.periodKey(l.prefix, tenant, key, now)
			checks, hdrs = append(checks, check{key: k, kind: kindBudget, limit: b.micro}), append(hdrs, hdrNone)
		}
	}
	l.countRequest(now, tenant, key, r.Model)
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
		return denial(c, hdrs[out.denied], out.retryAfter)
	}
	return nil
}

// report sets the x-ratelimit-* headers from the tightest counters, and
// x-gateway-budget-remaining once a budget passed its warning threshold.
func (l *Limiter) report(m *pipeline.Meta, checks []check, hdrs []header, warn []float64, out outcome) {
	best := [3]int{-1, -1, -1}
	for i, h := range hdrs {
		if h == hdrNone {
			continue
		}
		if b := best[h]; b < 0 || out.remaining[i]*checks[b].limit < out.remaining[b]*checks[i].limit {
			best[h] = i
		}
	}
	for h, name := range [3]string{"", "requests", "tokens"} {
		i := best[h]
		if i < 0 {
			continue
		}
		m.Set("x-ratelimit-limit-"+name, strconv.FormatInt(checks[i].limit, 10))
		m.Set("x-ratelimit-remaining-"+name, strconv.FormatInt(out.remaining[i], 10))
		m.Set("x-ratelimit-reset-"+name, out.reset[i].Round(time.Millisecond).String())
	}
	for i, c := range checks {
		if c.kind == kindBudget && float64(out.remaining[i]) <= warn[i]*float64(c.limit) {
			m.Set("x-gateway-budget-remaining", strconv.FormatFloat(float64(out.remaining[i])/1e6, 'f', -1, 64))
		}
	}
}

// denial is the 429 for the check that refused.
func denial(c check, h header, retry time.Duration) error {
	switch c.kind {
	case kindBudget:
		return pipeline.Errorf(http.StatusTooManyRequests, pipeline.TypeInsufficientQuota, pipeline.CodeInsufficientQuota,
			"You exceeded your current budget on this gateway; ask its operator to raise it.")
	case kindConcurrent:
		return pipeline.RateLimited(pipeline.TypeRequests, time.Second,
			"Too many requests in flight: limit %d. Retry when one has finished.", c.limit)
	}
	what, unit := pipeline.TypeRequests, "RPM"
	if h == hdrTokens {
		what, unit = pipeline.TypeTokens, "TPM"
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
