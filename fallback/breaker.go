package fallback

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// The breaker is written here rather than taken from sony/gobreaker/v2
// because gobreaker reads time.Now directly (no injectable clock, so the
// cooldown cannot be tested without sleeping) and does not expose when an
// open circuit will half-open, which the 503's retry-after needs. What is
// needed is small: consecutive failures, a cooldown, one half-open probe.

// circuit is the state of one breaker; the values are the gauge's.
type circuit int

const (
	circuitClosed   circuit = 0
	circuitOpen     circuit = 1
	circuitHalfOpen circuit = 2
)

var circuitNames = [...]string{"closed", "open", "half-open"}

// breaker guards one deployment (provider + upstream model). After
// threshold consecutive retryable failures it opens for cooldown; then one
// request is let through as a probe: success closes it, failure reopens it.
// Safe for concurrent use; shared by every route that uses the deployment.
type breaker struct {
	threshold int
	cooldown  time.Duration
	gauge     prometheus.Gauge
	log       zerolog.Logger
	// share, when set, is told every transition this replica decides (not
	// those applied from other replicas); it must not block.
	share func(open bool, until time.Time)

	mu        sync.Mutex
	state     circuit
	failures  int       // consecutive, while closed
	openUntil time.Time // while open
	probing   bool      // a half-open probe is in flight
}

func newBreaker(threshold int, cooldown time.Duration, provider, upstream string, log zerolog.Logger) *breaker {
	b := &breaker{
		threshold: threshold,
		cooldown:  cooldown,
		gauge:     holdCircuit(depKey{provider, upstream}),
		log:       log.With().Str("provider", provider).Str("upstream", upstream).Logger(),
	}
	b.gauge.Set(float64(circuitClosed))
	return b
}

// available reports whether allow would let a request through now, without
// claiming anything.
func (b *breaker) available(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case circuitClosed:
		return true
	case circuitOpen:
		return !now.Before(b.openUntil)
	default:
		return !b.probing
	}
}

// allow admits a request. probe is true when the request is the half-open
// probe; its caller must report it with done, whatever happens.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case circuitClosed:
		return true, false
	case circuitOpen:
		if now.Before(b.openUntil) {
			return false, false
		}
		b.setState(circuitHalfOpen)
	}
	if b.probing {
		return false, false
	}
	b.probing = true
	return true, true
}

// breakerResult is what an admitted request reports back.
type breakerResult int

const (
	resultSuccess breakerResult = iota // the deployment answered (a 4xx answer included)
	resultFailure                      // a retryable failure
	resultNeutral                      // says nothing about the deployment (client left, deadline)
)

// done records the outcome of a request admitted by allow.
func (b *breaker) done(now time.Time, probe bool, r breakerResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		if b.state != circuitHalfOpen {
			return
		}
		switch r {
		case resultSuccess:
			b.failures = 0
			b.setState(circuitClosed)
			b.shareState()
		case resultFailure:
			b.openUntil = now.Add(b.cooldown)
			b.setState(circuitOpen)
			b.shareState()
		}
		return
	}
	if b.state != circuitClosed {
		return // a request admitted before the circuit opened, ending late
	}
	switch r {
	case resultSuccess:
		b.failures = 0
	case resultFailure:
		b.failures++
		if b.failures >= b.threshold {
			b.failures = 0
			b.openUntil = now.Add(b.cooldown)
			b.setState(circuitOpen)
			b.shareState()
		}
	}
}

// remote applies another replica's transition. An opening opens this
// circuit until the same time (or keeps a later one); a closing (that
// replica's probe succeeded) closes a circuit that is open here, so the
// deployment is used again without waiting for a probe of its own.
func (b *breaker) remote(open bool, until, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case open && until.After(now) && (b.state != circuitOpen || until.After(b.openUntil)):
		b.failures = 0
		b.openUntil = until
		b.setState(circuitOpen)
	case !open && b.state == circuitOpen:
		b.failures = 0
		b.setState(circuitClosed)
	}
}

// shareState tells share the state just decided; mu is held.
func (b *breaker) shareState() {
	if b.share != nil {
		b.share(b.state == circuitOpen, b.openUntil)
	}
}

// retryIn is how long until the breaker may admit a request again.
func (b *breaker) retryIn(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case circuitOpen:
		if d := b.openUntil.Sub(now); d > 0 {
			return d
		}
		return 0
	case circuitHalfOpen:
		return time.Second // a probe is in flight; it settles soon
	}
	return 0
}

// setState is called with mu held.
func (b *breaker) setState(s circuit) {
	if b.state == s {
		return
	}
	b.state = s
	b.gauge.Set(float64(s))
	ev := b.log.Info()
	if s == circuitOpen {
		ev = b.log.Warn()
	}
	ev.Str("circuit", circuitNames[s]).Msg("circuit breaker state changed")
}
