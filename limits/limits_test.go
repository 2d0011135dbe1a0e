package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

const baseTOML = `
[[providers]]
name = "up"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
[[models]]
name = "gpt-x"
provider = "up"
upstream = "up-x"
[models.price]
input = 2
output = 10
cached_input = 1
[[models]]
name = "free"
provider = "up"
`

// stores runs f against the memory store and a real Redis.
func stores(t *testing.T, f func(t *testing.T, newStore func() Store)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, NewMemoryStore)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := testredis.Start(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		var n atomic.Int64
		f(t, func() Store {
			// Each limiter gets its own key space on the shared server.
			return &prefixed{Store: NewRedisStore(rdb, 0), n: n.Add(1)}
		})
	})
}

// prefixed is only a marker so that each test limiter uses its own prefix.
type prefixed struct {
	Store
	n int64
}

type fixture struct {
	l     *Limiter
	chain pipeline.Handler // Middleware → Meter → upstream
	usage string           // the usage the fake upstream reports
	calls atomic.Int64
}

// newLimiter builds the limiter of baseTOML+toml on a store from newStore;
// on a shared Redis, its keys start with space and the store's number.
func newLimiter(t *testing.T, toml string, newStore func() Store, space string) *Limiter {
	t.Helper()
	return newLimiterAt(t, toml, newStore, space, nil)
}

// newLimiterAt is newLimiter with the clock now (nil: time.Now).
func newLimiterAt(t *testing.T, toml string, newStore func() Store, space string, now func() time.Time) *Limiter {
	t.Helper()
	cfg, err := config.Parse([]byte(baseTOML + toml))
	if err != nil {
		t.Fatal(err)
	}
	st := newStore()
	prefix := ""
	if p, ok := st.(*prefixed); ok {
		st, prefix = p.Store, space+string(rune('a'+p.n))+":"
	}
	l := New(Options{Config: cfg, Store: st, Prefix: prefix, Logger: zerolog.Nop(), Now: now})
	t.Cleanup(l.Close)
	return l
}

// streaming is l's middleware before a handler that answers every request
// with stream.
func streaming(l *Limiter, stream pipeline.Stream) pipeline.Handler {
	return l.Middleware()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: stream}, nil
	}))
}

func newFixture(t *testing.T, toml string, newStore func() Store) *fixture {
	t.Helper()
	return newFixtureAt(t, toml, newStore, nil)
}

// newFixtureAt is newFixture with the limiter's clock now (nil: time.Now).
func newFixtureAt(t *testing.T, toml string, newStore func() Store, now func() time.Time) *fixture {
	t.Helper()
	fx := &fixture{usage: `{"prompt_tokens":10,"completion_tokens":5}`}
	fx.l = newLimiterAt(t, toml, newStore, "t", now)
	up := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		fx.calls.Add(1)
		return &pipeline.Response{Body: []byte(`{"choices":[],"usage":` + fx.usage + `}`)}, nil
	})
	fx.chain = pipeline.Chain(fx.l.Meter(up), fx.l.Middleware())
	return fx
}

func (fx *fixture) do(tenant, key, model string) (*pipeline.Request, error) {
	r := &pipeline.Request{ID: "r" + time.Now().Format("150405.000000000"), Model: model, Meta: &pipeline.Meta{},
		Body:   []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hello there"}]}`),
		Tenant: &pipeline.Tenant{Name: tenant, Key: key}}
	_, err := fx.chain.Chat(context.Background(), r)
	return r, err
}

func status(err error) (int, string) {
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		return pe.Status, pe.Code
	}
	return 0, ""
}

func TestRequestsPerMinute(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, `
[[limits]]
tenant = "*"
requests_per_minute = 3
`, newStore)
		for i := range 3 {
			r, err := fx.do("a", "k1", "gpt-x")
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if got := r.Meta.Get("x-ratelimit-remaining-requests"); got != string(rune('2'-i)) {
				t.Errorf("request %d: remaining %q", i, got)
			}
			// A minute's worth refills one request per 20 s (less the time
			// Redis saw pass since the first request).
			reset, err := time.ParseDuration(r.Meta.Get("x-ratelimit-reset-requests"))
			if full := time.Duration(i+1) * 20 * time.Second; err != nil || reset > full || reset < full-time.Second || r.Meta.Get("x-ratelimit-limit-requests") != "3" {
				t.Errorf("request %d: headers %v", i, r.Meta.Headers())
			}
		}
		_, err := fx.do("a", "k1", "gpt-x")
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 429 || pe.Code != "rate_limit_exceeded" || pe.RetryAfter <= 0 || pe.RetryAfter > 21*time.Second {
			t.Fatalf("4th request: %v", err)
		}
		if fx.calls.Load() != 3 {
			t.Fatalf("upstream calls %d", fx.calls.Load())
		}
		// tenant = "*": another tenant has its own counter.
		if _, err := fx.do("b", "k2", "gpt-x"); err != nil {
			t.Fatalf("other tenant: %v", err)
		}
	})
}

// Names that hold the counter key's separator keep counters of their own:
// tenant "t" with key "x:y" and tenant "t:x" with key "y" are two callers.
func TestCounterNamesWithColons(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, `
[[limits]]
tenant = "*"
key = "*"
requests_per_minute = 1
`, newStore)
		for _, c := range [][2]string{{"t", "x:y"}, {"t:x", "y"}, {"t%3Ax", "y"}} {
			if _, err := fx.do(c[0], c[1], "gpt-x"); err != nil {
				t.Fatalf("tenant %q key %q, its first request: %v", c[0], c[1], err)
			}
		}
		if s, _ := status(func() error { _, err := fx.do("t:x", "y", "gpt-x"); return err }()); s != 429 {
			t.Fatal("the second request of one caller was not refused")
		}
	})
}

func TestSharedCounterWithoutTenant(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, `
[[limits]]
model = "gpt-x"
requests_per_minute = 2
`, newStore)
		for _, tenant := range []string{"a", "b"} {
			if _, err := fx.do(tenant, "", "gpt-x"); err != nil {
				t.Fatal(err)
			}
		}
		if s, _ := status(func() error { _, err := fx.do("c", "", "gpt-x"); return err }()); s != 429 {
			t.Fatal("the shared counter did not refuse the third tenant")
		}
		if _, err := fx.do("c", "", "free"); err != nil {
			t.Fatalf("another model: %v", err)
		}
	})
}

func TestTokensPerMinuteCountsUpstreamUsage(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, `
[[limits]]
tenant = "*"
tokens_per_minute = 1000
`, newStore)
		fx.usage = `{"prompt_tokens":400,"completion_tokens":500}`
		r, err := fx.do("a", "", "gpt-x")
		if err != nil {
			t.Fatal(err)
		}
		if n := gjson.Parse(r.Meta.Get("x-ratelimit-remaining-tokens")).Int(); n < 980 {
			t.Fatalf("remaining tokens after the estimate: %d", n)
		}
		fx.l.Flush() // the correction (900 used, less the estimate) is queued
		_, err = fx.do("a", "", "gpt-x")
		if s, code := status(err); s != 429 || code != "rate_limit_exceeded" {
			// 900 + this request's estimate fits 1000 only if the correction was lost.
			t.Logf("second request: %v", err)
		}
		fx.l.Flush()
		_, err = fx.do("a", "", "gpt-x")
		if s, _ := status(err); s != 429 {
			t.Fatalf("after 1800 tokens of a 1000 TPM limit: %v", err)
		}
	})
}

// A call that used more tokens than a minute of the rule is charged in
// full: the counter goes that many tokens into debt, and the tenant waits
// until it is paid back at the rule's rate (5,000 tokens at 1,000 a minute:
// about four minutes past the minute the burst allows), not one minute.
func TestTokensPerMinuteChargesABigCallInFull(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, `
[[limits]]
tenant = "*"
tokens_per_minute = 1000
`, newStore)
		fx.usage = `{"prompt_tokens":10,"completion_tokens":5000}`
		if _, err := fx.do("a", "", "gpt-x"); err != nil {
			t.Fatal(err)
		}
		fx.l.Flush()
		_, err := fx.do("a", "", "gpt-x")
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 429 || pe.RetryAfter < 200*time.Second || pe.RetryAfter > 250*time.Second {
			t.Fatalf("after a 5,010-token call of a 1,000 TPM rule: %v (retry after %v), want a 429 to wait about 4 minutes", err, pe.RetryAfter)
		}
		// The largest usage an upstream may report is charged a day of
		// the rule at most (and a Redis counter takes it).
		fx.usage = `{"prompt_tokens":1099511627775,"completion_tokens":1099511627775}`
		if _, err := fx.do("b", "", "gpt-x"); err != nil {
			t.Fatal(err)
		}
		fx.l.Flush()
		_, err = fx.do("b", "", "gpt-x")
		if !errors.As(err, &pe) || pe.Status != 429 || pe.RetryAfter < 23*time.Hour || pe.RetryAfter > 24*time.Hour {
			t.Fatalf("after the largest usage: %v (retry after %v), want a 429 to wait about a day", err, pe.RetryAfter)
		}
	})
}

func TestConcurrentSlots(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		l := newLimiter(t, "[[limits]]\ntenant = \"*\"\nconcurrent = 1\n", newStore, "c")
		closed := make(chan struct{})
		h := streaming(l, &pipeline.StreamFunc{NextFunc: func() ([]byte, error) { return nil, nil }, CloseFunc: func() { close(closed) }})
		req := func(id string) (*pipeline.Response, error) {
			return h.Chat(context.Background(), &pipeline.Request{ID: id, Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
		}
		first, err := req("one")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := req("two"); err == nil {
			t.Fatal("a second request in flight passed")
		} else if s, code := status(err); s != 429 || code != "rate_limit_exceeded" {
			t.Fatalf("second: %v", err)
		}
		first.Stream.Close()
		<-closed
		l.Flush() // the slot is freed by the next store write
		if _, err := req("three"); err != nil {
			t.Fatalf("after the first stream closed: %v", err)
		}
	})
}

// Requests that share an id (a client's X-Request-Id) hold a slot each:
// slots named by the request's id would be one slot, letting any number of
// them in flight under concurrent = 2, and the first to end would free it.
func TestConcurrentSlotsAreNotSharedByID(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		l := newLimiter(t, "[[limits]]\ntenant = \"*\"\nconcurrent = 2\n", newStore, "s")
		h := streaming(l, &pipeline.StreamFunc{NextFunc: func() ([]byte, error) { return nil, nil }, CloseFunc: func() {}})
		req := func() (*pipeline.Response, error) {
			return h.Chat(context.Background(), &pipeline.Request{ID: "client-chosen", Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
		}
		first, err := req()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := req(); err != nil {
			t.Fatalf("a second request: %v", err)
		}
		if _, err := req(); err == nil {
			t.Fatal("a third request with the same id passed while two were in flight")
		}
		first.Stream.Close()
		l.Flush()
		if _, err := req(); err != nil {
			t.Fatalf("after the first ended: %v", err)
		}
	})
}

// A layer that panics inside the limits (the server answers the request
// 500 and goes on) does not keep the request's slot in flight.
func TestPanicFreesTheSlot(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		l := newLimiter(t, "[[limits]]\ntenant = \"*\"\nconcurrent = 1\n", newStore, "p")
		panicking := true
		h := l.Middleware()(pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			if panicking {
				panic("a bug in a layer")
			}
			return &pipeline.Response{Body: []byte(`{}`)}, nil
		}))
		req := func() (err error) {
			defer func() {
				if recover() != nil {
					err = errors.New("panicked")
				}
			}()
			_, err = h.Chat(context.Background(), &pipeline.Request{ID: "x", Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
			return err
		}
		if err := req(); err == nil || err.Error() != "panicked" {
			t.Fatalf("first request: %v", err)
		}
		l.Flush()
		panicking = false
		if err := req(); err != nil {
			t.Fatalf("after a request that panicked: %v", err)
		}
	})
}

// A request one counter refuses takes nothing from the others.
func TestRefusedRequestTakesNothing(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		l := newLimiter(t, "[[limits]]\ntenant = \"*\"\nrequests_per_minute = 2\nconcurrent = 1\n", newStore, "n")
		h := streaming(l, &pipeline.StreamFunc{NextFunc: func() ([]byte, error) { return nil, nil }, CloseFunc: func() {}})
		req := func(id string) (*pipeline.Request, *pipeline.Response, error) {
			r := &pipeline.Request{ID: id, Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}}
			resp, err := h.Chat(context.Background(), r)
			return r, resp, err
		}
		_, first, err := req("one")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"two", "three"} {
			if _, _, err := req(id); err == nil {
				t.Fatalf("%s: a second request in flight passed", id)
			}
		}
		first.Stream.Close()
		l.Flush()
		r, last, err := req("four")
		if err != nil {
			t.Fatalf("the refused requests took from requests_per_minute: %v", err)
		}
		if got := r.Meta.Get("x-ratelimit-remaining-requests"); got != "0" {
			t.Fatalf("remaining %q after two requests", got)
		}
		last.Stream.Close()
		l.Flush()
		if _, _, err := req("five"); err == nil {
			t.Fatal("a third request in a minute passed")
		}
	})
}

// The warning comes once spend is at warn_at, in whole micro-dollars: at
// 0.8 of 700 µ$ (560 µ$, the ninth call at 70 µ$ each), where 1 - 0.8 in
// floating point missed it by a hair. An amount is read to the nearest
// micro-dollar (2.01 was 2,009,999 µ$).
func TestBudgetWarningAtTheMark(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	fx := newFixtureAt(t, `
[[budgets]]
tenant = "a"
amount = 0.0007
period = "day"
warn_at = 0.8
[[budgets]]
tenant = "b"
amount = 2.01
period = "day"
`, NewMemoryStore, func() time.Time { return at })
	for call := 1; call <= 10; call++ {
		r, err := fx.do("a", "k1", "gpt-x")
		fx.l.Flush()
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		got := r.Meta.Get("x-gateway-budget-remaining")
		if want := call >= 9; (got != "") != want {
			t.Errorf("call %d (%d µ$ spent before it): warning %q", call, 70*(call-1), got)
		}
		if call == 9 && got != "0.00014" {
			t.Errorf("call 9: remaining %q, want 0.00014", got)
		}
	}
	if got := fx.l.budgets[1].micro; got != 2_010_000 {
		t.Errorf("amount 2.01 read as %d µ$", got)
	}
}

func TestBudgetAndUsageReport(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		// The limiter's clock stands still, at noon UTC tomorrow: a run
		// across midnight would otherwise split the day's spend (and the
		// report's day) over two days. Not today: Redis expires the day's
		// spend at the end of the limiter's day by its own clock, which
		// must not pass during the test.
		at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
		fx := newFixtureAt(t, `
[[budgets]]
tenant = "a"
amount = 0.001
period = "day"
warn_at = 0.5
`, newStore, func() time.Time { return at })
		// 10 input × $2/M + 5 output × $10/M = 70 µ$ per call; the budget is 1000 µ$.
		var calls int
		for {
			r, err := fx.do("a", "k1", "gpt-x")
			fx.l.Flush()
			if err != nil {
				if s, code := status(err); s != 429 || code != "insufficient_quota" {
					t.Fatalf("over budget: %v", err)
				}
				break
			}
			calls++
			if calls > 20 {
				t.Fatal("the budget never ran out")
			}
			if calls > 8 && r.Meta.Get("x-gateway-budget-remaining") == "" {
				t.Errorf("call %d: no budget warning past half the budget", calls)
			}
		}
		if calls != 15 { // 14 × 70 = 980 < 1000 passes, 15 × 70 = 1050 then refuses
			t.Fatalf("%d calls within a 1000 µ$ budget at 70 µ$ each", calls)
		}
		if _, err := fx.do("b", "k2", "free"); err != nil {
			t.Fatalf("another tenant: %v", err)
		}
		today := at.UTC()
		body, err := fx.l.Report(context.Background(), UsageQuery{From: today, To: today, GroupBy: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		a := gjson.GetBytes(body, `data.#(group=="a")`)
		if a.Get("upstream_calls").Int() != 15 || a.Get("requests").Int() != 16 || a.Get("input_tokens").Int() != 150 ||
			a.Get("output_tokens").Int() != 75 || a.Get("cost_microdollars").Int() != 1050 {
			t.Fatalf("tenant a usage: %s", body)
		}
		if gjson.GetBytes(body, "total.upstream_calls").Int() != 16 || gjson.GetBytes(body, `data.#(group=="b").cost_microdollars`).Int() != 0 {
			t.Fatalf("totals: %s", body)
		}
		byModel, _ := fx.l.Report(context.Background(), UsageQuery{Tenant: "a", From: today, To: today, GroupBy: "model"})
		if !strings.Contains(string(byModel), `"group":"gpt-x"`) || strings.Contains(string(byModel), `"free"`) {
			t.Fatalf("tenant a by model: %s", byModel)
		}
	})
}

func TestRedisDownFailOpenAndClosed(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	for _, mode := range []string{"open", "closed"} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond})
		defer rdb.Close()
		cfg, _ := config.Parse([]byte(baseTOML + "[middleware.limits]\nfail = \"" + mode + "\"\n[[limits]]\ntenant = \"*\"\nrequests_per_minute = 100\n"))
		l := New(Options{Config: cfg, Store: NewRedisStore(rdb, 0), Prefix: mode + ":", Logger: zerolog.Nop()})
		defer l.Close()
		h := l.Middleware()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			return &pipeline.Response{Body: []byte(`{}`)}, nil
		}))
		req := func() error {
			_, err := h.Chat(context.Background(), &pipeline.Request{ID: "x", Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
			return err
		}
		if err := req(); err != nil {
			t.Fatalf("%s, redis up: %v", mode, err)
		}
		srv.Stop()
		err := req()
		switch mode {
		case "open":
			if err != nil {
				t.Fatalf("fail open refused: %v", err)
			}
		case "closed":
			if s, code := status(err); s != 429 || code != "rate_limit_exceeded" {
				t.Fatalf("fail closed: %v", err)
			}
		}
		srv.Start()
	}
}

// A model call a tool makes for the caller passes the same limits and
// budgets: refused once the caller's budget or request rate is spent.
func TestAdmitToolModelCalls(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, `
[[limits]]
tenant = "*"
model = "free"
requests_per_minute = 1
[[budgets]]
tenant = "a"
amount = 0.0001
`, newStore)
		agent := func(tenant string) error {
			return fx.l.Admit(&pipeline.Request{ID: "agent", Model: "free", Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: tenant}})
		}
		if err := agent("b"); err != nil {
			t.Fatalf("first agent call: %v", err)
		}
		if s, code := status(agent("b")); s != 429 || code != "rate_limit_exceeded" {
			t.Fatalf("second agent call within the minute: %d %s", s, code)
		}
		// 70 µ$ per gpt-x call: two spend the 100 µ$ budget.
		for range 2 {
			if _, err := fx.do("a", "", "gpt-x"); err != nil {
				t.Fatal(err)
			}
		}
		fx.l.Flush()
		if s, code := status(agent("a")); s != 429 || code != "insufficient_quota" {
			t.Fatalf("agent call over budget: %d %s", s, code)
		}
	})
}

// A later model call of an admitted request (a tool loop's later round)
// passes AdmitRound: it takes no request (requests_per_minute = 1 lets
// every round of the one request through) and no estimate, and is refused
// once the request's own earlier calls spent the budget or overdrew the
// tokens counter, on either store: on Redis it writes what the meter
// queued first, without the test's Flush.
func TestAdmitRound(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		l := newLimiter(t, `
[[limits]]
tenant = "*"
requests_per_minute = 1
[[limits]]
tenant = "b"
tokens_per_minute = 40
[[budgets]]
tenant = "a"
amount = 0.0002
`, newStore, "round")
		var calls atomic.Int64
		// Each call: 10 input and 5 output tokens, 70 µ$.
		meter := l.Meter(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			calls.Add(1)
			return &pipeline.Response{Body: []byte(`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}`)}, nil
		}))
		// A loop of up to 10 calls, each after the first admitted by AdmitRound.
		loop := l.Middleware()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			for i := range 10 {
				if i > 0 {
					if err := l.AdmitRound(r); err != nil {
						return nil, err
					}
				}
				if _, err := meter.Chat(ctx, r); err != nil {
					return nil, err
				}
			}
			return &pipeline.Response{Body: []byte(`{}`)}, nil
		}))
		run := func(tenant string) error {
			_, err := loop.Chat(context.Background(), &pipeline.Request{ID: "r-" + tenant, Model: "gpt-x", Meta: &pipeline.Meta{},
				Body:   []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hello there"}]}`),
				Tenant: &pipeline.Tenant{Name: tenant}})
			return err
		}
		// Within its limits (tenant c: one request a minute, no budget):
		// every call runs.
		if err := run("c"); err != nil || calls.Load() != 10 {
			t.Fatalf("within limits: %d calls, %v", calls.Load(), err)
		}
		// 200 µ$: three calls spend 210, the fourth is refused.
		calls.Store(0)
		if s, code := status(run("a")); s != 429 || code != "insufficient_quota" || calls.Load() != 3 {
			t.Fatalf("budget: %d calls, then %d %s", calls.Load(), s, code)
		}
		// 40 tokens a minute: three calls use 45, the fourth is refused.
		calls.Store(0)
		err := run("b")
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 429 || pe.Code != "rate_limit_exceeded" || pe.Type != pipeline.TypeTokens || pe.RetryAfter <= 0 || calls.Load() != 3 {
			t.Fatalf("tokens: %d calls, then %v", calls.Load(), err)
		}
	})
}

// A tokens counter at exactly zero refuses the calls that take nothing
// before they are made (a tool loop's later round, an agent tool's call),
// on either store; one token left still lets them through. The clock
// stands still, so the counter does not refill between the calls.
func TestCallsRefusedAtZeroTokens(t *testing.T) {
	t.Parallel()
	at := time.Now()
	stores(t, func(t *testing.T, newStore func() Store) {
		for _, c := range []struct {
			used int // tokens the first call reports, of 60 a minute
			ok   bool
		}{{59, true}, {60, false}} {
			fx := newFixtureAt(t, "[[limits]]\ntenant = \"*\"\ntokens_per_minute = 60\n", newStore, func() time.Time { return at })
			fx.usage = fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":0}`, c.used)
			r, err := fx.do("a", "", "gpt-x")
			if err != nil {
				t.Fatal(err)
			}
			fx.l.Flush()
			agent := &pipeline.Request{ID: "agent", Model: "gpt-x", Body: []byte(`{}`), Tenant: r.Tenant}
			for name, err := range map[string]error{"round": fx.l.AdmitRound(r), "agent": fx.l.Admit(agent)} {
				s, code := status(err)
				switch {
				case c.ok && err != nil:
					t.Fatalf("%d of 60 used, %s call refused: %v", c.used, name, err)
				case !c.ok && (s != 429 || code != "rate_limit_exceeded"):
					t.Fatalf("%d of 60 used, %s call: %v", c.used, name, err)
				}
			}
		}
	})
}

// tool_calls_per_minute: a call over the limit does not run; the model gets
// an error result instead.
func TestToolCallsPerMinute(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, "[[limits]]\ntenant = \"*\"\ntool_calls_per_minute = 2\n", newStore)
		var ran atomic.Int64
		h := fx.l.ToolLimit()(pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			ran.Add(1)
			return &pipeline.ToolResult{CallID: c.ID, Name: c.Name, Content: []byte(`{"status":"ok","data":1}`)}, nil
		}))
		req := &pipeline.Request{Model: "gpt-x", Tenant: &pipeline.Tenant{Name: "a"}}
		var last *pipeline.ToolResult
		for i := range 3 {
			res, err := h.CallTool(context.Background(), &pipeline.ToolCall{ID: "c" + string(rune('0'+i)), Name: "calculator", Request: req})
			if err != nil {
				t.Fatal(err)
			}
			last = res
		}
		if ran.Load() != 2 || !last.IsError || gjson.GetBytes(last.Content, "error.type").Str != "rate_limit_exceeded" {
			t.Fatalf("ran %d, last result %s", ran.Load(), last.Content)
		}
	})
}

// A request bigger than a limit's whole minute is refused as such, not told
// to retry; a limit raised by a reload applies at once.
func TestTooLargeAndChangedLimits(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		fx := newFixture(t, "[[limits]]\ntenant = \"*\"\ntokens_per_minute = 5\n", newStore)
		_, err := fx.do("a", "", "gpt-x")
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Code != pipeline.CodeTooLargeForLimit || pe.RetryAfter != 0 {
			t.Fatalf("a request over the whole limit: %v", err)
		}
	})
	st := NewMemoryStore()
	for _, rpm := range []string{"1", "1000"} {
		cfg, _ := config.Parse([]byte(baseTOML + "[[limits]]\ntenant = \"*\"\nrequests_per_minute = " + rpm + "\n"))
		l := New(Options{Config: cfg, Store: st, Logger: zerolog.Nop()})
		h := l.Middleware()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			return &pipeline.Response{Body: []byte(`{}`)}, nil
		}))
		for i := range 2 {
			_, err := h.Chat(context.Background(), &pipeline.Request{ID: "x", Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
			if rpm == "1000" && err != nil {
				t.Fatalf("after raising the limit to 1000, request %d: %v", i, err)
			}
		}
		l.Close()
	}
}

// TestResetHeaderText pins appendReset to time.Duration's String for every
// whole millisecond a per-minute counter can report, and past it.
func TestResetHeaderText(t *testing.T) {
	t.Parallel()
	for ms := int64(-2); ms <= 61_000; ms++ {
		want := (time.Duration(ms) * time.Millisecond).String()
		if got := string(appendReset([]byte("x"), ms)); got != "x"+want {
			t.Fatalf("appendReset(%d) = %q, want %q", ms, got[1:], want)
		}
	}
}

// TestEstimateOfAnImageBody: a pass-through body carrying an image as a
// data URL (a Responses call, an image edit) is estimated from its text,
// the image as one image: never the tokens of its base64 characters (which
// overcharged such a call hundreds of thousands of tokens when its answer
// reported no usage).
func TestEstimateOfAnImageBody(t *testing.T) {
	t.Parallel()
	img := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 1<<15) // 768 KiB of base64
	body := `{"model":"gpt-x","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"what is in this picture?"},` +
		`{"type":"input_image","image_url":"data:image/png;base64,` + img + `"}]}]}`
	n := estimate(&pipeline.Request{Model: "gpt-x", Endpoint: "/v1/responses", Body: []byte(body)})
	if n < 10 || n > 200 {
		t.Fatalf("estimate %d tokens for a question and one image", n)
	}
	// A messages array in a body that is not a chat call's is not what the
	// endpoint reads: the estimate still counts the prompt.
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 1000)
	completions := `{"model":"gpt-x","prompt":"` + prose + `","messages":[]}`
	if n := estimate(&pipeline.Request{Model: "gpt-x", Endpoint: "/v1/completions", Body: []byte(completions)}); n < 9000 {
		t.Fatalf("estimate %d tokens for a 10,000-token prompt beside an empty messages array", n)
	}
}

// TestEstimateOfAFormBody: a multipart form (an audio transcription, an
// image edit) is not estimated from its bytes, which are media: a large
// upload takes no tokens before its call (Hold takes the minimum, 1), and
// is charged the usage its answer reports. Estimated as text, a 1 MiB
// recording was a quarter of a million tokens, over most limits.
func TestEstimateOfAFormBody(t *testing.T) {
	t.Parallel()
	body := "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-x\r\n" +
		"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n\r\n" + strings.Repeat("ID3 \xff\xfb", 1<<17) + "\r\n--b--\r\n"
	r := &pipeline.Request{Model: "gpt-x", Endpoint: "/v1/audio/transcriptions", Body: []byte(body), Tenant: &pipeline.Tenant{Name: "u"}}
	if n := estimate(r); n != 0 {
		t.Fatalf("estimate %d tokens for a form", n)
	}
	fx := newFixture(t, "[[limits]]\ntenant = \"*\"\ntokens_per_minute = 1000\n", func() Store { return NewMemoryStore() })
	c, err := fx.l.Hold(r)
	if err != nil {
		t.Fatalf("a 1 MiB recording under a limit of 1,000 tokens a minute: %v", err)
	}
	c.End()
}

// TestChargeOfAnUnconfiguredModel: a pass-through call of a model the
// config does not name counts against the tenant's limits, but is metered
// under UnconfiguredModel, its request as its call: a client's model names
// never become metric series or usage records of their own. (Its request
// used to be recorded under the client's name.)
func TestChargeOfAnUnconfiguredModel(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	fx := newFixtureAt(t, `
[[limits]]
tenant = "*"
tokens_per_minute = 100
`, func() Store { return NewMemoryStore() }, func() time.Time { return at })
	for i := range 3 {
		r := &pipeline.Request{Model: fmt.Sprintf("client-%d", i), Endpoint: "/v1/embeddings", Body: []byte(`{"input":"x"}`),
			Tenant: &pipeline.Tenant{Name: "u"}}
		c, err := fx.l.Hold(r)
		if err != nil {
			t.Fatal(err)
		}
		c.Charge(wire.ChatUsage{Prompt: 40}, false)
		c.End()
	}
	fx.l.Flush()
	for i := range 3 {
		if n := testutil.ToFloat64(tokensTotal.WithLabelValues("u", fmt.Sprintf("client-%d", i), "input")); n != 0 {
			t.Errorf("client-%d is a metric label (%v tokens)", i, n)
		}
	}
	if n := testutil.ToFloat64(tokensTotal.WithLabelValues("u", UnconfiguredModel, "input")); n != 120 {
		t.Errorf("%v input tokens under %s, want 120", n, UnconfiguredModel)
	}
	byModel, err := fx.l.Report(context.Background(), UsageQuery{Tenant: "u", From: at, To: at, GroupBy: "model"})
	if err != nil {
		t.Fatal(err)
	}
	unconfigured := gjson.GetBytes(byModel, `data.#(group=="`+UnconfiguredModel+`")`)
	if strings.Contains(string(byModel), "client-") || unconfigured.Get("input_tokens").Int() != 120 || unconfigured.Get("requests").Int() != 3 {
		t.Fatalf("usage by model: %s", byModel)
	}
	// The tenant's token limit still counts them: 120 tokens is over 100.
	r := &pipeline.Request{Model: "client-9", Endpoint: "/v1/embeddings", Body: []byte(`{"input":"x"}`), Tenant: &pipeline.Tenant{Name: "u"}}
	if err := fx.l.Admit(r); err == nil {
		t.Error("a call passed its spent token limit")
	}
}

// TestPriceOfAnUnconfiguredModel: a pass-through call of a model the
// config does not name is priced by the default table, by the prefix of
// its name (it goes upstream under that name), so that it spends the
// tenant's budget as a configured model's call does. One that no default
// price matches is refused where a budget applies (403 model_not_priced),
// not let through free; where none applies it passes. Such calls used to
// cost nothing: the price lookup knew only configured names.
func TestPriceOfAnUnconfiguredModel(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, `
[[budgets]]
tenant = "priced"
amount = 0.01
period = "day"
`, func() Store { return NewMemoryStore() })
	call := func(tenant, model string) (*Call, error) {
		return fx.l.Hold(&pipeline.Request{ID: "r", Model: model, Endpoint: "/v1/embeddings", Body: []byte(`{"input":"x"}`),
			Tenant: &pipeline.Tenant{Name: tenant}})
	}
	c, err := call("priced", "gpt-4o-2024-11-20")
	if err != nil {
		t.Fatal(err)
	}
	c.Charge(wire.ChatUsage{Prompt: 4000}, false) // at gpt-4o's $2.50/M: $0.01
	c.End()
	var pe *pipeline.Error
	if _, err := call("priced", "gpt-4o-mini-2024-07-18"); !errors.As(err, &pe) || pe.Code != pipeline.CodeInsufficientQuota {
		t.Fatalf("after $0.01 of gpt-4o-2024-11-20 on a $0.01 budget: %v", err)
	}
	if _, err := call("priced", "mystery-1"); !errors.As(err, &pe) || pe.Status != 403 || pe.Code != pipeline.CodeModelNotPriced {
		t.Fatalf("a model without a price under a budget: %v", err)
	}
	c, err = call("unbudgeted", "mystery-1")
	if err != nil {
		t.Fatalf("a model without a price, no budget: %v", err)
	}
	c.End()
}

// flakyStore fails its writes while down, as Redis does during an outage.
type flakyStore struct {
	Store
	down atomic.Bool
}

func (s *flakyStore) Add(ctx context.Context, now time.Time, adds []addition) error {
	if s.down.Load() {
		return errors.New("store down")
	}
	return s.Store.Add(ctx, now, adds)
}

// A slot whose release was to be written while the store was down is freed
// by the first write after it comes back, not only after slotTTL: releasing
// a slot twice is harmless, holding it is a tenant locked out.
func TestSlotReleasedAfterStoreOutage(t *testing.T) {
	t.Parallel()
	st := &flakyStore{Store: NewMemoryStore()}
	l := newLimiter(t, "[[limits]]\ntenant = \"*\"\nconcurrent = 1\n", func() Store { return st }, "o")
	closed := make(chan struct{})
	h := streaming(l, &pipeline.StreamFunc{NextFunc: func() ([]byte, error) { return nil, nil }, CloseFunc: func() { close(closed) }})
	req := func(id string) (*pipeline.Response, error) {
		return h.Chat(context.Background(), &pipeline.Request{ID: id, Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
	}
	first, err := req("one")
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	first.Stream.Close()
	<-closed
	l.Flush() // fails: the store is down
	st.down.Store(false)
	l.Flush()
	if _, err := req("two"); err != nil {
		t.Fatalf("after the store came back: %v (the slot was never released)", err)
	}
}

// lateStore takes the counters but answers with an error while late, as
// Redis does when the script runs but its reply comes after the timeout.
type lateStore struct {
	Store
	late atomic.Bool
}

func (s *lateStore) Take(ctx context.Context, now time.Time, id string, checks []check, tokens int64, out *outcome) error {
	err := s.Store.Take(ctx, now, id, checks, tokens, out)
	if err == nil && s.late.Load() {
		err = context.DeadlineExceeded
	}
	return err
}

// A request admitted without an answer from the store (fail open) must not
// leave behind a slot the store took for it: nothing would release it.
func TestSlotOfUnansweredTakeIsReleased(t *testing.T) {
	t.Parallel()
	for _, fail := range []string{"open", "closed"} {
		t.Run(fail, func(t *testing.T) {
			t.Parallel()
			st := &lateStore{Store: NewMemoryStore()}
			l := newLimiter(t, "[middleware.limits]\nfail = \""+fail+"\"\n[[limits]]\ntenant = \"*\"\nconcurrent = 1\n", func() Store { return st }, "u")
			h := l.Middleware()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				return &pipeline.Response{Body: []byte(`{}`)}, nil
			}))
			req := func(id string) error {
				_, err := h.Chat(context.Background(), &pipeline.Request{ID: id, Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
				return err
			}
			st.late.Store(true)
			_ = req("late")
			st.late.Store(false)
			l.Flush()
			if err := req("next"); err != nil {
				t.Fatalf("after a late answer: %v (its slot is still held)", err)
			}
		})
	}
}

// TestRefuseUnnamed: a call that names no model is refused where a
// budget of its tenant or key applies (403 model_not_priced): it cannot be
// priced. Rate rules, tenant-wide or per model, do not refuse it (they
// count it: TestHoldUnnamed), and budgets of other tenants do not concern
// it. Under a per-model rule it used to be refused with 400 though the
// SDKs make the model optional (images, a Responses call of a saved
// prompt).
func TestRefuseUnnamed(t *testing.T) {
	t.Parallel()
	l := newLimiterAt(t, `
[[limits]]
tenant = "per-model"
model = "gpt-x"
requests_per_minute = 5
[[limits]]
tenant = "glob"
model = "gpt-*"
tokens_per_minute = 1000
[[limits]]
tenant = "keyed"
key = "kr"
model = "gpt-x"
concurrent = 2
[[budgets]]
tenant = "budget"
amount = 1
period = "day"
[[budgets]]
key = "k1"
amount = 1
period = "day"
`, func() Store { return NewMemoryStore() }, "t", nil)
	tests := []struct {
		name, tenant, key string
		refused           bool
	}{
		{name: "a per-model rule", tenant: "per-model"},
		{name: "a rule of a model pattern", tenant: "glob"},
		{name: "a per-model rule of the caller's key", tenant: "keyed", key: "kr"},
		{name: "no rule", tenant: "other"},
		{name: "a budget", tenant: "budget", refused: true},
		{name: "a budget of the caller's key", tenant: "keyed-budget", key: "k1", refused: true},
		{name: "a budget of another key", tenant: "keyed-budget", key: "k2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := l.RefuseUnnamed(&pipeline.Request{ID: "r", Endpoint: "/v1/images/generations", Tenant: &pipeline.Tenant{Name: tc.tenant, Key: tc.key}})
			var pe *pipeline.Error
			switch {
			case !tc.refused && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused && (!errors.As(err, &pe) || pe.Status != 403 || pe.Code != pipeline.CodeModelNotPriced || pe.Param != "model"):
				t.Fatalf("got %v, want 403 %s naming model", err, pipeline.CodeModelNotPriced)
			}
		})
	}
}

// TestHoldUnnamed: a call that names no model may be a call of any model,
// so it counts against every rate rule of its tenant and key: the counter
// of a rule naming one model, which the calls naming that model share; a
// counter of its own under a rule of a pattern (whose counters are per
// model); the tenant-wide counters. Its tokens are charged to the same
// counters. Rules of another key do not count it. It used to match only
// the tenant-wide rules, getting around every per-model one.
func TestHoldUnnamed(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, `
[[limits]]
tenant = "u"
model = "gpt-x"
requests_per_minute = 2
[[limits]]
tenant = "g"
model = "gpt-*"
requests_per_minute = 2
[[limits]]
tenant = "w"
requests_per_minute = 2
[[limits]]
tenant = "k"
key = "k1"
model = "gpt-x"
requests_per_minute = 1
[[limits]]
tenant = "tok"
model = "gpt-x"
tokens_per_minute = 100
`, func() Store { return NewMemoryStore() })
	req := func(tenant, key, model string) *pipeline.Request {
		return &pipeline.Request{ID: "r", Model: model, Endpoint: "/v1/images/generations", Body: []byte(`{"prompt":"a cat"}`),
			Tenant: &pipeline.Tenant{Name: tenant, Key: key}}
	}
	take := func(r *pipeline.Request) error {
		hold := fx.l.Hold
		if r.Model == "" {
			hold = fx.l.HoldUnnamed
		}
		c, err := hold(r)
		if err == nil {
			c.End()
		}
		return err
	}
	steps := []struct {
		name, tenant, key, model string
		refused                  bool
	}{
		{name: "a call naming the rule's model", tenant: "u", model: "gpt-x"},
		{name: "a call naming none, on the same counter", tenant: "u"},
		{name: "a third call naming none", tenant: "u", refused: true},
		{name: "a third call naming the model", tenant: "u", model: "gpt-x", refused: true},
		{name: "another model's call", tenant: "u", model: "gpt-y"},
		{name: "a pattern rule's first call naming none", tenant: "g"},
		{name: "a pattern rule's second call naming none", tenant: "g"},
		{name: "a pattern rule's third call naming none", tenant: "g", refused: true},
		{name: "a pattern rule's model, on its own counter", tenant: "g", model: "gpt-4o"},
		{name: "a tenant-wide rule's call naming a model", tenant: "w", model: "gpt-x"},
		{name: "a tenant-wide rule's call naming none", tenant: "w"},
		{name: "a tenant-wide rule's third call", tenant: "w", refused: true},
		{name: "the key's call naming none", tenant: "k", key: "k1"},
		{name: "the key's second call", tenant: "k", key: "k1", model: "gpt-x", refused: true},
		{name: "another key's call naming none", tenant: "k", key: "k2"},
	}
	for _, st := range steps {
		err := take(req(st.tenant, st.key, st.model))
		var pe *pipeline.Error
		switch {
		case !st.refused && err != nil:
			t.Fatalf("%s: refused: %v", st.name, err)
		case st.refused && (!errors.As(err, &pe) || pe.Status != 429):
			t.Fatalf("%s: got %v, want 429", st.name, err)
		}
	}
	// Tokens: a call naming none is charged to the model's token counter.
	c, err := fx.l.HoldUnnamed(req("tok", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	c.Charge(wire.ChatUsage{Prompt: 150}, false)
	c.End()
	fx.l.Flush()
	if err := fx.l.Admit(req("tok", "", "gpt-x")); err == nil {
		t.Error("a call of gpt-x passed after a call naming none spent its tokens")
	}
}

// TestNULModelIsNotUnnamed: a client's model name holding NUL (the
// stand-in for a call that names none) is refused with 400 on both entries,
// Hold and the chat middleware. Before, "\x00" passed a budget as a call
// of a model that names none would not, and was charged nothing.
func TestNULModelIsNotUnnamed(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, `
[[budgets]]
tenant = "b"
amount = 1
period = "day"
`, func() Store { return NewMemoryStore() })
	for _, model := range []string{"\x00", "gpt\x00x"} {
		r := &pipeline.Request{ID: "r", Model: model, Endpoint: "/v1/completions", Body: []byte(`{"prompt":"hi"}`),
			Tenant: &pipeline.Tenant{Name: "b"}}
		c, err := fx.l.Hold(r)
		if c != nil {
			c.End()
		}
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "model" {
			t.Errorf("Hold of model %q under a budget: %v, want 400 naming model", model, err)
		}
		if _, err := fx.do("b", "", model); !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "model" {
			t.Errorf("chat of model %q under a budget: %v, want 400 naming model", model, err)
		}
	}
	if n := fx.calls.Load(); n != 0 {
		t.Errorf("%d calls went upstream", n)
	}
}

// TestChargeOfInsaneUsage: an upstream's usage with a negative count, or
// one so large its cost overflows (1.5e300 reads as math.MaxInt64), is
// charged without a panic: a negative count as none, a huge one as
// maxCallTokens; the token and cost counters, the budget's spend and the
// usage record only grow. Prometheus counters panic on a negative Add:
// through a pass-through's copy goroutine that ended the process.
func TestChargeOfInsaneUsage(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	fx := newFixtureAt(t, `
[[budgets]]
tenant = "insane"
amount = 1000000000000
period = "day"
`, func() Store { return NewMemoryStore() }, func() time.Time { return at })
	counter := func(kind string) float64 {
		return testutil.ToFloat64(tokensTotal.WithLabelValues("insane", "gpt-x", kind))
	}
	spent := func() float64 { return testutil.ToFloat64(costTotal.WithLabelValues("insane", "gpt-x")) }
	report := func() gjson.Result {
		fx.l.Flush()
		b, err := fx.l.Report(context.Background(), UsageQuery{Tenant: "insane", From: at, To: at, GroupBy: "model"})
		if err != nil {
			t.Fatal(err)
		}
		return gjson.GetBytes(b, `data.#(group=="gpt-x")`)
	}
	type snap struct{ in, out, cached, cost, rIn, rOut, rCost float64 }
	take := func() snap {
		r := report()
		return snap{counter("input"), counter("output"), counter("cached"), spent(),
			r.Get("input_tokens").Float(), r.Get("output_tokens").Float(), r.Get("cost_microdollars").Float()}
	}
	prev := take()
	for _, tc := range []struct {
		name   string
		u      wire.ChatUsage
		in     float64 // the input tokens it adds
		out    float64
		cached float64
	}{
		{"negative prompt", wire.ChatUsage{Prompt: -5, Completion: 3}, 0, 3, 0},
		{"negative completion", wire.ChatUsage{Prompt: 4, Completion: -1}, 4, 0, 0},
		{"negative cached", wire.ChatUsage{Prompt: 4, Cached: -100}, 4, 0, 0},
		{"min int64", wire.ChatUsage{Prompt: math.MinInt64, Completion: math.MinInt64, Cached: math.MinInt64}, 0, 0, 0},
		{"max int64 (1.5e300)", wire.ChatUsage{Prompt: math.MaxInt64, Completion: math.MaxInt64, Cached: math.MaxInt64}, maxCallTokens, maxCallTokens, maxCallTokens},
		{"max int64 again", wire.ChatUsage{Prompt: math.MaxInt64, Completion: math.MaxInt64}, maxCallTokens, maxCallTokens, 0},
		// Cached input is part of the input: never more of it.
		{"cached over the prompt", wire.ChatUsage{Prompt: 1200, Completion: 5, Cached: 5000}, 1200, 5, 1200},
	} {
		c, err := fx.l.Hold(&pipeline.Request{ID: "r", Model: "gpt-x", Route: &pipeline.Route{Name: "gpt-x"}, Endpoint: "/v1/embeddings",
			Body: []byte(`{"input":"x"}`), Tenant: &pipeline.Tenant{Name: "insane"}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s: Charge panicked: %v", tc.name, p)
				}
			}()
			c.Charge(tc.u, false)
		}()
		c.End()
		now := take()
		if now.in-prev.in != tc.in || now.out-prev.out != tc.out || now.cached-prev.cached != tc.cached {
			t.Errorf("%s: counted %v input, %v output, %v cached; want %v, %v, %v", tc.name,
				now.in-prev.in, now.out-prev.out, now.cached-prev.cached, tc.in, tc.out, tc.cached)
		}
		if now.rIn-prev.rIn != tc.in || now.rOut-prev.rOut != tc.out {
			t.Errorf("%s: the usage record grew by %v input, %v output; want %v, %v", tc.name, now.rIn-prev.rIn, now.rOut-prev.rOut, tc.in, tc.out)
		}
		if now.cost < prev.cost || now.rCost < prev.rCost || now.rCost < 0 || now.cost > float64(6*maxCallCost) {
			t.Errorf("%s: cost went from %v to %v (record %v to %v)", tc.name, prev.cost, now.cost, prev.rCost, now.rCost)
		}
		if tc.in == 0 && tc.out == 0 && now.cost != prev.cost {
			t.Errorf("%s: nothing charged, but the cost rose by %v", tc.name, now.cost-prev.cost)
		}
		prev = now
	}
	if prev.cost == 0 {
		t.Error("the huge usage cost nothing")
	}
}

// TestCostSaturates: cost is never negative nor over maxCallCost, whatever
// the counts and the price (a NaN or negative price included).
func TestCostSaturates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    config.Price
		t    tokens
		want int64
	}{
		{config.Price{Input: 2, Output: 10}, tokens{input: 10, output: 5}, 70},
		{config.Price{Input: 2, Output: 10}, tokens{input: -10, output: -5}, 0},
		{config.Price{Input: 2, Output: 10, CachedInput: 1}, tokens{input: 10, cached: -100}, 20},
		{config.Price{Input: 2, Output: 10}, tokens{input: math.MaxInt64, output: math.MaxInt64}, 12 * maxCallTokens},
		{config.Price{Input: 1e6, Output: 1e6}, tokens{input: math.MaxInt64, output: math.MaxInt64}, maxCallCost},
		{config.Price{Input: 1e300, Output: 1e300}, tokens{input: 1, output: 1}, maxCallCost},
		{config.Price{Input: -2}, tokens{input: 10}, 0},
		{config.Price{Input: math.NaN()}, tokens{input: 10}, 0},
		{config.Price{Input: math.Inf(1)}, tokens{input: 10}, maxCallCost},
	} {
		if got := cost(tc.p, tc.t); got != tc.want {
			t.Errorf("cost(%+v, %+v) = %d, want %d", tc.p, tc.t, got, tc.want)
		}
	}
	if addSat(math.MaxInt64-1, 5) != math.MaxInt64 || addSat(math.MinInt64+1, -5) != math.MinInt64 || addSat(3, -5) != -2 {
		t.Error("addSat wraps")
	}
}

// A reload that raises a concurrent cap, or puts other rules before it
// (one selecting the same calls with another kind of limit included),
// keeps counting the requests in flight: with 3 of 3 held, a cap raised to
// 4 admits one more, not four (the counter is named by what the rule
// selects, not by its place or its cap). A per-minute rule keeps its
// counter when only another rule is added before it.
func TestReloadKeepsCounters(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, newStore func() Store) {
		st := newStore()
		build := func(toml string) *Limiter {
			cfg, err := config.Parse([]byte(baseTOML + toml))
			if err != nil {
				t.Fatal(err)
			}
			inner, prefix := st, "k:"
			if p, ok := st.(*prefixed); ok {
				inner, prefix = p.Store, "k"+string(rune('a'+p.n))+":"
			}
			l := New(Options{Config: cfg, Store: inner, Prefix: prefix, Logger: zerolog.Nop()})
			t.Cleanup(l.Close)
			return l
		}
		held := func(l *Limiter, n int) (admitted int) {
			h := streaming(l, &pipeline.StreamFunc{NextFunc: func() ([]byte, error) { return nil, nil }, CloseFunc: func() {}})
			for i := range n {
				_, err := h.Chat(context.Background(), &pipeline.Request{ID: "r" + strconv.Itoa(i), Model: "gpt-x", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
				if err == nil {
					admitted++
				}
			}
			return admitted
		}
		rpm := func(l *Limiter) error {
			h := l.Middleware()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				return &pipeline.Response{Body: []byte(`{}`)}, nil
			}))
			_, err := h.Chat(context.Background(), &pipeline.Request{ID: "m", Model: "gpt-y", Meta: &pipeline.Meta{}, Body: []byte(`{}`), Tenant: &pipeline.Tenant{Name: "a"}})
			return err
		}
		const perMinute = "[[limits]]\ntenant = \"*\"\nmodel = \"gpt-y\"\nrequests_per_minute = 1\n"
		before := build("[[limits]]\ntenant = \"*\"\nmodel = \"gpt-x\"\nconcurrent = 3\n" + perMinute)
		if n := held(before, 5); n != 3 {
			t.Fatalf("%d admitted under a cap of 3", n)
		}
		if err := rpm(before); err != nil {
			t.Fatal(err)
		}
		after := build("[[limits]]\ntenant = \"b\"\nrequests_per_minute = 5\n" +
			"[[limits]]\ntenant = \"*\"\nmodel = \"gpt-x\"\nrequests_per_minute = 100\n" + // same selector, another kind

			"[[limits]]\ntenant = \"*\"\nmodel = \"gpt-x\"\nconcurrent = 4\n" + perMinute)
		if n := held(after, 5); n != 1 {
			t.Fatalf("with 3 in flight, %d admitted under the raised cap of 4", n)
		}
		if err := rpm(after); err == nil {
			t.Fatal("the per-minute counter started afresh when a rule was put before it")
		}
	})
}

// A rule naming a tenant no key has is logged: a typo applies it to nobody.
func TestUnknownCallerIsLogged(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(baseTOML + "[[keys]]\ntenant=\"team-a\"\nkey=\"sk-1\"\n[[limits]]\ntenant=\"team_a\"\nrequests_per_minute=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	l := New(Options{Config: cfg, Logger: zerolog.New(&log)})
	defer l.Close()
	if !strings.Contains(log.String(), `"key":"limits[0].tenant","name":"team_a"`) {
		t.Fatalf("log: %s", log.String())
	}
}

// A JSON answer without usage is charged an estimate of its output too, as
// a stream without usage is counted from its chunks: an upstream that
// reports no usage does not answer for free.
func TestAnswerWithoutUsageChargesOutput(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, "", NewMemoryStore, "")
	answer := strings.Repeat("the fox crossed the river near the old mill. ", 100)
	up := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"` + answer + `"},"finish_reason":"stop"}]}`)}, nil
	})
	chain := pipeline.Chain(l.Meter(up), l.Middleware())
	r := &pipeline.Request{ID: "r1", Model: "gpt-x", Meta: &pipeline.Meta{},
		Body: []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hello there"}]}`), Tenant: &pipeline.Tenant{Name: "a"}}
	if _, err := chain.Chat(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	l.Flush()
	today := time.Now().UTC()
	body, err := l.Report(context.Background(), UsageQuery{From: today, To: today, GroupBy: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	// A token per four bytes of its text: 1,125.
	if out := gjson.GetBytes(body, `data.#(group=="a").output_tokens`).Int(); out < 1000 || out > 1250 {
		t.Fatalf("output tokens charged for a 4,500-byte answer without usage: %d (%s)", out, body)
	}
}

// A default price is a listed model's, or a dated snapshot's of it; a model
// whose name only starts with a listed one has prices of its own (o3-pro
// is ten times o3's) and gets none: under a budget it is refused as
// unpriced, not charged a tenth.
func TestDefaultPriceMatchesSnapshotsOnly(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]bool{
		"gpt-4o": true, "gpt-4o-2024-08-06": true, "o3-2025-04-16": true, "gpt-4o-mini-2024-07-18": true,
		"o3-pro": false, "o3-deep-research": false, "gpt-4o-realtime-preview": false, "gpt-4o-audio-preview-2024-12-17": false,
		"o4-mini-deep-research": false, "gpt-4o-": false, "gpt-4o-x2024": false,
	} {
		if _, ok := priceFor(nil, model); ok != want {
			t.Errorf("%s: priced %v, want %v", model, ok, want)
		}
	}
	if p, _ := priceFor(nil, "gpt-4o-mini-2024-07-18"); p.Input != 0.15 {
		t.Errorf("a mini snapshot priced as %+v", p)
	}
}
