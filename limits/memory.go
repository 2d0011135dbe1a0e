package limits

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
)

// maxMemoryBuckets bounds the rate buckets a memory store keeps; the least
// recently used is forgotten (and starts full again if it comes back).
const maxMemoryBuckets = 100_000

// memoryStore keeps every counter in this process: a token bucket
// (golang.org/x/time/rate) per rate key, with a full minute's worth as the
// burst, slot counts, spend and usage maps. One mutex makes Take all or
// nothing, and guards the buckets' LRU too. Safe for concurrent use.
type memoryStore struct {
	mu       sync.Mutex
	buckets  *simplelru.LRU[string, *rate.Limiter]
	inFlight map[string]int64  // key → slots taken
	slots    map[slot]struct{} // the slots taken
	spend    map[string]int64
	expires  map[string]time.Time // spend and usage keys with an expiry
	usage    map[string]map[string]*usageRow
	nextExp  time.Time // earliest expiry in expires
}

var _ Store = (*memoryStore)(nil)

// slot is a request's slot in the in-flight counter key.
type slot struct{ key, id string }

// NewMemoryStore returns a Store for a single gateway.
func NewMemoryStore() Store {
	b, _ := simplelru.NewLRU[string, *rate.Limiter](maxMemoryBuckets, nil)
	return &memoryStore{
		buckets:  b,
		inFlight: map[string]int64{},
		slots:    map[slot]struct{}{},
		spend:    map[string]int64{},
		expires:  map[string]time.Time{},
		usage:    map[string]map[string]*usageRow{},
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

func (m *memoryStore) Take(_ context.Context, now time.Time, id string, checks []check, tokens int64, out *outcome) error {
	out.reset(len(checks))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	// Each rate check's bucket, looked up once: checked, taken, reported.
	var buf [8]*rate.Limiter
	buckets := buf[:0]
	for _, c := range checks {
		var l *rate.Limiter
		if c.kind == kindRate {
			l = m.bucket(c.key, c.limit)
		}
		buckets = append(buckets, l)
	}
	// Every counter is checked before any is taken: under the lock nothing
	// changes in between, so a refusal has nothing to undo.
	for i, c := range checks {
		refused := false
		switch c.kind {
		case kindRate:
			// A check that takes nothing (a later call of an admitted
			// request) still needs a unit left: a counter at exactly
			// zero is spent, not merely not overdrawn.
			if wait, ok := delay(buckets[i], now, max(c.costOf(tokens), 1)); !ok || wait > 0 {
				refused, out.retryAfter = true, wait
				if !ok {
					out.retryAfter = time.Minute
				}
			}
		case kindConcurrent:
			refused = m.inFlight[c.key] >= c.limit
		case kindBudget:
			refused = m.spend[c.key] >= c.limit
		}
		if refused {
			out.denied = i
			m.fill(out, checks, buckets, now)
			return nil
		}
	}
	for i, c := range checks {
		switch c.kind {
		case kindRate:
			buckets[i].AllowN(now, int(c.costOf(tokens)))
		case kindConcurrent:
			if _, ok := m.slots[slot{c.key, id}]; !ok {
				m.slots[slot{c.key, id}] = struct{}{}
				m.inFlight[c.key]++
			}
		}
	}
	m.fill(out, checks, buckets, now)
	return nil
}

// delay is how long until l has cost tokens at now, computed as
// l.ReserveN(now, cost) does but without taking them; ok is false when
// cost is more than l ever holds.
func delay(l *rate.Limiter, now time.Time, cost int64) (wait time.Duration, ok bool) {
	if cost > int64(l.Burst()) {
		return 0, false
	}
	if missing := float64(cost) - l.TokensAt(now); missing > 0 {
		wait = time.Duration(float64(time.Second) * (missing / float64(l.Limit())))
	}
	return wait, true
}

// fill reports what is left of every check; buckets are the rate checks'.
func (m *memoryStore) fill(out *outcome, checks []check, buckets []*rate.Limiter, now time.Time) {
	for i, c := range checks {
		switch c.kind {
		case kindRate:
			l := buckets[i]
			tokens := l.TokensAt(now)
			out.remaining[i] = max(0, int64(math.Floor(tokens)))
			if missing := float64(c.limit) - tokens; missing > 0 {
				out.resetMS[i] = int64(time.Duration(missing/float64(l.Limit())*float64(time.Second)).Round(time.Millisecond) / time.Millisecond)
			}
		case kindConcurrent:
			out.remaining[i] = max(0, c.limit-m.inFlight[c.key])
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
				// Taken without a check: the tokens were already used,
				// all of them, however many minutes of the rule that is
				// (the bucket goes into debt, paid back at its rate). A
				// bucket takes at most its burst at once, so the burst is
				// raised for this charge alone (under m.mu, as every use
				// of the buckets is).
				l, n := m.bucket(a.key, a.limit), int(min(a.rateCharge(), math.MaxInt32))
				if burst := l.Burst(); n > burst {
					l.SetBurstAt(now, n)
					l.ReserveN(now, n)
					l.SetBurstAt(now, burst)
				} else {
					l.ReserveN(now, n)
				}
			}
		case kindBudget:
			m.spend[a.key] = addSat(m.spend[a.key], a.n)
		case kindRelease:
			if _, ok := m.slots[slot{a.key, a.field}]; ok {
				delete(m.slots, slot{a.key, a.field})
				if m.inFlight[a.key]--; m.inFlight[a.key] <= 0 {
					delete(m.inFlight, a.key)
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
				row[i] = addSat(row[i], n)
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
