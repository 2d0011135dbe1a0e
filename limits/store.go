package limits

import (
	"context"
	"math"
	"time"
)

// kind is what a check counts.
type kind byte

const (
	kindRate       kind = 'r' // a per-minute rate (GCRA / token bucket): limit per minute, cost now
	kindConcurrent kind = 'c' // requests in flight: limit slots, one taken per request
	kindBudget     kind = 'b' // spend in micro-dollars: allowed while spent < limit
)

// check is one counter a request must pass.
type check struct {
	key   string // store key
	kind  kind
	limit int64
	cost  int64 // rate: units taken now (a tokens counter's come with the request: costOf); others unused

	limitText string // limit in decimal, for the x-ratelimit-limit-* headers

	hdr  header // which x-ratelimit-* trio it may report
	warn int64  // budgets: warn once the micro-dollars remaining are at most this (spend at or past warn_at)
}

// costOf is what c takes for a request of tokens input tokens: those on a
// tokens counter, its own cost on any other.
func (c *check) costOf(tokens int64) int64 {
	if c.hdr == hdrTokens {
		return tokens
	}
	return c.cost
}

// outcome is the store's answer to a Take.
type outcome struct {
	denied     int           // index of the first check that refused, or -1
	retryAfter time.Duration // when the refused check would pass (rates)
	remaining  []int64       // per check, after the take
	resetMS    []int64       // per check: milliseconds until the counter is back to full
	buf        []int64       // backing of remaining and resetMS, when the caller lends one
}

// reset readies o for n checks that refused none, in o.buf when it is
// large enough.
func (o *outcome) reset(n int) {
	b := o.buf
	if cap(b) < 2*n {
		b = make([]int64, 2*n)
	}
	b = b[:2*n]
	clear(b)
	*o = outcome{denied: -1, remaining: b[:n:n], resetMS: b[n:], buf: o.buf}
}

// addition is an unchecked change: a token correction (rate key; n <= 0 is
// ignored), spend, or a row of usage counters.
type addition struct {
	key   string
	kind  kind // kindRate (with limit), kindBudget (spend), kindUsage (row)
	limit int64
	n     int64
	field string    // kindUsage: the row's hash-field prefix (tenant, key, model)
	row   usageRow  // kindUsage
	until time.Time // expiry of spend and usage keys; zero = none
}

// maxDebtMinutes bounds the tokens one call charges a rate rule: however
// many it used, at most a day of the rule, so that no answer (an upstream
// may report up to wire.MaxTokenCount) shuts its tenant out for longer,
// and a Redis counter's deadline stays a plain integer of milliseconds.
const maxDebtMinutes = 24 * 60

// rateCharge is the tokens a kindRate addition takes from its counter:
// all it used, up to maxDebtMinutes of the rule.
func (a *addition) rateCharge() int64 {
	if a.limit > 0 && a.limit <= math.MaxInt64/maxDebtMinutes {
		return min(a.n, a.limit*maxDebtMinutes)
	}
	return a.n
}

// usageRow is a set of usage counters of one tenant, key and model.
type usageRow [numMetrics]int64

// The usage metrics, in usageRow order; names are hash-field suffixes.
const (
	mRequests = iota
	mCalls
	mInput
	mOutput
	mCached
	mCost
	numMetrics
)

var metricNames = [numMetrics]string{"requests", "calls", "input", "output", "cached", "cost"}

// kindUsage is an addition to the usage record (a hash of counters);
// kindRelease frees the concurrency slot named field in key; kindSeq, first
// in a batch, numbers it (n) in the writer's sequence counter key: a store
// that may apply a write whose error it reports (Redis: a reply lost to a
// timeout) applies the batch in one step (Redis: one script, which a lost
// connection does not interrupt), and skips it when key already holds n or
// more, so that sending it again never counts it twice. A script that fails
// partway (an error reply) is not undone: such a batch is not sent again.
const (
	kindUsage   kind = 'u'
	kindRelease kind = 'x'
	kindSeq     kind = 's'
)

// Store keeps the counters. Implementations are safe for concurrent use.
type Store interface {
	// Take passes every check or none: when one refuses, nothing is taken.
	// id names the request's concurrency slots; tokens is the cost on the
	// tokens counters (check.costOf); a rate check whose cost is 0 takes
	// nothing but refuses when less than one unit is left, so that a
	// counter at exactly zero refuses every call. checks are only read. It answers in
	// out (its buf, if any, may hold the answer's counts).
	Take(ctx context.Context, now time.Time, id string, checks []check, tokens int64, out *outcome) error
	// Add applies unchecked changes.
	Add(ctx context.Context, now time.Time, adds []addition) error
	// Usage returns the usage hash of each key (missing keys are empty).
	Usage(ctx context.Context, keys []string) ([]map[string]int64, error)
}
