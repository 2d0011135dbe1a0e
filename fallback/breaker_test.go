package fallback

import (
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testmetrics"
	"github.com/llmgw/gateway/pipeline"
)

func breakerOpts(clk *clock, failures int) Options {
	return Options{
		Now:       clk.Now,
		Providers: []config.Provider{{Name: "p", Retries: intp(0)}, {Name: "q", Retries: intp(0)}},
		Fallback:  config.Fallback{BreakerFailures: failures, BreakerCooldown: config.Duration(30 * time.Second)},
	}
}

func TestBreakerOpensAndSkips(t *testing.T) {
	t.Parallel()
	clk := newClock()
	e := newEnv(breakerOpts(clk, 3), map[string][]step{"p/a": {{err: status(500, `{}`)}}}, false,
		rt("a", 0, nil, dep("p", "a", 1)))
	for i := range 3 {
		if _, _, err := e.chat(t, "a", false); classify(err) != classRetryable {
			t.Fatalf("request %d: err = %v", i, err)
		}
	}
	_, req, err := e.chat(t, "a", false)
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != 503 || pe.Code != "circuit_open" || !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("err = %v, want 503 circuit_open", err)
	}
	if pe.RetryAfter != 30*time.Second {
		t.Fatalf("RetryAfter = %v, want the cooldown", pe.RetryAfter)
	}
	if got := e.f.count("p/a"); got != 3 {
		t.Fatalf("calls = %d: an open deployment was called", got)
	}
	if got := req.Meta.Get(HeaderAttempts); got != "0" {
		t.Fatalf("attempts = %q", got)
	}
}

func TestBreakerOpenFallsBack(t *testing.T) {
	t.Parallel()
	clk := newClock()
	e := newEnv(breakerOpts(clk, 2), map[string][]step{"p/a": {{err: status(503, `{}`)}}}, true,
		rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("q", "b", 1)))
	for range 4 {
		_, req, err := e.chat(t, "a", false)
		if err != nil || req.Meta.Get(HeaderModel) != "b" {
			t.Fatalf("err %v model %q", err, req.Meta.Get(HeaderModel))
		}
	}
	if e.f.count("p/a") != 2 || e.f.count("q/b") != 4 {
		t.Fatalf("calls %v", e.f.calls)
	}
}

func TestBreakerSkipsOpenDeployment(t *testing.T) {
	t.Parallel()
	clk := newClock()
	e := newEnv(breakerOpts(clk, 1), map[string][]step{"p/m": {{err: status(500, `{}`)}}}, false,
		rt("m", 0, nil, dep("p", "m", 1), dep("q", "m", 1)))
	e.routes["m"].Deployments[0].Weight = 1000 // p is always drawn first while it is closed
	for range 5 {
		if _, _, err := e.chat(t, "m", false); err != nil {
			t.Fatal(err)
		}
	}
	if e.f.count("p/m") != 1 || e.f.count("q/m") != 5 {
		t.Fatalf("calls %v", e.f.calls)
	}
}

func TestBreakerIgnoresClientErrors(t *testing.T) {
	t.Parallel()
	clk := newClock()
	e := newEnv(breakerOpts(clk, 2), map[string][]step{"p/a": {{err: status(400, `{}`)}}}, false,
		rt("a", 0, nil, dep("p", "a", 1)))
	for range 5 {
		if _, _, err := e.chat(t, "a", false); classify(err) != classFatal {
			t.Fatalf("err = %v", err)
		}
	}
	if got := e.f.count("p/a"); got != 5 {
		t.Fatalf("calls = %d: 400s opened the circuit", got)
	}
}

// A 429 is retried and falls back, but does not open the circuit: the
// deployment is up and says when to come back, and an open circuit
// refused every caller for its whole cooldown.
func TestBreakerIgnoresRateLimits(t *testing.T) {
	t.Parallel()
	clk := newClock()
	e := newEnv(breakerOpts(clk, 2), map[string][]step{"p/a": {{err: status(429, `{}`)}}}, false,
		rt("a", 0, nil, dep("p", "a", 1)))
	for range 5 {
		if _, _, err := e.chat(t, "a", false); classify(err) != classRetryable {
			t.Fatalf("err = %v", err)
		}
	}
	if got := e.f.count("p/a"); got != 5 {
		t.Fatalf("calls = %d: 429s opened the circuit", got)
	}
	// A spent quota does not pass with time: it opens the circuit.
	quota := newEnv(breakerOpts(clk, 2), map[string][]step{"p/a": {{err: status(429, `{"error":{"code":"insufficient_quota","type":"insufficient_quota"}}`)}}}, false,
		rt("a", 0, nil, dep("p", "a", 1)))
	for range 5 {
		quota.chat(t, "a", false)
	}
	if got := quota.f.count("p/a"); got != 2 {
		t.Fatalf("calls = %d: a spent quota did not open the circuit", got)
	}
}

func TestBreakerHalfOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		probe     step
		wantAfter int // calls made by the two requests after the probe
	}{
		{name: "probe_succeeds_closes", probe: step{body: `{}`}, wantAfter: 2},
		{name: "probe_fails_reopens", probe: step{err: status(500, `{}`)}, wantAfter: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			fail := step{err: status(500, `{}`)}
			e := newEnv(breakerOpts(clk, 2), map[string][]step{"p/a": {fail, fail, tc.probe, {body: `{}`}}}, false,
				rt("a", 0, nil, dep("p", "a", 1)))
			e.chat(t, "a", false)
			e.chat(t, "a", false)
			clk.Advance(29 * time.Second)
			if _, _, err := e.chat(t, "a", false); !errors.Is(err, ErrCircuitOpen) || e.f.count("p/a") != 2 {
				t.Fatalf("before the cooldown: err %v calls %d", err, e.f.count("p/a"))
			}
			clk.Advance(2 * time.Second)
			_, _, err := e.chat(t, "a", false)
			if e.f.count("p/a") != 3 {
				t.Fatalf("no half-open probe after the cooldown (calls %d)", e.f.count("p/a"))
			}
			if (tc.probe.err == nil) != (err == nil) {
				t.Fatalf("probe err = %v", err)
			}
			e.chat(t, "a", false)
			e.chat(t, "a", false)
			if got := e.f.count("p/a") - 3; got != tc.wantAfter {
				t.Fatalf("calls after the probe = %d, want %d", got, tc.wantAfter)
			}
		})
	}
}

// A half-open probe that panics below the fallback layer (a bug; the
// request's recovery answers it with a 500) frees the probe slot: the next
// request probes again instead of every request finding the circuit open
// until the next reload.
func TestBreakerProbePanicFreesTheProbe(t *testing.T) {
	t.Parallel()
	clk := newClock()
	fail := step{err: status(500, `{}`)}
	e := newEnv(breakerOpts(clk, 2), map[string][]step{"p/a": {fail, fail, {panics: true}, {body: `{}`}}}, false,
		rt("a", 0, nil, dep("p", "a", 1)))
	e.chat(t, "a", false)
	e.chat(t, "a", false)
	clk.Advance(31 * time.Second)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the probe did not panic")
			}
		}()
		e.chat(t, "a", false)
	}()
	if _, _, err := e.chat(t, "a", false); err != nil || e.f.count("p/a") != 4 {
		t.Fatalf("after a panicked probe: err %v, calls %d (want a new probe that answers)", err, e.f.count("p/a"))
	}
}

func TestBreakerOneProbe(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := newBreaker(1, time.Second, "p", "probe-test", zerolog.Nop())
	ok, _ := b.allow(clk.Now())
	if !ok {
		t.Fatal("closed breaker refused")
	}
	b.done(clk.Now(), false, resultFailure)
	if ok, _ := b.allow(clk.Now()); ok || b.available(clk.Now()) {
		t.Fatal("open breaker admitted a request")
	}
	clk.Advance(time.Second)
	ok, probe := b.allow(clk.Now())
	if !ok || !probe {
		t.Fatal("no probe after the cooldown")
	}
	if ok, _ := b.allow(clk.Now()); ok {
		t.Fatal("a second request went through while the probe is in flight")
	}
	b.done(clk.Now(), true, resultNeutral)
	if ok, probe := b.allow(clk.Now()); !ok || !probe {
		t.Fatal("a neutral probe did not free the half-open slot")
	}
	b.done(clk.Now(), true, resultSuccess)
	if ok, probe := b.allow(clk.Now()); !ok || probe {
		t.Fatal("breaker not closed after a successful probe")
	}
}

// A route whose one deployment refuses the request before any call (a
// provider that cannot honour a field), falling back to a model whose
// circuit is open, answers 503 circuit_open: retrying later may help,
// where the refusal would say the request itself cannot be served.
func TestRefusalBehindOpenCircuitIsCircuitOpen(t *testing.T) {
	t.Parallel()
	clk := newClock()
	unsupported := &pipeline.Error{Status: 400, Type: "invalid_request_error", Code: pipeline.CodeUnsupportedParameter, Param: "logprobs", Message: "no logprobs"}
	for _, nested := range []bool{true, false} {
		e := newEnv(breakerOpts(clk, 1), map[string][]step{
			"q/claude": {{err: unsupported}},
			"p/gpt":    {{err: status(500, `{}`)}},
		}, nested, rt("claude", 0, []string{"gpt"}, dep("q", "claude", 1)), rt("gpt", 0, nil, dep("p", "gpt", 1)))
		if _, _, err := e.chat(t, "gpt", false); classify(err) != classRetryable { // opens gpt's circuit
			t.Fatalf("err = %v", err)
		}
		if _, _, err := e.chat(t, "claude", false); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("nested %v: err = %v, want 503 circuit_open", nested, err)
		}
	}
}

// A spent quota (an upstream's 429 insufficient_quota) is not retried on
// its deployment, where no wait makes it pass: the request falls back at
// once.
func TestSpentQuotaFallsBackWithoutRetry(t *testing.T) {
	t.Parallel()
	quota := status(429, `{"error":{"message":"m","type":"billing_error","code":"insufficient_quota"}}`)
	e := newEnv(Options{}, map[string][]step{"p/a": {{err: quota}, {err: quota}, {err: quota}}, "q/b": {{body: `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`}}}, false,
		rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("q", "b", 1)))
	if _, req, err := e.chat(t, "a", false); err != nil || req.Meta.Get(HeaderModel) != "b" {
		t.Fatalf("err %v, served by %q", err, req.Meta.Get(HeaderModel))
	}
	if n := e.f.count("p/a"); n != 1 {
		t.Fatalf("%d calls to the deployment whose quota is spent", n)
	}
}

// circuitSeries reports whether the circuit-state series of the deployment
// exists.
func circuitSeries(t *testing.T, provider, upstream string) bool {
	t.Helper()
	return testmetrics.HasSeries(t, "gateway_fallback_circuit_state", map[string]string{"provider": provider, "upstream": upstream})
}

// A deployment a reload removed loses its circuit-state series when the
// old runtime's middleware is released (its last state, an open circuit,
// would otherwise stay on /metrics for good); one the new runtime still has
// keeps its series.
func TestReleaseDropsRemovedDeploymentsCircuitSeries(t *testing.T) {
	models := func(names ...string) []config.Model {
		var ms []config.Model
		for _, n := range names {
			ms = append(ms, config.Model{Name: n, Deployments: []config.Deployment{{Provider: "reload-p", Upstream: n}}})
		}
		return ms
	}
	var oldRelease, newRelease func()
	New(withDefaults(Options{Models: models("kept", "removed"), OnClose: func(r func()) { oldRelease = r }}), nil)
	if !circuitSeries(t, "reload-p", "kept") || !circuitSeries(t, "reload-p", "removed") {
		t.Fatal("no series for the configured deployments")
	}
	New(withDefaults(Options{Models: models("kept"), OnClose: func(r func()) { newRelease = r }}), nil)
	if oldRelease == nil || newRelease == nil {
		t.Fatal("OnClose not called")
	}
	oldRelease()
	if !circuitSeries(t, "reload-p", "kept") || circuitSeries(t, "reload-p", "removed") {
		t.Fatalf("after the old runtime's release: kept %v, removed %v; want true, false",
			circuitSeries(t, "reload-p", "kept"), circuitSeries(t, "reload-p", "removed"))
	}
	newRelease()
	if circuitSeries(t, "reload-p", "kept") {
		t.Fatal("the last holder's release kept the series")
	}
}
