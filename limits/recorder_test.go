package limits

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/pipeline"
)

// meteredCall makes one upstream call of tenant w through l's meter: 10
// input and 5 output tokens of gpt-x, 70 µ$.
func meteredCall(t *testing.T, l *Limiter) {
	t.Helper()
	up := l.Meter(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}`)}, nil
	}))
	r := &pipeline.Request{ID: "c", Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "w"}}
	if _, err := up.Chat(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// The spend and usage of calls made while Redis is down (fail open) are
// written once it is back, not dropped: a real redis-server is killed and
// started again (empty: it keeps nothing on disk), so what it holds after
// is only what the outage's calls recorded.
func TestSpendKeptThroughRedisOutage(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	at := time.Now()
	l := newLimiterAt(t, "[[budgets]]\ntenant = \"w\"\namount = 0.0001\n", func() Store { return NewRedisStore(rdb, 0) }, "outage", func() time.Time { return at })

	srv.Stop()
	for range 2 {
		meteredCall(t, l)
		l.Flush() // fails: Redis is down
	}
	srv.Start()
	l.Flush()
	if u := usageOf(t, l, at); u.Get("input_tokens").Int() != 20 || u.Get("output_tokens").Int() != 10 || u.Get("upstream_calls").Int() != 2 {
		t.Fatalf("usage after the outage: %s", u.Raw)
	}
	// 140 µ$ of a 100 µ$ budget: spent.
	err := l.Admit(&pipeline.Request{ID: "next", Model: "gpt-x", Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "w"}})
	if s, code := status(err); s != 429 || code != pipeline.CodeInsufficientQuota {
		t.Fatalf("after spending the budget during the outage: %v", err)
	}
}

// A batch sent again after an error whose outcome was unknown (Redis ran
// it, its reply was lost) is applied once.
func TestBatchSentAgainCountsOnce(t *testing.T) {
	t.Parallel()
	st := NewRedisStore(testredis.Start(t).Client(t), 0)
	now := time.Now()
	b := []addition{{key: "rec:x", kind: kindSeq, n: 1}, {key: "spend", kind: kindBudget, n: 70}}
	for range 2 {
		if err := st.Add(context.Background(), now, b); err != nil {
			t.Fatal(err)
		}
	}
	b = []addition{{key: "rec:x", kind: kindSeq, n: 2}, {key: "spend", kind: kindBudget, n: 5}}
	if err := st.Add(context.Background(), now, b); err != nil {
		t.Fatal(err)
	}
	var out outcome
	if err := st.Take(context.Background(), now, "r", []check{{key: "spend", kind: kindBudget, limit: 1000}}, 0, &out); err != nil || out.remaining[0] != 1000-75 {
		t.Fatalf("spend after batches 1, 1 again, 2: remaining %v, %v", out.remaining, err)
	}
}

// The backlog of a long outage is bounded: past it, a failed batch's
// counters are dropped and counted, and what was kept is written once the
// store is back.
func TestUsageBacklogIsBounded(t *testing.T) {
	t.Parallel()
	st := &flakyStore{Store: NewMemoryStore()}
	at := time.Now()
	l := newLimiterAt(t, "", func() Store { return st }, "bound", func() time.Time { return at })
	l.rec.write.Lock()
	l.rec.maxBacklog = 1 // a call's usage row
	l.rec.write.Unlock()
	st.down.Store(true)
	before := testutil.ToFloat64(recordsDropped)
	meteredCall(t, l)
	l.Flush()
	meteredCall(t, l)
	l.Flush()
	if d := testutil.ToFloat64(recordsDropped) - before; d < 1 {
		t.Fatalf("dropped %v counters past the bound, want 1", d)
	}
	st.down.Store(false)
	if u := usageOf(t, l, at); u.Get("upstream_calls").Int() != 1 {
		t.Fatalf("usage after the outage: %s", u.Raw)
	}
}

// downStore fails every write, as Redis does through an outage.
type downStore struct{ Store }

func (downStore) Add(context.Context, time.Time, []addition) error { return errors.New("down") }

// A long outage's backlog holds its bound in memory too: 2,000 failed
// flushes of 50 new counters each neither make 2,000 batches nor keep the
// arrays of the counters dropped past maxBacklog.
func TestBacklogMemoryBounded(t *testing.T) {
	t.Parallel()
	r := newRecorder(downStore{NewMemoryStore()}, zerolog.Nop(), "rec:x")
	t.Cleanup(r.close)
	for i := range 2000 {
		adds := make([]addition, 50)
		for j := range adds {
			adds[j] = addition{key: "usage", kind: kindUsage, field: strconv.Itoa(i*50 + j), row: usageRow{1}}
		}
		r.add(adds)
		r.flush()
	}
	r.write.Lock()
	defer r.write.Unlock()
	c := 0
	for _, b := range r.backlog {
		c += cap(b.adds)
	}
	if len(r.backlog) > 1000 || c > 2*maxBacklog || r.backlogN > maxBacklog {
		t.Fatalf("backlog of %d batches, %d additions' room, %d counted", len(r.backlog), c, r.backlogN)
	}
}

// slowAddStore's writes fail after 200 ms, as a Redis slower than the
// client's timeout does.
type slowAddStore struct{ Store }

func (slowAddStore) Add(context.Context, time.Time, []addition) error {
	time.Sleep(200 * time.Millisecond)
	return errors.New("i/o timeout")
}

// A tool loop's later round does not wait on the retries of a failed
// write: ten rounds at once, after a write failed, are admitted without
// queueing behind ten retries of 200 ms each.
func TestAdmitRoundDoesNotWaitOnBacklog(t *testing.T) {
	t.Parallel()
	fx := newFixtureAt(t, "[[limits]]\ntenant = \"*\"\ntokens_per_minute = 100000\n", func() Store { return slowAddStore{NewMemoryStore()} }, time.Now)
	r, err := fx.do("a", "", "gpt-x")
	if err != nil {
		t.Fatal(err)
	}
	fx.l.Flush() // fails: the store's writes time out
	start := time.Now()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fx.l.AdmitRound(r); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("10 rounds took %v", d)
	}
}

// A batch whose write failed keeps its spend but not its token-rate
// correction: written after an outage, corrections would move the tokens
// counter minutes ahead of now.
func TestFailedBatchDropsRateCorrections(t *testing.T) {
	t.Parallel()
	rdb := testredis.Start(t).Client(t)
	st := &flakyStore{Store: NewRedisStore(rdb, 0)}
	r := newRecorder(st, zerolog.Nop(), "rec:x")
	t.Cleanup(r.close)
	st.down.Store(true)
	r.add([]addition{{key: "rl:t:w", kind: kindRate, limit: 1000, n: 500}, {key: "spend:w", kind: kindBudget, n: 70}})
	r.flush() // fails
	st.down.Store(false)
	r.flush()
	ctx := context.Background()
	if n, err := rdb.Exists(ctx, "rl:t:w").Result(); err != nil || n != 0 {
		t.Fatalf("the rate correction of a failed write was written later (%d, %v)", n, err)
	}
	if v, err := rdb.Get(ctx, "spend:w").Int64(); err != nil || v != 70 {
		t.Fatalf("spend after the outage: %d, %v", v, err)
	}
}

// A batch Redis answers with an error reply (here a key of the wrong type)
// would fail the same way for ever: it is dropped and counted, and the
// batches after it are written; a network error's batch is kept.
func TestBatchRefusedByRedisIsDropped(t *testing.T) {
	t.Parallel()
	rdb := testredis.Start(t).Client(t)
	ctx := context.Background()
	if err := rdb.HSet(ctx, "spend:w", "x", 1).Err(); err != nil {
		t.Fatal(err)
	}
	r := newRecorder(NewRedisStore(rdb, 0), zerolog.Nop(), "rec:x")
	t.Cleanup(r.close)
	before := testutil.ToFloat64(recordsDropped)
	r.add([]addition{{key: "spend:w", kind: kindBudget, n: 70}}) // WRONGTYPE
	r.flush()
	r.add([]addition{{key: "spend:v", kind: kindBudget, n: 5}})
	r.flush()
	if v, err := rdb.Get(ctx, "spend:v").Int64(); err != nil || v != 5 {
		t.Fatalf("spend behind a refused batch: %d, %v", v, err)
	}
	if d := testutil.ToFloat64(recordsDropped) - before; d < 1 {
		t.Fatalf("dropped %v counters, want the refused batch's", d)
	}
	r.write.Lock()
	n := len(r.backlog)
	r.write.Unlock()
	if n != 0 {
		t.Fatalf("backlog of %d batches after a refused one", n)
	}
}

// A batch Redis refuses for the gateway's credentials (a password changed
// on the server before the gateway's config) is kept and written once they
// pass again: dropped, its slot releases would lock the tenant out for the
// slots' TTL, and its spend would be lost.
func TestBatchKeptThroughAuthFailure(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	r := newRecorder(NewRedisStore(rdb, 0), zerolog.Nop(), "rec:auth")
	t.Cleanup(r.close)
	if err := admin.ConfigSet(ctx, "requirepass", "rotated").Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.ClientKillByFilter(ctx, "TYPE", "normal").Err() // the gateway's connection authenticated before
	r.add([]addition{{key: "spend:a", kind: kindBudget, n: 7}})
	r.flush() // NOAUTH
	_ = admin.Close()
	admin = redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "rotated", MaxRetries: -1})
	if err := admin.ConfigSet(ctx, "requirepass", "").Err(); err != nil {
		t.Fatal(err)
	}
	r.write.Lock()          // the background writer reads it under write, on its tick
	r.retryAt = time.Time{} // no wait for the next try
	r.write.Unlock()
	r.flush()
	if v, err := admin.Get(ctx, "spend:a").Int64(); err != nil || v != 7 {
		t.Fatalf("spend written after the credentials passed again: %d, %v", v, err)
	}
}

// A [redis] db beyond the server's databases fails every new connection's
// SELECT: a setup error, like a refused password, so the batch waits for
// the fix (it was dropped for good, spend included: a scale-out probe).
func TestBatchKeptThroughDBOutOfRange(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 99, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := newRecorder(NewRedisStore(rdb, 0), zerolog.Nop(), "rec:db")
	t.Cleanup(r.close)
	r.add([]addition{{key: "spend:a", kind: kindBudget, n: 7}})
	r.flush() // ERR DB index is out of range
	r.write.Lock()
	n := len(r.backlog)
	r.write.Unlock()
	if n != 1 {
		t.Fatalf("backlog of %d batches after a failed SELECT, want the batch kept", n)
	}
}

// replyError is a Redis error reply, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// Only a Redis error reply that would refuse the batch again is final: a
// timeout, a lost connection, or a reply that Redis cannot run it yet (a
// failover's read-only replica, loading, busy) keeps it for a retry.
func TestRefusedReplies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value script: abc"), true},
		{replyError("ERR Error running script (call to f_abc): @user_script:9: user_script:9: bad"), true},
		{replyError("READONLY You can't write against a read only replica. script: abc"), false},
		{replyError("ERR Error running script (call to f_abc): @user_script:9: READONLY You can't write"), false},
		{replyError("LOADING Redis is loading the dataset in memory"), false},
		{replyError("BUSY Redis is busy running a script."), false},
		{replyError("WRONGPASS invalid username-password pair or user is disabled."), false},
		{replyError("NOAUTH Authentication required."), false},
		{replyError("ERR DB index is out of range"), false},
		{replyError("NOPERM User gw has no permissions to run the 'evalsha' command"), false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("write: %w", errors.New("connection reset by peer")), false},
	} {
		if got := refused(c.err); got != c.want {
			t.Errorf("refused(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}
