package fallback

import (
	"context"
	"errors"
	"strconv"
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
	return sharedReplicaScript(t, rdb, time.Minute, []step{{err: status(500, `{}`)}})
}

// sharedReplicaScript is sharedReplica with its own cooldown and script
// for p/a.
func sharedReplicaScript(t *testing.T, rdb redis.UniversalClient, cooldown time.Duration, script []step) *env {
	t.Helper()
	s := NewSharedBreakers(rdb, "sb:", time.Second, zerolog.Nop())
	t.Cleanup(s.Close)
	o := Options{
		Providers: []config.Provider{{Name: "p", Retries: intp(0)}},
		Models:    []config.Model{{Name: "a", Deployments: []config.Deployment{{Provider: "p", Upstream: "a"}}}},
		Fallback:  config.Fallback{BreakerFailures: 2, BreakerCooldown: config.Duration(cooldown)},
		Shared:    s,
	}
	return newEnv(o, map[string][]step{"p/a": script}, false, rt("a", 0, nil, dep("p", "a", 1)))
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
func isOpen(e *env) bool { return !breakerOf(e).available(time.Now()) }

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
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	checkShared(t, rdb)

	rs.Stop()
	d := sharedReplica(t, rdb)
	for range 2 {
		_, _, _ = d.chat(t, "a", false)
	}
	if !refused(t, d) || d.f.count("p/a") != 2 {
		t.Fatalf("with Redis down the local breaker did not open (calls %d)", d.f.count("p/a"))
	}
}

// TestSharedBreakersCluster: the same through a three-master Redis Cluster
// (pub/sub reaches every node; the hash is one key).
func TestSharedBreakersCluster(t *testing.T) {
	t.Parallel()
	cl := testredis.StartCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()[:1], MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	checkShared(t, rdb)
}

// checkShared: replica a opens a circuit; b holds it open within a second
// without calling the deployment, and so does c, started afterwards.
func checkShared(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
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
}

// breakerOf returns e's breaker of p/a.
func breakerOf(e *env) *breaker {
	t := e.mw(nil).(*handler).t
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.breakers[depKey{"p", "a"}]
}

// TestSharedBreakerCloses: when the replica that opened a circuit closes it
// after a successful probe, the others close theirs too, rather than each
// waiting to probe on its own.
func TestSharedBreakerCloses(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	const cooldown = 200 * time.Millisecond
	a := sharedReplicaScript(t, rdb, cooldown, []step{{err: status(500, `{}`)}, {err: status(500, `{}`)}, {body: `{"ok":true}`}})
	b := sharedReplicaScript(t, rdb, time.Hour, []step{{body: `{"ok":true}`}})
	time.Sleep(100 * time.Millisecond) // both subscribed
	for range 2 {
		_, _, _ = a.chat(t, "a", false)
	}
	if !eventually(func() bool { return isOpen(b) }) {
		t.Fatal("b did not see the opening")
	}
	time.Sleep(cooldown)
	if _, _, err := a.chat(t, "a", false); err != nil {
		t.Fatalf("a's probe: %v", err)
	}
	closed := func() bool {
		br := breakerOf(b)
		br.mu.Lock()
		defer br.mu.Unlock()
		return br.state == circuitClosed
	}
	if !eventually(closed) {
		t.Fatal("b's circuit is still open after a's probe succeeded")
	}
	if _, _, err := b.chat(t, "a", false); err != nil || b.f.count("p/a") != 1 {
		t.Fatalf("b after the closing: %v (calls %d)", err, b.f.count("p/a"))
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

// FuzzDecodeOpen: whatever the hash of open circuits holds, decoding never
// panics, and what decodes is what depField and the time would write.
func FuzzDecodeOpen(f *testing.F) {
	f.Add(depField("p", "m"), "1700000000000")
	f.Add("no separator", "1")
	f.Add(depField("p", "m"), "soon")
	f.Fuzz(func(t *testing.T, field, value string) {
		ev, ok := decodeOpen(field, value)
		if !ok {
			return
		}
		n, _ := strconv.ParseInt(value, 10, 64)
		if !ev.open || depField(ev.provider, ev.upstream) != field || ev.until.UnixMilli() != n {
			t.Fatalf("%q %q decoded as %+v", field, value, ev)
		}
	})
}
