package responses

import (
	"container/heap"
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

var _ KV = (*MemoryKV)(nil)

// entryOverhead approximates the bookkeeping bytes of one entry (list
// element, map slot, the entry struct), so that many tiny entries (owner
// records) cannot exceed the bound by much.
const entryOverhead = 96

// MemoryKV is the in-process KV of stored responses and of provider
// response owners: bounded by bytes (keys, values and entryOverhead each),
// with a TTL per entry. Over its bound it evicts from the tenant that
// holds the most bytes, that tenant's least recently used entry first, so
// that a tenant storing many large responses evicts its own and not every
// other tenant's. The tenant is the one the key names (Store's and
// Owners' keys: "<kind>:" + tenant + NUL + id). Each operation costs
// O(log tenants) besides the evictions it causes.
//
// Get hands out the stored slice: read it, never modify it. Set keeps val.
// Safe for concurrent use.
type MemoryKV struct {
	mu       sync.Mutex
	tenants  map[string]*tenantEntries
	heavy    byBytes // every tenant holding an entry, the most bytes first
	bytes    int64
	maxBytes int64
	now      func() time.Time
}

// tenantEntries is one tenant's entries, least recently used last.
type tenantEntries struct {
	name  string
	lru   *simplelru.LRU[string, memEntry]
	bytes int64
	index int // in MemoryKV.heavy
}

type memEntry struct {
	val     []byte
	expires time.Time // zero = never
}

func entrySize(key string, val []byte) int64 {
	return int64(len(key) + len(val) + entryOverhead)
}

// NewMemoryKV returns an empty MemoryKV holding at most maxBytes
// (responses.max_bytes); a larger value is not stored.
func NewMemoryKV(maxBytes int64) *MemoryKV {
	return &MemoryKV{tenants: map[string]*tenantEntries{}, maxBytes: maxBytes, now: time.Now}
}

// keyTenant is the tenant a key names: between its kind's colon and the
// NUL before the id.
func keyTenant(key string) string {
	_, rest, _ := strings.Cut(key, ":")
	t, _, _ := strings.Cut(rest, "\x00")
	return t
}

// Get returns the value stored under key unless it expired.
func (s *MemoryKV) Get(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants[keyTenant(key)]
	if t == nil {
		return nil, false, nil
	}
	e, ok := t.lru.Get(key)
	if !ok {
		return nil, false, nil
	}
	if !e.expires.IsZero() && !s.now().Before(e.expires) {
		t.lru.Remove(key)
		s.settle(t)
		return nil, false, nil
	}
	return e.val, true, nil
}

// ErrTooLarge is MemoryKV.Set's answer to a value larger than its whole
// bound: nothing is stored (and any value the key held is gone).
var ErrTooLarge = errors.New("responses: value larger than the memory store's bound")

// Set stores val under key for ttl (<= 0: no expiry), then evicts until
// the total fits in the bound: each time the least recently used entry of
// the tenant holding the most bytes, never the entry just stored (when it
// is all that tenant holds, the next heaviest tenant's goes instead). A
// value larger than the bound is not stored: ErrTooLarge.
func (s *MemoryKV) Set(_ context.Context, key string, val []byte, ttl time.Duration) error {
	size := entrySize(key, val)
	name := keyTenant(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants[name]
	if t != nil && t.lru.Remove(key) {
		s.settle(t)
		t = s.tenants[name]
	}
	if size > s.maxBytes {
		return ErrTooLarge
	}
	if t == nil {
		t = s.newTenant(name)
	}
	var exp time.Time
	if ttl > 0 {
		exp = s.now().Add(ttl)
	}
	t.lru.Add(key, memEntry{val: val, expires: exp})
	t.bytes += size
	s.bytes += size
	heap.Fix(&s.heavy, t.index)
	for s.bytes > s.maxBytes {
		h := s.heaviestBut(t)
		h.lru.RemoveOldest()
		s.settle(h)
	}
	return nil
}

// Resize sets the bound to maxBytes and evicts, as Set does, until the
// entries held fit in it: a reload that changes responses.max_bytes keeps
// the store (gateway.Build), smaller or larger.
func (s *MemoryKV) Resize(maxBytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxBytes = maxBytes
	for s.bytes > s.maxBytes && len(s.heavy) > 0 {
		h := s.heavy[0]
		h.lru.RemoveOldest()
		s.settle(h)
	}
}

// heaviestBut returns the tenant to evict from while just is over the
// bound: the one holding the most bytes, unless that is just holding only
// the entry just stored (its least recently used), then the next heaviest:
// one of the heap's root's children. There is one, as the entry alone
// fits in the bound.
func (s *MemoryKV) heaviestBut(just *tenantEntries) *tenantEntries {
	h := s.heavy[0]
	if h != just || h.lru.Len() > 1 {
		return h
	}
	next := s.heavy[1]
	if len(s.heavy) > 2 && s.heavy.Less(2, 1) {
		next = s.heavy[2]
	}
	return next
}

// Delete removes key; a missing key is not an error.
func (s *MemoryKV) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tenants[keyTenant(key)]; t != nil && t.lru.Remove(key) {
		s.settle(t)
	}
	return nil
}

// Bytes returns the accounted size of the entries held now.
func (s *MemoryKV) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// newTenant adds an empty tenant named name.
func (s *MemoryKV) newTenant(name string) *tenantEntries {
	t := &tenantEntries{name: name}
	// The count bound is irrelevant: the byte bound evicts first.
	t.lru, _ = simplelru.NewLRU[string, memEntry](1<<31-1, func(k string, e memEntry) {
		n := entrySize(k, e.val)
		t.bytes -= n
		s.bytes -= n
	})
	s.tenants[name] = t
	heap.Push(&s.heavy, t)
	return t
}

// settle restores t's place among the tenants after it lost entries, and
// forgets it once it holds none: memory follows the tenants that store.
func (s *MemoryKV) settle(t *tenantEntries) {
	if t.lru.Len() > 0 {
		heap.Fix(&s.heavy, t.index)
		return
	}
	heap.Remove(&s.heavy, t.index)
	delete(s.tenants, t.name)
}

// byBytes is a heap of tenants, the one holding the most bytes first
// (container/heap).
type byBytes []*tenantEntries

func (h byBytes) Len() int           { return len(h) }
func (h byBytes) Less(i, j int) bool { return h[i].bytes > h[j].bytes }
func (h byBytes) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *byBytes) Push(x any) {
	t := x.(*tenantEntries)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *byBytes) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
