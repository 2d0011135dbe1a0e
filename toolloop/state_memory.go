package toolloop

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// MemoryState is the default StateStore: in-process, bounded by entries and
// bytes, entries expire ttl after they were saved. When a bound is reached
// the oldest entries go first. Safe for concurrent use.
type MemoryState struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int

	mu    sync.Mutex
	order *list.List // of *memEntry, oldest first (save order; expiry order too while ttl stays as it is)
	byKey map[string]*list.Element
	bytes int
	now   func() time.Time
}

type memEntry struct {
	key     string
	turn    *HiddenTurn
	expires time.Time
	size    int
}

var (
	_ StateStore   = (*MemoryState)(nil)
	_ StateClaimer = (*MemoryState)(nil)
)

// NewMemoryState returns a store keeping at most maxEntries turns and
// maxBytes bytes, each for ttl (tool_loop.state_ttl, state_max_entries,
// state_max_bytes, defaulted by config).
func NewMemoryState(ttl time.Duration, maxEntries, maxBytes int) *MemoryState {
	return &MemoryState{ttl: ttl, maxEntries: maxEntries, maxBytes: maxBytes,
		order: list.New(), byKey: map[string]*list.Element{}, now: time.Now}
}

// Save keeps t under key, replacing an older turn with the same key.
func (m *MemoryState) Save(_ context.Context, key string, t *HiddenTurn) error {
	e := &memEntry{key: key, turn: t, size: t.size() + len(key) + 64}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saveLocked(e)
	return nil
}

// saveLocked keeps e, replacing an older entry with its key, and drops the
// oldest entries past the bounds or expired. m.mu is held.
func (m *MemoryState) saveLocked(e *memEntry) {
	key := e.key
	now := m.now()
	e.expires = now.Add(m.ttl)
	if el, ok := m.byKey[key]; ok {
		m.remove(el)
	}
	m.byKey[key] = m.order.PushBack(e)
	m.bytes += e.size
	m.trim(now)
}

// trim drops the oldest entries while the store is over a bound or the
// oldest has expired. m.mu is held.
func (m *MemoryState) trim(now time.Time) {
	for m.order.Len() > 0 {
		front := m.order.Front()
		fe := front.Value.(*memEntry)
		if m.order.Len() <= m.maxEntries && m.bytes <= m.maxBytes && now.Before(fe.expires) {
			break
		}
		m.remove(front)
	}
}

// Resize sets the store's TTL and bounds and drops the oldest entries
// until the rest fit: a reload that changes tool_loop.state_ttl,
// state_max_entries or state_max_bytes keeps the store (gateway.Build). A
// new TTL applies to the entries saved from now on; those kept expire when
// they were to. Expiry is then no longer save order, so an expired entry
// may stay behind a live one until it is the oldest or a bound drops it:
// within the bounds, and never loaded (Load and Claim check every entry's
// expiry).
func (m *MemoryState) Resize(ttl time.Duration, maxEntries, maxBytes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ttl, m.maxEntries, m.maxBytes = ttl, maxEntries, maxBytes
	m.trim(m.now())
}

// Claim reports whether key was not kept yet, and keeps it (an empty turn,
// under the store's TTL and bounds) when so: StateClaimer.
func (m *MemoryState) Claim(_ context.Context, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[key]; ok && m.now().Before(el.Value.(*memEntry).expires) {
		return false, nil
	}
	t := &HiddenTurn{Saved: m.now()} // the claim's time (ClaimedAt)
	m.saveLocked(&memEntry{key: key, turn: t, size: t.size() + len(key) + 64})
	return true, nil
}

// ClaimedAt returns when key was claimed (ClaimAger).
func (m *MemoryState) ClaimedAt(_ context.Context, key string) (time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[key]; ok && m.now().Before(el.Value.(*memEntry).expires) {
		if t := el.Value.(*memEntry).turn; !t.Saved.IsZero() {
			return t.Saved, true, nil
		}
	}
	return time.Time{}, false, nil
}

// Load returns the live turns for keys.
func (m *MemoryState) Load(_ context.Context, keys []string) ([]*HiddenTurn, error) {
	out := make([]*HiddenTurn, len(keys))
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for i, k := range keys {
		el, ok := m.byKey[k]
		if !ok {
			continue
		}
		e := el.Value.(*memEntry)
		if !now.Before(e.expires) {
			m.remove(el)
			continue
		}
		out[i] = e.turn
	}
	return out, nil
}

// Len returns the number of turns kept (expired ones not yet dropped
// included) and their approximate size in bytes.
func (m *MemoryState) Len() (entries, bytes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len(), m.bytes
}

func (m *MemoryState) remove(el *list.Element) {
	e := m.order.Remove(el).(*memEntry)
	delete(m.byKey, e.key)
	m.bytes -= e.size
}
