package caching

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Store keeps cache entries by key. Implementations are safe for concurrent
// use.
//
// Get returns (nil, false, nil) on a miss. The returned slice must not be
// modified by the caller (a memory store hands out its own copy). Set keeps
// val: the caller must not modify it afterwards. A ttl <= 0 means no expiry.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// entryOverhead approximates the bookkeeping bytes of one memory entry (list
// element, map slot, the memEntry struct) so that many tiny entries cannot
// exceed the bound by much.
const entryOverhead = 96

// MemoryStore is an in-process Store bounded by bytes (keys + values +
// a fixed per-entry overhead) with a TTL per entry, evicting the least
// recently used entries first. Safe for concurrent use.
//
// It is built on hashicorp/golang-lru/v2's simplelru (already a dependency):
// the LRU keeps the order, and the byte bound is enforced here by evicting the
// oldest entries until the total fits. otter would give a weighted bound too,
// but it is a new dependency for ~40 lines of code. Expired entries are
// dropped lazily, on Get and by LRU pressure.
type MemoryStore struct {
	mu       sync.Mutex
	lru      *simplelru.LRU[string, memEntry]
	bytes    int64
	maxBytes int64
	now      func() time.Time
}

type memEntry struct {
	val     []byte
	expires time.Time // zero = never
}

func entrySize(key string, val []byte) int64 {
	return int64(len(key) + len(val) + entryOverhead)
}

// NewMemoryStore returns an empty MemoryStore holding at most maxBytes
// (values larger than the bound are not stored): middleware.cache.max_bytes,
// defaulted by config.
func NewMemoryStore(maxBytes int64) *MemoryStore {
	s := &MemoryStore{maxBytes: maxBytes, now: time.Now}
	// The count bound is irrelevant: the byte bound evicts first.
	s.lru, _ = simplelru.NewLRU[string, memEntry](1<<31-1, func(k string, e memEntry) {
		s.bytes -= entrySize(k, e.val)
	})
	return s
}

// Get returns the value stored under key unless it expired. The slice is
// shared with the store: read it, never modify it.
func (s *MemoryStore) Get(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.lru.Get(key)
	if !ok {
		return nil, false, nil
	}
	if !e.expires.IsZero() && !s.now().Before(e.expires) {
		s.lru.Remove(key)
		return nil, false, nil
	}
	return e.val, true, nil
}

// Set stores val under key for ttl, evicting least recently used entries
// until the total fits in the bound. The store keeps val.
func (s *MemoryStore) Set(_ context.Context, key string, val []byte, ttl time.Duration) error {
	size := entrySize(key, val)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lru.Remove(key)
	if size > s.maxBytes {
		return nil
	}
	var exp time.Time
	if ttl > 0 {
		exp = s.now().Add(ttl)
	}
	for s.bytes+size > s.maxBytes {
		if _, _, ok := s.lru.RemoveOldest(); !ok {
			break
		}
	}
	s.lru.Add(key, memEntry{val: val, expires: exp})
	s.bytes += size
	return nil
}

// Bytes returns the accounted size of the entries held now.
func (s *MemoryStore) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Len returns the number of entries held now (expired ones included until
// they are dropped).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

// Delete removes key; a missing key is not an error.
func (s *MemoryStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lru.Remove(key)
	return nil
}
