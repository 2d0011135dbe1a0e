package caching

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testredis"

	"github.com/redis/go-redis/v9"
)

func TestRedisStore(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	client := srv.Client(t)
	s := NewRedisStore(client, "test:", 500*time.Millisecond)
	ctx := context.Background()

	if _, ok, err := s.Get(ctx, "absent"); ok || err != nil {
		t.Fatalf("absent: ok=%v err=%v", ok, err)
	}
	if err := s.Set(ctx, "k", []byte("v1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get(ctx, "k"); !ok || err != nil || string(v) != "v1" {
		t.Fatalf("get: %q %v %v", v, ok, err)
	}
	if ttl := client.TTL(ctx, "test:k").Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("ttl in redis = %v, want the store's prefix and ttl", ttl)
	}
	if err := s.Set(ctx, "short", []byte("v"), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if _, ok, _ := s.Get(ctx, "short"); ok {
		t.Error("entry outlived its ttl in redis")
	}
}

// TestRedisResponseCacheSurvivesOutage kills redis mid-test: the middleware
// keeps answering (bypass); after a restart on the same port caching resumes.
func TestRedisResponseCacheSurvivesOutage(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	client := srv.Client(t)
	store := NewRedisStore(client, "gw:", 300*time.Millisecond)
	up := &upstream{content: "Hello there"}
	h, _ := newCache(up, newClock(), func(o *Options) { o.Store = store })

	ask := func(step string, wantHeader string, wantCalls int64) {
		t.Helper()
		r := newReq(det, "acme")
		resp, err := h.Chat(context.Background(), r)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if c, _, _, _ := checkCompletion(t, resp.Body); c != "Hello there" {
			t.Fatalf("%s: content %q", step, c)
		}
		if got := r.Meta.Get(HeaderCache); got != wantHeader {
			t.Errorf("%s: %s = %q, want %q", step, HeaderCache, got, wantHeader)
		}
		if got := up.calls.Load(); got != wantCalls {
			t.Errorf("%s: upstream calls = %d, want %d", step, got, wantCalls)
		}
	}
	ask("cold", "miss", 1)
	ask("warm", "hit", 1)

	srv.Stop()
	start := time.Now()
	ask("redis down", "bypass", 2)
	ask("redis still down", "bypass", 3)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("two requests with redis down took %v: the store deadline is not applied", d)
	}

	srv.Start() // empty: the old process kept its data in memory only
	ok := false
	for i := 0; i < 50 && !ok; i++ { // the pool reconnects on demand
		ok = client.Ping(context.Background()).Err() == nil
		if !ok {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !ok {
		t.Fatal("redis did not come back")
	}
	ask("after restart", "miss", 4)
	ask("cached again", "hit", 4)
}

func ExampleNewRedisStore() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store := NewRedisStore(client, "gw:cache:", 200*time.Millisecond)
	fmt.Printf("%T\n", store)
	// Output: *caching.RedisStore
}
