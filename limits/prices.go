package limits

import (
	"math"
	"strings"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/wire"
)

// DefaultPrices are list prices in dollars per million tokens, by upstream
// model name (the name itself, or a dated snapshot of it: gpt-4o-2024-08-06,
// o3-2025-04-16), for models whose
// [[models]] entry sets no price and for models the config does not name
// (pass-through calls with server.passthrough_unknown_models). A configured
// model matching none is free: set price on the model to count its spend.
// An unconfigured one matching none is refused where a budget applies
// (scope.unpriced).
var DefaultPrices = map[string]config.Price{
	"gpt-4o":       {Input: 2.5, Output: 10, CachedInput: 1.25},
	"gpt-4o-mini":  {Input: 0.15, Output: 0.6, CachedInput: 0.075},
	"gpt-4.1":      {Input: 2, Output: 8, CachedInput: 0.5},
	"gpt-4.1-mini": {Input: 0.4, Output: 1.6, CachedInput: 0.1},
	"gpt-4.1-nano": {Input: 0.1, Output: 0.4, CachedInput: 0.025},
	"o3":           {Input: 2, Output: 8, CachedInput: 0.5},
	"o4-mini":      {Input: 1.1, Output: 4.4, CachedInput: 0.275},
}

// priceFor returns the price of a model: its own, else the default of its
// upstream name or of the name it is a dated snapshot of (ok false when
// none is listed: zero). Another model whose name merely starts with a
// listed one (o3-pro, o3-deep-research, gpt-4o-realtime-preview) has
// prices of its own, often many times higher: it matches none.
func priceFor(own *config.Price, upstream string) (_ config.Price, ok bool) {
	if own != nil {
		return *own, true
	}
	if p, ok := DefaultPrices[upstream]; ok {
		return p, true
	}
	for name, p := range DefaultPrices {
		if rest, ok := strings.CutPrefix(upstream, name); ok && snapshotSuffix(rest) {
			return p, true
		}
	}
	return config.Price{}, false
}

// snapshotSuffix reports whether s is a dated snapshot's suffix: a dash
// and a date of digits and dashes ("-2024-08-06", "-0613").
func snapshotSuffix(s string) bool {
	if len(s) < 5 || s[0] != '-' || s[1] < '0' || s[1] > '9' {
		return false
	}
	for _, c := range s[1:] {
		if (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// price returns the price of the client-facing model: a configured
// model's (priceFor when New built the limiter: zero when none is known,
// as its operator chose), else, for a model the config does not name,
// which goes upstream under its own name, the default of that name; ok is
// false when the model is not configured and no default matches it.
func (l *Limiter) price(model string) (_ config.Price, ok bool) {
	if p, ok := l.prices[model]; ok {
		return p, true
	}
	return priceFor(nil, model)
}

// tokens is the usage of one upstream call.
type tokens struct {
	input, output, cached int64
}

// maxCallTokens bounds each count of one call's usage (the bound the
// usage readers apply, wire.MaxTokenCount; sums of a call's rounds may
// reach it): low enough that a call's cost, and the day's sums of many,
// stay far from int64's end.
const maxCallTokens = wire.MaxTokenCount

// maxCallCost bounds the price of one call in micro-dollars (about $1e9):
// a float that large is still exact, and an int64 sum has room for over
// eight thousand such calls (the memory store's sums saturate: addSat).
const maxCallCost = 1 << 50

// sane returns t with every count within [0, maxCallTokens]. The counts
// are the upstream's: a negative one would take the Prometheus counters
// down, which panics, and the spend of a budget with them; a huge one
// (1.5e300 reads as math.MaxInt64) would overflow the cost's conversion
// to int64, to a negative. A negative count is charged as none.
func (t tokens) sane() tokens {
	in := saneCount(t.input)
	// Cached input is part of the input: more of it than the input (an
	// upstream's error) would show cache-hit ratios over 100% in the usage
	// record, the metrics and the spans.
	return tokens{input: in, output: saneCount(t.output), cached: min(saneCount(t.cached), in)}
}

func saneCount(n int64) int64 { return min(max(n, 0), maxCallTokens) }

// cost returns the price of t in micro-dollars. A price in dollars per
// million tokens is exactly micro-dollars per token. It is never negative
// and never over maxCallCost, whatever t and p (a configured price may be
// anything a float holds).
func cost(p config.Price, t tokens) int64 {
	t = t.sane()
	cached := min(t.cached, t.input)
	c := float64(t.input-cached)*p.Input + float64(cached)*p.CachedInput + float64(t.output)*p.Output
	switch {
	case !(c > 0): // zero, negative, NaN
		return 0
	case c >= maxCallCost:
		return maxCallCost
	}
	return int64(math.Round(c))
}

// addSat returns a+b, saturated at int64's ends instead of wrapping: a sum
// of spend or usage that wrapped would turn negative (a budget spent
// becoming unspent).
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}
