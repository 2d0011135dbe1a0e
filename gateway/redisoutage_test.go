package gateway

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
)

// silentRedis accepts connections and never answers (a stopped process, a
// full network buffer); it counts the connections it accepted.
func silentRedis(t *testing.T) (addr string, dials *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dials = new(atomic.Int64)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String(), dials
}

// A Redis that lets a call run out of its deadline is not asked again for
// a pause: the calls meanwhile fail at once; after it, of the calls made
// together one asks and the others skip until it knows.
func TestRedisOutageSkipsASilentServer(t *testing.T) {
	t.Parallel()
	addr, dials := silentRedis(t)
	rdb, err := redisClient(&config.Redis{Addr: addr, Timeout: config.Duration(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if err := rdb.Get(ctx, "k").Err(); err == nil || errors.Is(err, errOutage) {
		t.Fatalf("first call: %v, want its timeout", err)
	}
	sent := dials.Load()
	start := time.Now()
	for range 5 {
		if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, errOutage) {
			t.Fatalf("a call during the pause: %v, want skipped", err)
		}
		pipe := rdb.Pipeline()
		get := pipe.Get(ctx, "k")
		if _, err := pipe.Exec(ctx); !errors.Is(err, errOutage) || !errors.Is(get.Err(), errOutage) {
			t.Fatalf("a pipeline during the pause: %v / %v, want skipped", err, get.Err())
		}
	}
	if d := time.Since(start); d > outagePause/2 || dials.Load() != sent {
		t.Fatalf("skipped calls took %v and dialed %d times", d, dials.Load()-sent)
	}
	time.Sleep(outagePause)
	var wg sync.WaitGroup
	var skipped atomic.Int64
	for range 8 {
		wg.Go(func() {
			if errors.Is(rdb.Get(ctx, "k").Err(), errOutage) {
				skipped.Add(1)
			}
		})
	}
	wg.Wait()
	if skipped.Load() != 7 || dials.Load() != sent+1 {
		t.Fatalf("after the pause: %d of 8 calls skipped, %d dials: want one asking", skipped.Load(), dials.Load()-sent)
	}
}

// A Redis that refuses connections fails one call at once (one dial, no
// retries), and the calls after it skip; once it is back, a
// call after the pause finds it and the calls after go through again. A
// Redis error reply is an answer: it skips nothing.
func TestRedisOutageRefusedAndBack(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	rdb, err := redisClient(&config.Redis{Addr: rs.Addr(), Timeout: config.Duration(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HGet(ctx, "k", "f").Err(); err == nil || errors.Is(err, errOutage) {
		t.Fatalf("a wrong-type call: %v, want Redis's error reply", err)
	}
	if err := rdb.Get(ctx, "k").Err(); err != nil {
		t.Fatalf("after an error reply: %v", err)
	}
	rs.Stop()
	// As the stores call: each call under a deadline of the timeout.
	bounded := func() error {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return rdb.Get(ctx, "k").Err()
	}
	// A call without a deadline of its own (an approval's save) fails
	// within the timeout too: go-redis dialled five times, 100 ms apart,
	// and a probe found an approval waiting 400 ms and its decision 800 ms.
	start := time.Now()
	if err := rdb.Get(ctx, "k").Err(); err == nil || errors.Is(err, errOutage) {
		t.Fatalf("first call to a stopped server: %v", err)
	}
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Fatalf("a call to a refused server took %v, over the 300ms timeout", d)
	}
	time.Sleep(outagePause + 50*time.Millisecond) // the pause ends: the next call asks again
	if err := bounded(); err == nil || errors.Is(err, errOutage) {
		t.Fatalf("first call after the pause: %v", err)
	}
	start = time.Now()
	for range 4 { // a request's state, claim, cache and limits calls
		if err := bounded(); !errors.Is(err, errOutage) {
			t.Fatalf("a later call: %v, want skipped", err)
		}
	}
	if d := time.Since(start); d > outagePause/2 {
		t.Fatalf("four skipped calls took %v", d)
	}
	rs.Start()
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Set(ctx, "k", "back", 0).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the server is back but calls still fail")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 3 {
		if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "back" {
			t.Fatalf("after recovery: %q %v", v, err)
		}
	}
}

// The caller's own context says nothing of the server: a call whose
// deadline passed before it was sent does not pause the others, and a
// probing call whose client left neither ends the pause for everyone nor
// holds it: the next call asks at once, alone (review).
func TestRedisOutageIgnoresTheCallersContext(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	rdb, err := redisClient(&config.Redis{Addr: rs.Addr(), Timeout: config.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := rdb.Get(expired, "k").Err(); err == nil {
		t.Fatal("a call past its deadline succeeded")
	}
	if err := rdb.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("after a call whose deadline had passed: %v", err)
	}

	addr, dials := silentRedis(t)
	silent, err := redisClient(&config.Redis{Addr: addr, Timeout: config.Duration(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	_ = silent.Get(context.Background(), "k").Err() // found unreachable
	time.Sleep(outagePause)
	left, leave := context.WithCancel(context.Background())
	leave() // the client left before the call was sent
	if err := silent.Get(left, "k").Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the probing call whose client left: %v", err)
	}
	sent := dials.Load()
	var wg sync.WaitGroup
	var skipped atomic.Int64
	for range 8 {
		wg.Go(func() {
			if errors.Is(silent.Get(context.Background(), "k").Err(), errOutage) {
				skipped.Add(1)
			}
		})
	}
	wg.Wait()
	if skipped.Load() != 7 || dials.Load() != sent+1 {
		t.Fatalf("after the probe's client left: %d of 8 calls skipped, %d dials: want one asking at once", skipped.Load(), dials.Load()-sent)
	}
}
