package caching

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore is a Store in Redis, shared by the replicas of a gateway. Every
// call runs under its own deadline (timeout), so a stalled Redis costs a
// request at most that long. Safe for concurrent use.
type RedisStore struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
}

// NewRedisStore returns a Store over client, prefixing every key with prefix
// (e.g. "gw:cache:"). timeout bounds each command (redis.timeout, defaulted
// by config). The caller owns client and closes it.
func NewRedisStore(client redis.UniversalClient, prefix string, timeout time.Duration) *RedisStore {
	return &RedisStore{client: client, prefix: prefix, timeout: timeout}
}

// Get returns a fresh copy of the value under key, owned by the caller.
func (s *RedisStore) Get(ctx context.Context, key string) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.client.Get(ctx, s.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
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
