package limits

import (
	"math"
	"strconv"
	"time"
)

// maxScopes bounds the scopes a Limiter keeps; past it, the counters of a
// new tenant, key and model are named again on each request.
const maxScopes = 10_000

// scopeKey names the requests of one tenant, key and model.
type scopeKey struct{ tenant, key, model string }

// scope is what the rules and budgets ask of the requests of one tenant,
// key and model during one UTC day, with every store key built: the
// per-request work is then a lookup. Immutable once built; its slices are
// only read.
type scope struct {
	day    int64
	checks []check // per matching rule its requests, tokens (costOf) and in flight; then the budgets
	tokens []int   // indexes in checks of the tokens counters
	slots  bool    // checks holds an in-flight counter
	spend  []spend // the matching budgets' spend counters
	tools  []check // the matching tool_calls_per_minute counters (cost 1)
	usage  string  // the usage record's field prefix (UnconfiguredModel's for a model the config does not name)
	// unpriced: the model is not configured, no default price matches
	// it, and a budget applies: its calls are refused (admit), not free.
	unpriced bool
	// later: the counters a later model call of an admitted request must
	// pass (AdmitRound): the tokens counters (cost 0: refused once no
	// token is left) and the budgets; nil when there are none.
	later []check
}

// spend is the spend counter of a budget in the current period.
type spend struct {
	key string
	end time.Time // when the period ends; zero = never
}

// scopeOf returns the scope of tenant, key and model at now.
func (l *Limiter) scopeOf(tenant, key, model string, now time.Time) *scope {
	day := l.dayOf(now).day
	k := scopeKey{tenant, key, model}
	if v, ok := l.scopes.Load(k); ok {
		if sc := v.(*scope); sc.day == day {
			return sc
		}
	}
	sc := l.newScope(tenant, key, model, now)
	if _, ok := l.scopes.Load(k); ok || l.nScopes.Load() < maxScopes {
		if _, loaded := l.scopes.Swap(k, sc); !loaded {
			l.nScopes.Add(1)
		}
	}
	return sc
}

func (l *Limiter) newScope(tenant, key, model string, now time.Time) *scope {
	recorded := model
	_, configured := l.prices[model]
	switch {
	case model == anyModel:
		recorded = "" // the usage record names no model, as it did
	case !configured && model != "":
		// A model the config does not name (a pass-through call's): its
		// requests are recorded under one name, as its calls are (Charge).
		recorded = UnconfiguredModel
	}
	sc := &scope{day: l.dayOf(now).day, usage: usageField(tenant, key, recorded)}
	for i := range l.rules {
		rl := &l.rules[i]
		s, ok := rl.scope(tenant, key, model)
		if !ok {
			continue
		}
		if rl.rpm > 0 {
			sc.checks = append(sc.checks, check{key: rl.keyR + s, kind: kindRate, limit: rl.rpm, cost: 1, hdr: hdrRequests, limitText: strconv.FormatInt(rl.rpm, 10)})
		}
		if rl.tpm > 0 {
			sc.tokens = append(sc.tokens, len(sc.checks))
			sc.checks = append(sc.checks, check{key: rl.keyT + s, kind: kindRate, limit: rl.tpm, hdr: hdrTokens, limitText: strconv.FormatInt(rl.tpm, 10)})
		}
		if rl.conc > 0 {
			sc.slots = true
			sc.checks = append(sc.checks, check{key: rl.keyC + s, kind: kindConcurrent, limit: rl.conc})
		}
		if rl.tools > 0 {
			sc.tools = append(sc.tools, check{key: rl.keyX + s, kind: kindRate, limit: rl.tools, cost: 1})
		}
	}
	for i := range l.budgets {
		b := &l.budgets[i]
		if b.applies(tenant, key) {
			k, end := l.periodKey(b, tenant, key, now)
			sc.checks = append(sc.checks, check{key: k, kind: kindBudget, limit: b.micro, warn: b.micro - int64(math.Round(float64(b.micro)*b.warnAt))})
			sc.spend = append(sc.spend, spend{key: k, end: end})
		}
	}
	for _, c := range sc.checks {
		if c.hdr == hdrTokens || c.kind == kindBudget {
			sc.later = append(sc.later, c)
		}
	}
	_, priced := l.price(model) // a configured model is: its operator chose its price
	// A call of anyModel under a budget is refused before (RefuseUnnamed).
	sc.unpriced = len(sc.spend) > 0 && model != "" && model != anyModel && !priced
	return sc
}
