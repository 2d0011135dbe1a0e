package gateway

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/config"
)

// dialCounter counts the connections a client dials.
type dialCounter struct{ n atomic.Int32 }

func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (d *dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisRefusedDialsOnce: a Redis that refuses connections costs one
// dial per call, not go-redis's default of five 100 ms apart, so a store
// call fails at once and the caller fails open.
func TestRedisRefusedDialsOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: dials are refused
	c, err := redisClient(&config.Redis{Addr: addr, Timeout: config.Duration(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := &dialCounter{}
	c.AddHook(d)
	if err := c.Get(context.Background(), "k").Err(); err == nil || err == redis.Nil {
		t.Fatalf("a refused connection answered: %v", err)
	}
	if n := d.n.Load(); n != 1 {
		t.Fatalf("one call dialled %d times; want 1", n)
	}
}
