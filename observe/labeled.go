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
