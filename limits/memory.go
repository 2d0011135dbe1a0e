package limits

import (
	"context"
	"math"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// maxMemoryBuckets bounds the rate buckets a memory store keeps; the least
// recently used is forgotten (and starts full again if it comes back).
const maxMemoryBuckets = 100_000

// memoryStore keeps every counter in this process: a token bucket
// (golang.org/x/time/rate) per rate key, with a full minute's worth as the
// burst, slot counts, spend and usage maps. One mutex makes Take all or
// nothing. Safe for concurrent use.
type memoryStore struct {
	mu      sync.Mutex
	buckets *lru.Cache[string, *rate.Limiter]
	slots   map[string]map[string]struct{} // key → request ids in flight
	spend   map[string]int64
	expires map[string]time.Time // spend and usage keys with an expiry
	usage   map[string]map[string]*usageRow
	nextExp time.Time // earliest expiry in expires
}

var _ Store = (*memoryStore)(nil)

// NewMemoryStore returns a Store for a single gateway.
func NewMemoryStore() Store {
	b, _ := lru.New[string, *rate.Limiter](maxMemoryBuckets)
	return &memoryStore{
		buckets: b,
		slots:   map[string]map[string]struct{}{},
		spend:   map[string]int64{},
		expires: map[string]time.Time{},
		usage:   map[string]map[string]*usageRow{},
	}
}

func (m *memoryStore) bucket(key string, perMinute int64) *rate.Limiter {
	if l, ok := m.buckets.Get(key); ok {
		return l // the key names the limit (Limiter.New)
	}
	l := rate.NewLimiter(rate.Limit(float64(perMinute)/60), int(min(perMinute, math.MaxInt32)))
	m.buckets.Add(key, l)
	return l
}

func (m *memoryStore) Take(_ context.Context, now time.Time, id string, checks []check) (outcome, error) {
	out := outcome{denied: -1, remaining: make([]int64, len(checks)), reset: make([]time.Duration, len(checks))}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	reservations := make([]*rate.Reservation, len(checks))
	undo := func() {
		for _, r := range reservations {
			if r != nil {
				r.CancelAt(now)
			}
		}
	}
	for i, c := range checks {
		switch c.kind {
		case kindRate:
			l := m.bucket(c.key, c.limit)
			r := l.ReserveN(now, int(c.cost))
			if !r.OK() || r.DelayFrom(now) > 0 {
				if r.OK() {
					out.retryAfter = r.DelayFrom(now)
					r.CancelAt(now)
				} else {
					out.retryAfter = time.Minute
				}
				out.denied = i
				undo()
				m.fill(&out, checks, now)
				return out, nil
			}
			reservations[i] = r
		case kindConcurrent:
			if int64(len(m.slots[c.key])) >= c.limit {
				out.denied = i
				undo()
				m.fill(&out, checks, now)
				return out, nil
			}
		case kindBudget:
			if m.spend[c.key] >= c.limit {
				out.denied = i
				undo()
				m.fill(&out, checks, now)
				return out, nil
			}
		}
	}
	for _, c := range checks {
		if c.kind == kindConcurrent {
			s := m.slots[c.key]
			if s == nil {
				s = map[string]struct{}{}
				m.slots[c.key] = s
			}
			s[id] = struct{}{}
		}
	}
	m.fill(&out, checks, now)
	return out, nil
}

// fill reports what is left of every check.
func (m *memoryStore) fill(out *outcome, checks []check, now time.Time) {
	for i, c := range checks {
		switch c.kind {
		case kindRate:
			l := m.bucket(c.key, c.limit)
			tokens := l.TokensAt(now)
			out.remaining[i] = max(0, int64(math.Floor(tokens)))
			if missing := float64(c.limit) - tokens; missing > 0 {
				out.reset[i] = time.Duration(missing / float64(l.Limit()) * float64(time.Second))
			}
		case kindConcurrent:
			out.remaining[i] = max(0, c.limit-int64(len(m.slots[c.key])))
		case kindBudget:
			out.remaining[i] = max(0, c.limit-m.spend[c.key])
		}
	}
}

func (m *memoryStore) Add(_ context.Context, now time.Time, adds []addition) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	for _, a := range adds {
		switch a.kind {
		case kindRate:
			if a.n > 0 {
				// Taken without a check: the tokens were already used.
				m.bucket(a.key, a.limit).ReserveN(now, int(min(a.n, a.limit)))
			}
		case kindBudget:
			m.spend[a.key] += a.n
		case kindRelease:
			if ids := m.slots[a.key]; ids != nil {
				delete(ids, a.field)
				if len(ids) == 0 {
					delete(m.slots, a.key)
				}
			}
		case kindUsage:
			u := m.usage[a.key]
			if u == nil {
				u = map[string]*usageRow{}
				m.usage[a.key] = u
			}
			row := u[a.field]
			if row == nil {
				row = new(usageRow)
				u[a.field] = row
			}
			for i, n := range a.row {
				row[i] += n
			}
		}
		if !a.until.IsZero() {
			if _, ok := m.expires[a.key]; !ok && (m.nextExp.IsZero() || a.until.Before(m.nextExp)) {
				m.nextExp = a.until
			}
			m.expires[a.key] = a.until
		}
	}
	return nil
}

// expire drops spend and usage whose period is over.
func (m *memoryStore) expire(now time.Time) {
	if m.nextExp.IsZero() || now.Before(m.nextExp) {
		return
	}
	m.nextExp = time.Time{}
	for k, t := range m.expires {
		if now.After(t) {
			delete(m.spend, k)
			delete(m.usage, k)
			delete(m.expires, k)
		} else if m.nextExp.IsZero() || t.Before(m.nextExp) {
			m.nextExp = t
		}
	}
}

func (m *memoryStore) Usage(_ context.Context, keys []string) ([]map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]map[string]int64, len(keys))
	for i, k := range keys {
		out[i] = map[string]int64{}
		for f, row := range m.usage[k] {
			for j, v := range row {
				out[i][f+metricNames[j]] = v
			}
		}
	}
	return out, nil
}
