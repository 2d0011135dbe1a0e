package fallback

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
)

// sharedReplica is one replica's fallback middleware over rdb, with one
// route "a" on deployment p/a whose every call fails, two failures opening
// its circuit for 30 s.
func sharedReplica(t *testing.T, rdb redis.UniversalClient) *env {
	t.Helper()
	s := NewSharedBreakers(rdb, "sb:", 200*time.Millisecond, zerolog.Nop())
	t.Cleanup(s.Close)
	o := Options{
		Providers: []config.Provider{{Name: "p", Retries: intp(0)}},
		Models:    []config.Model{{Name: "a", Deployments: []config.Deployment{{Provider: "p", Upstream: "a"}}}},
		Fallback:  config.Fallback{BreakerFailures: 2, BreakerCooldown: config.Duration(30 * time.Second)},
		Shared:    s,
	}
	return newEnv(o, map[string][]step{"p/a": {{err: status(500, `{}`)}}}, false, rt("a", 0, nil, dep("p", "a", 1)))
}

// refused reports whether a request on e is refused by an open circuit
// (without calling the deployment).
func refused(t *testing.T, e *env) bool {
	t.Helper()
	before := e.f.count("p/a")
	_, _, err := e.chat(t, "a", false)
	return errors.Is(err, ErrCircuitOpen) && e.f.count("p/a") == before
}

// isOpen reports whether e's breaker of p/a is open, without a request.
func isOpen(e *env) bool {
	t := e.mw(nil).(*handler).t
	t.mu.RLock()
	defer t.mu.RUnlock()
	return !t.breakers[depKey{"p", "a"}].available(time.Now())
}

// eventually polls cond for up to a second (the promise to operators).
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestSharedBreakers: a circuit one replica opens is open on the others
// within a second, without their calling the deployment; a replica started
// later starts with it open; with Redis gone each replica's own breaker
// still works.
func TestSharedBreakers(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	a, b := sharedReplica(t, rdb), sharedReplica(t, rdb)
	// Let both subscribe: an opening published before b listens is only
	// in the hash, which b reads when it subscribes.
	time.Sleep(100 * time.Millisecond)

	for range 2 {
		_, _, _ = a.chat(t, "a", false)
	}
	if !refused(t, a) {
		t.Fatal("a's circuit did not open after two failures")
	}
	if !eventually(func() bool { return isOpen(b) }) {
		t.Fatal("b's circuit is still closed a second after a opened its")
	}
	if !refused(t, b) || b.f.count("p/a") != 0 {
		t.Fatalf("b called the failing deployment %d times", b.f.count("p/a"))
	}
	open, err := rdb.HGetAll(context.Background(), "sb:breakers").Result()
	if err != nil || len(open) != 1 {
		t.Fatalf("open circuits in redis: %v %v", open, err)
	}
	if c := sharedReplica(t, rdb); !eventually(func() bool { return isOpen(c) }) || !refused(t, c) || c.f.count("p/a") != 0 {
		t.Fatalf("a replica joining late called the deployment %d times", c.f.count("p/a"))
	}

	rs.Stop()
	d := sharedReplica(t, rdb)
	for range 2 {
		_, _, _ = d.chat(t, "a", false)
	}
	if !refused(t, d) || d.f.count("p/a") != 2 {
		t.Fatalf("with Redis down the local breaker did not open (calls %d)", d.f.count("p/a"))
	}
}

// TestBreakerRemote: what another replica's transition does to a breaker.
func TestBreakerRemote(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tests := []struct {
		name      string
		start     circuit
		openUntil time.Time
		open      bool
		until     time.Time
		want      circuit
		wantUntil time.Time
	}{
		{name: "opening opens a closed circuit", start: circuitClosed, open: true, until: now.Add(time.Minute), want: circuitOpen, wantUntil: now.Add(time.Minute)},
		{name: "stale opening is ignored", start: circuitClosed, open: true, until: now.Add(-time.Second), want: circuitClosed},
		{name: "later opening extends", start: circuitOpen, openUntil: now.Add(time.Second), open: true, until: now.Add(time.Minute), want: circuitOpen, wantUntil: now.Add(time.Minute)},
		{name: "earlier opening keeps ours", start: circuitOpen, openUntil: now.Add(time.Minute), open: true, until: now.Add(time.Second), want: circuitOpen, wantUntil: now.Add(time.Minute)},
		{name: "opening stops a half-open probe", start: circuitHalfOpen, open: true, until: now.Add(time.Minute), want: circuitOpen, wantUntil: now.Add(time.Minute)},
		{name: "closing closes an open circuit", start: circuitOpen, openUntil: now.Add(time.Minute), want: circuitClosed, wantUntil: now.Add(time.Minute)},
		{name: "closing leaves a probe to decide", start: circuitHalfOpen, want: circuitHalfOpen},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBreaker(2, time.Minute, "p", "remote-"+tc.name, zerolog.Nop())
			shared := 0
			b.share = func(bool, time.Time) { shared++ }
			b.state, b.openUntil = tc.start, tc.openUntil
			b.remote(tc.open, tc.until, now)
			if b.state != tc.want || !b.openUntil.Equal(tc.wantUntil) || shared != 0 {
				t.Fatalf("state %v until %v shared %d, want %v until %v and nothing shared", b.state, b.openUntil, shared, tc.want, tc.wantUntil)
			}
		})
	}
}

// FuzzDecodeEvent: whatever arrives on the channel, decoding never panics,
// and what decodes encodes back to the same message.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(encodeEvent(breakerEvent{open: true, replica: "r1", until: time.UnixMilli(1700000000000), provider: "p", upstream: "m"}))
	f.Add(encodeEvent(breakerEvent{replica: "r2", provider: "p", upstream: "a\x00b"}))
	f.Add("o\x00r\x00x\x00p\x00u")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		ev, ok := decodeEvent(s)
		if !ok {
			return
		}
		if len(s) > maxEventBytes {
			t.Fatalf("decoded %d bytes", len(s))
		}
		if again, ok := decodeEvent(encodeEvent(ev)); !ok || again != ev {
			t.Fatalf("round trip: %+v -> %+v", ev, again)
		}
	})
}

