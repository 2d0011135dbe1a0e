package observe

import "sync"

// Labeled keeps the children of a metric vector by their label values, so
// that a hot path resolves a label set once, not on every use (a vector's
// WithLabelValues validates, hashes and looks up its values each time). K
// is the label values (a string, or a struct of them); their number of
// distinct values must be bounded by configuration (route, model, provider
// names, status codes), never by what clients send. Safe for concurrent
// use; the zero value is not ready: build it with NewLabeled.
type Labeled[K comparable, M any] struct {
	m       sync.Map // K → M
	resolve func(K) M
}

// NewLabeled returns a Labeled that resolves label values it has not seen
// with resolve (typically the vector's WithLabelValues).
func NewLabeled[K comparable, M any](resolve func(K) M) *Labeled[K, M] {
	return &Labeled[K, M]{resolve: resolve}
}

// Get returns the child for k.
func (l *Labeled[K, M]) Get(k K) M {
	if v, ok := l.m.Load(k); ok {
		return v.(M)
	}
	v, _ := l.m.LoadOrStore(k, l.resolve(k))
	return v.(M)
}

// Held counts, per label set, the owners of series whose values only an
// owner sets (the gauge of a configured server or deployment). Owners are
// per runtime, and after a reload the new runtime's and the old one's live
// side by side for a while: when the last owner of a label set lets go,
// drop removes its series (the vector's DeleteLabelValues), so that a
// server or deployment a reload removed does not show its last value for
// good. Safe for concurrent use; build it with NewHeld.
type Held[K comparable] struct {
	mu   sync.Mutex
	n    map[K]int
	drop func(K)
}

// NewHeld returns a Held that removes a label set's series with drop.
func NewHeld[K comparable](drop func(K)) *Held[K] {
	return &Held[K]{n: map[K]int{}, drop: drop}
}

// Hold adds an owner of k's series.
func (h *Held[K]) Hold(k K) {
	h.mu.Lock()
	h.n[k]++
	h.mu.Unlock()
}

// Release lets go of one Hold of k; the last removes k's series.
func (h *Held[K]) Release(k K) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[k]--; h.n[k] <= 0 {
		delete(h.n, k)
		h.drop(k)
	}
}
