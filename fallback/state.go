package fallback

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/pipeline"
)

// providerPolicy is the retry policy of one provider.
type providerPolicy struct {
	retries       int
	retryAfterCap time.Duration
}

// depKey names a deployment; its breaker is shared by every route using it.
type depKey struct{ provider, upstream string }

// deployment is the per-route view of one Route.Deployments entry.
type deployment struct {
	target   *pipeline.Target // points into Route.Deployments (immutable)
	br       *breaker
	weight   int
	maxTries int // 1 + the provider's retries
	raCap    time.Duration
	attempts [numOutcomes]prometheus.Counter
}

// routeState is built once per Route, on its first request: routes are
// created after the middleware (their ModelLayer contains it), so New
// cannot see them.
type routeState struct {
	deps []deployment
}

// tables holds the lookup tables of one New: provider policies (built in
// New), breakers (built in New from Options.Models, and for any deployment
// first seen on a request) and per-route states. Safe for concurrent use.
type tables struct {
	providers map[string]providerPolicy
	threshold int
	cooldown  time.Duration
	log       zerolog.Logger
	shared    *SharedBreakers // nil: breakers are this replica's own

	released sync.Once // release runs once: a second would let go of another runtime's hold
	mu       sync.RWMutex
	breakers map[depKey]*breaker
	routes   map[*pipeline.Route]*routeState
}

// breakerFor returns the deployment's breaker; mu must be held for writing.
func (t *tables) breakerFor(provider, upstream string) *breaker {
	k := depKey{provider, upstream}
	b := t.breakers[k]
	if b == nil {
		b = newBreaker(t.threshold, t.cooldown, provider, upstream, t.log)
		if s := t.shared; s != nil {
			b.share = func(open bool, until time.Time) {
				s.send(breakerEvent{open: open, until: until, provider: provider, upstream: upstream})
			}
		}
		t.breakers[k] = b
	}
	return b
}

// release drops the circuit-state series of t's breakers that no other
// tables (another runtime's, before or after a reload) holds: a deployment
// a reload removed no longer shows its last state (an open circuit that
// would keep an alert firing). The breakers themselves go with t.
func (t *tables) release() {
	t.released.Do(func() {
		t.mu.RLock()
		defer t.mu.RUnlock()
		for k := range t.breakers {
			circuitHolders.Release(k)
		}
	})
}

// applyRemote applies another replica's transition to the deployment's
// breaker; a deployment this replica does not know is ignored (what arrives
// from Redis never grows the table).
func (t *tables) applyRemote(ev breakerEvent, now time.Time) {
	t.mu.RLock()
	b := t.breakers[depKey{ev.provider, ev.upstream}]
	t.mu.RUnlock()
	if b != nil {
		b.remote(ev.open, ev.until, now)
	}
}

// route returns the state of r, building it on first use.
func (t *tables) route(r *pipeline.Route) *routeState {
	t.mu.RLock()
	rs := t.routes[r]
	t.mu.RUnlock()
	if rs != nil {
		return rs
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rs = t.routes[r]; rs != nil {
		return rs
	}
	rs = &routeState{deps: make([]deployment, len(r.Deployments))}
	for i := range r.Deployments {
		tg := &r.Deployments[i]
		p := t.providers[tg.Provider] // not configured: no retries
		rs.deps[i] = deployment{
			target:   tg,
			br:       t.breakerFor(tg.Provider, tg.Upstream),
			weight:   tg.Weight,
			maxTries: 1 + p.retries,
			raCap:    p.retryAfterCap,
			attempts: attemptCounters(r.Name, tg.Provider),
		}
	}
	t.routes[r] = rs
	return rs
}
