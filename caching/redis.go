package caching

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/internal/redisread"
	"github.com/llmgw/gateway/observe"
)

// DefaultMaxValueBytes is the largest value a RedisStore reads back unless
// MaxValueBytes says otherwise: the default of middleware.cache.max_bytes,
// so that a value the memory store would keep is never refused, and above
// anything the gateway writes by default (a response cache entry is at most
// a provider's max_response_bytes, 32 MiB by default, plus a 9-byte header).
const DefaultMaxValueBytes = 64 << 20

// RedisStore is a Store in Redis, shared by the replicas of a gateway. Every
// call runs under its own deadline (timeout), so a stalled Redis costs a
// request at most that long. Safe for concurrent use.
//
// Reads are bounded: a value longer than the bound is a miss, refused by
// Redis before it is sent, so a shared or compromised Redis cannot make the
// gateway allocate whatever length its reply declares.
type RedisStore struct {
	client   redis.UniversalClient
	prefix   string
	timeout  time.Duration
	maxValue int
}

// RedisOption configures a RedisStore.
type RedisOption func(*RedisStore)

// MaxValueBytes bounds the values Get reads back (n <= 0:
// DefaultMaxValueBytes).
func MaxValueBytes(n int) RedisOption {
	return func(s *RedisStore) {
		if n > 0 {
			s.maxValue = n
		}
	}
}

// NewRedisStore returns a Store over client, prefixing every key with prefix
// (e.g. "gw:cache:"). timeout bounds each command (redis.timeout, defaulted
// by config). The caller owns client and closes it.
func NewRedisStore(client redis.UniversalClient, prefix string, timeout time.Duration, opts ...RedisOption) *RedisStore {
	s := &RedisStore{client: client, prefix: prefix, timeout: timeout, maxValue: DefaultMaxValueBytes}
	for _, o := range opts {
		o(s)
	}
	return s
}

var oversizedReads = observe.Factory.NewCounter(prometheus.CounterOpts{
	Name: "gateway_redis_oversized_values_total",
	Help: "Values in Redis larger than the read bound (cache entries, stored responses), treated as misses and never read.",
})

// Get returns a fresh copy of the value under key, owned by the caller. A
// value over the store's bound (MaxValueBytes) is a miss.
func (s *RedisStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	return s.GetMax(ctx, key, s.maxValue)
}

// GetMax is Get with limit as the bound (limit <= 0: the store's own).
func (s *RedisStore) GetMax(ctx context.Context, key string, limit int) ([]byte, bool, error) {
	if limit <= 0 {
		limit = s.maxValue
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := redisread.Script.Run(ctx, s.client, []string{s.prefix + key}, limit).Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	b, oversized, err := redisread.Value(v)
	if oversized {
		oversizedReads.Inc()
	}
	return b, err == nil && !oversized, err
}

// Set stores val under key with ttl (<= 0: no expiry). val is not retained.
func (s *RedisStore) Set(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if ttl < 0 {
		ttl = 0
	}
	return s.client.Set(ctx, s.prefix+key, val, ttl).Err()
}

// Delete removes key; a missing key is not an error.
func (s *RedisStore) Delete(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.client.Del(ctx, s.prefix+key).Err()
}

// SetMany stores val under each of keys with ttl (<= 0: no expiry), in
// one round trip. val is not retained.
func (s *RedisStore) SetMany(ctx context.Context, keys []string, val []byte, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if ttl < 0 {
		ttl = 0
	}
	pipe := s.client.Pipeline()
	for _, k := range keys {
		pipe.Set(ctx, s.prefix+k, val, ttl)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// ExistMany reports which of keys hold a value, in one round trip, without
// reading the values.
func (s *RedisStore) ExistMany(ctx context.Context, keys []string) ([]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Exists(ctx, s.prefix+k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	there := make([]bool, len(keys))
	for i, c := range cmds {
		there[i] = c.Val() > 0
	}
	return there, nil
}
