package fallback

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func intp(n int) *int { return &n }

func TestRetryThenSuccess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fail      error
		wantCalls int
	}{
		{name: "500", fail: status(500, `{}`), wantCalls: 2},
		{name: "503", fail: status(503, `{}`), wantCalls: 2},
		{name: "429", fail: status(429, `{}`), wantCalls: 2},
		{name: "408", fail: status(408, `{}`), wantCalls: 2},
		{name: "409", fail: status(409, `{}`), wantCalls: 2},
		{name: "connect", fail: &pipeline.UpstreamError{Kind: pipeline.UpstreamConnect, Err: errors.New("refused")}, wantCalls: 2},
		{name: "timeout", fail: &pipeline.UpstreamError{Kind: pipeline.UpstreamTimeout, Err: errors.New("first byte")}, wantCalls: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(Options{}, map[string][]step{"p/m": {{err: tc.fail}, {body: `{"id":"ok"}`}}}, false,
				rt("m", 0, nil, dep("p", "m", 1)))
			resp, req, err := e.chat(t, "m", false)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if string(resp.Body) != `{"id":"ok"}` {
				t.Fatalf("body = %s", resp.Body)
			}
			if got := e.f.count("p/m"); got != tc.wantCalls {
				t.Fatalf("calls = %d, want %d", got, tc.wantCalls)
			}
			if got := req.Meta.Get(HeaderAttempts); got != "2" {
				t.Fatalf("attempts header = %q", got)
			}
			if got := req.Meta.Get(HeaderModel); got != "m" {
				t.Fatalf("model header = %q", got)
			}
			if got := len(e.sl.all()); got != 1 {
				t.Fatalf("sleeps = %d, want 1", got)
			}
			if req.Target != nil {
				t.Fatal("the caller's request was mutated")
			}
		})
	}
}

func TestRetriesExhausted(t *testing.T) {
	t.Parallel()
	fail := status(502, `{}`)
	e := newEnv(Options{Providers: []config.Provider{{Name: "p", Retries: intp(3)}}},
		map[string][]step{"p/m": {{err: fail}}}, false, rt("m", 0, nil, dep("p", "m", 1)))
	_, req, err := e.chat(t, "m", false)
	if err != fail {
		t.Fatalf("err = %v, want the last upstream error", err)
	}
	if got := e.f.count("p/m"); got != 4 {
		t.Fatalf("calls = %d, want 1 + 3 retries", got)
	}
	if got := req.Meta.Get(HeaderAttempts); got != "4" {
		t.Fatalf("attempts header = %q", got)
	}
	// Exponential full jitter with Rand = 0.5: half of 200ms, 400ms, 800ms.
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if got := e.sl.all(); !slices.Equal(got, want) {
		t.Fatalf("sleeps = %v, want %v", got, want)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		retryAfter time.Duration
		cap        time.Duration
		want       time.Duration
	}{
		{name: "honoured", retryAfter: time.Second, cap: 10 * time.Second, want: time.Second},
		{name: "capped", retryAfter: 30 * time.Second, cap: 2 * time.Second, want: 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ue := status(429, `{}`)
			ue.RetryAfter = tc.retryAfter
			e := newEnv(Options{Providers: []config.Provider{{Name: "p", RetryAfterCap: config.Duration(tc.cap)}}},
				map[string][]step{"p/m": {{err: ue}, {body: `{}`}}}, false, rt("m", 0, nil, dep("p", "m", 1)))
			if _, _, err := e.chat(t, "m", false); err != nil {
				t.Fatal(err)
			}
			got := e.sl.all()
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("sleeps = %v, want [%v]", got, tc.want)
			}
		})
	}
}

func TestFallbackAnswers(t *testing.T) {
	t.Parallel()
	for _, nested := range []bool{true, false} {
		name := "direct"
		if nested {
			name = "model_layer"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(Options{}, map[string][]step{
				"p/big":   {{err: status(503, `{}`)}},
				"q/small": {{body: `{"id":"fb"}`}},
			}, nested,
				rt("big", 0, []string{"missing", "small"}, dep("p", "big", 1)),
				rt("small", 0, []string{"big"}, dep("q", "small", 1)))
			resp, req, err := e.chat(t, "big", false)
			if err != nil {
				t.Fatal(err)
			}
			if string(resp.Body) != `{"id":"fb"}` {
				t.Fatalf("body = %s", resp.Body)
			}
			if got := req.Meta.Get(HeaderModel); got != "small" {
				t.Fatalf("model header = %q", got)
			}
			if got := req.Meta.Get(HeaderAttempts); got != "4" {
				t.Fatalf("attempts header = %q, want 3 on big + 1 on small", got)
			}
			if e.f.count("p/big") != 3 || e.f.count("q/small") != 1 {
				t.Fatalf("calls = %v", e.f.calls)
			}
			last := e.f.requests()[3]
			if tg := last.TargetOrDefault(); last.Route.Name != "small" || tg == nil || tg.Upstream != "small" {
				t.Fatalf("fallback request route %q target %+v", last.Route.Name, tg)
			}
			if string(last.Body) != `{"model":"big"}` || last.Model != "big" {
				t.Fatalf("fallback body %s model %q: the upstream client renames, not fallback", last.Body, last.Model)
			}
			if req.Route.Name != "big" || req.Target != nil {
				t.Fatal("the caller's request was mutated")
			}
		})
	}
}

func TestAllFail(t *testing.T) {
	t.Parallel()
	last := status(500, `{"error":{"message":"down"}}`)
	e := newEnv(Options{Providers: []config.Provider{{Name: "p", Retries: intp(0)}, {Name: "q", Retries: intp(0)}}},
		map[string][]step{"p/a": {{err: status(503, `{}`)}}, "q/b": {{err: last}}}, true,
		rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("q", "b", 1)))
	_, req, err := e.chat(t, "a", false)
	if err != last {
		t.Fatalf("err = %v, want the last upstream error", err)
	}
	if req.Meta.Get(HeaderModel) != "" || req.Meta.Get(HeaderAttempts) != "2" {
		t.Fatalf("headers = %v", req.Meta.Headers())
	}
}

func TestContextLengthFallback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
	}{
		{name: "code", body: `{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`},
		{name: "openai_message", body: `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","code":null}}`},
		{name: "anthropic", body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`},
	}
	for _, tc := range tests {
		for _, nested := range []bool{true, false} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(Options{}, map[string][]step{"p/mid": {{err: status(400, tc.body)}}}, nested,
					rt("mid", 8000, []string{"small", "same", "large"}, dep("p", "mid", 1)),
					rt("small", 4000, nil, dep("p", "small", 1)),
					rt("same", 8000, nil, dep("p", "same", 1)),
					rt("large", 128000, nil, dep("p", "large", 1)))
				_, req, err := e.chat(t, "mid", false)
				if err != nil {
					t.Fatal(err)
				}
				if got := req.Meta.Get(HeaderModel); got != "large" {
					t.Fatalf("model header = %q", got)
				}
				want := map[string]int{"p/mid": 1, "p/small": 0, "p/same": 0, "p/large": 1}
				for k, n := range want {
					if got := e.f.count(k); got != n {
						t.Errorf("%s calls = %d, want %d", k, got, n)
					}
				}
			})
		}
	}
}

func TestContextLengthNoLargerModel(t *testing.T) {
	t.Parallel()
	ue := status(400, `{"error":{"code":"context_length_exceeded","message":"x"}}`)
	e := newEnv(Options{}, map[string][]step{"p/mid": {{err: ue}}}, true,
		rt("mid", 8000, []string{"small"}, dep("p", "mid", 1)),
		rt("small", 4000, nil, dep("p", "small", 1)))
	_, _, err := e.chat(t, "mid", false)
	if err != ue {
		t.Fatalf("err = %v, want the context-length error", err)
	}
	if e.f.count("p/small") != 0 || e.f.count("p/mid") != 1 {
		t.Fatalf("calls = %v", e.f.calls)
	}
}

func TestNotRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
	}{
		{name: "400", err: status(400, `{"error":{"message":"bad temperature","code":"invalid_value"}}`)},
		{name: "401", err: status(401, `{}`)},
		{name: "403", err: status(403, `{}`)},
		{name: "404", err: status(404, `{}`)},
		{name: "422", err: status(422, `{}`)},
		{name: "gateway_error", err: pipeline.BadRequest("messages", "too large even after editing")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(Options{}, map[string][]step{"p/a": {{err: tc.err}}}, true,
				rt("a", 1000, []string{"b"}, dep("p", "a", 1)), rt("b", 100000, nil, dep("p", "b", 1)))
			_, _, err := e.chat(t, "a", false)
			if err != tc.err {
				t.Fatalf("err = %v, want it as it is", err)
			}
			if e.f.count("p/a") != 1 || e.f.count("p/b") != 0 {
				t.Fatalf("calls = %v", e.f.calls)
			}
			if len(e.sl.all()) != 0 {
				t.Fatal("slept before returning a client error")
			}
		})
	}
}

func TestDeploymentsUntriedFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(Options{}, map[string][]step{"p/m": {{err: status(500, `{}`)}}, "q/m": {{body: `{"id":"q"}`}}}, false,
		rt("m", 0, nil, dep("p", "m", 1000), dep("q", "m", 1)))
	resp, req, err := e.chat(t, "m", false)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Body) != `{"id":"q"}` || req.Meta.Get(HeaderAttempts) != "2" {
		t.Fatalf("body %s attempts %s", resp.Body, req.Meta.Get(HeaderAttempts))
	}
	if len(e.sl.all()) != 0 {
		t.Fatal("slept before trying an untried deployment")
	}
}

func TestWeightedChoice(t *testing.T) {
	t.Parallel()
	var seq uint64
	det := func() float64 { // a deterministic, evenly spread sequence
		seq++
		return float64((seq*7919)%1000) / 1000
	}
	e := newEnv(Options{Rand: det}, nil, false,
		rt("m", 0, nil, dep("a", "m", 3), dep("b", "m", 1), dep("c", "m", 1)))
	const n = 4000
	for range n {
		if _, _, err := e.chat(t, "m", false); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := e.f.count("a/m"), e.f.count("b/m"), e.f.count("c/m")
	if a+b+c != n {
		t.Fatalf("calls %d+%d+%d != %d", a, b, c, n)
	}
	// Weights 3:1:1.
	for _, got := range []struct {
		name string
		n    int
		want float64
	}{{"a", a, 0.6}, {"b", b, 0.2}, {"c", c, 0.2}} {
		if f := float64(got.n) / n; f < got.want-0.03 || f > got.want+0.03 {
			t.Errorf("%s share = %.3f, want ≈ %.2f", got.name, f, got.want)
		}
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "body", true: "stream"}[stream], func(t *testing.T) {
			t.Parallel()
			e := newEnv(Options{Fallback: config.Fallback{Deadline: config.Duration(100 * time.Millisecond)}},
				map[string][]step{"p/a": {{block: true}}}, true,
				rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("p", "b", 1)))
			start := time.Now()
			_, _, err := e.chat(t, "a", stream)
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("took %v", el)
			}
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamTimeout || !errors.Is(err, ErrDeadline) {
				t.Fatalf("err = %v, want an upstream timeout from the deadline", err)
			}
			if e.f.count("p/b") != 0 {
				t.Fatal("fallback called after the deadline")
			}
		})
	}
}

func TestDeadlineSkipsLongBackoff(t *testing.T) {
	t.Parallel()
	clk := newClock()
	fail := status(503, `{}`)
	fail.RetryAfter = 9 * time.Second
	e := newEnv(Options{Now: clk.Now, Fallback: config.Fallback{Deadline: config.Duration(5 * time.Second)}},
		map[string][]step{"p/a": {{err: fail}}}, true,
		rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("p", "b", 1)))
	_, req, err := e.chat(t, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.sl.all()) != 0 || e.f.count("p/a") != 1 || req.Meta.Get(HeaderModel) != "b" {
		t.Fatalf("sleeps %v calls %v model %q: a wait past the deadline must not be taken",
			e.sl.all(), e.f.calls, req.Meta.Get(HeaderModel))
	}
}

func TestAttemptsAccumulateOverRounds(t *testing.T) {
	t.Parallel()
	e := newEnv(Options{}, nil, false, rt("m", 0, nil, dep("p", "m", 1)))
	r := e.routes["m"]
	meta := &pipeline.Meta{}
	h := e.mw(e.f)
	for range 3 {
		req := &pipeline.Request{Model: "m", Body: []byte(`{}`), Route: r, Meta: meta}
		if _, err := h.Chat(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	if got := meta.Get(HeaderAttempts); got != "3" {
		t.Fatalf("attempts = %q", got)
	}
}

func TestNoDeployments(t *testing.T) {
	t.Parallel()
	f := newFake(nil)
	h := New(withDefaults(Options{}), nil)(f)
	req := &pipeline.Request{Route: &pipeline.Route{Name: "x"}, Meta: &pipeline.Meta{}}
	resp, err := h.Chat(t.Context(), req)
	if err != nil || !strings.Contains(string(resp.Body), "ok") {
		t.Fatalf("resp %v err %v", resp, err)
	}
}

// A target whose provider cannot honour a field of the request (the
// Anthropic provider refuses logprobs before any call) is skipped, not
// retried: the route's other deployment, or the next fallback, answers.
// Its refusal is the client's answer only when nothing else failed; an
// earlier upstream failure says more.
func TestUnsupportedParameterMovesOn(t *testing.T) {
	t.Parallel()
	unsupported := &pipeline.Error{Status: 400, Type: "invalid_request_error", Code: pipeline.CodeUnsupportedParameter, Param: "logprobs", Message: "no logprobs"}
	for _, nested := range []bool{true, false} {
		t.Run("fallback", func(t *testing.T) {
			t.Parallel()
			e := newEnv(Options{}, map[string][]step{
				"a/claude": {{err: unsupported}},
				"o/gpt":    {{body: `{"id":"gpt"}`}},
			}, nested, rt("claude", 0, []string{"gpt"}, dep("a", "claude", 1)), rt("gpt", 0, nil, dep("o", "gpt", 1)))
			resp, req, err := e.chat(t, "claude", false)
			if err != nil || string(resp.Body) != `{"id":"gpt"}` || req.Meta.Get(HeaderModel) != "gpt" {
				t.Fatalf("err %v, resp %+v: want gpt's answer", err, resp)
			}
			if n := e.f.count("a/claude"); n != 1 {
				t.Fatalf("claude called %d times: a refusal before the call is not retried", n)
			}
			if got := req.Meta.Get(HeaderAttempts); got != "1" {
				t.Fatalf("attempts header = %q: the refusal made no upstream call", got)
			}
		})
		t.Run("earlier failure wins", func(t *testing.T) {
			t.Parallel()
			down := status(503, `{}`)
			e := newEnv(Options{Providers: []config.Provider{{Name: "o", Retries: intp(0)}}}, map[string][]step{
				"o/gpt":    {{err: down}},
				"a/claude": {{err: unsupported}},
			}, nested, rt("gpt", 0, []string{"claude"}, dep("o", "gpt", 1)), rt("claude", 0, nil, dep("a", "claude", 1)))
			if _, _, err := e.chat(t, "gpt", false); err != down {
				t.Fatalf("err = %v, want the primary's 503", err)
			}
		})
		t.Run("nothing else", func(t *testing.T) {
			t.Parallel()
			e := newEnv(Options{}, map[string][]step{"a/claude": {{err: unsupported}}}, nested, rt("claude", 0, nil, dep("a", "claude", 1)))
			if _, _, err := e.chat(t, "claude", false); err != unsupported {
				t.Fatalf("err = %v, want the refusal", err)
			}
		})
	}
	t.Run("other deployment", func(t *testing.T) {
		t.Parallel()
		e := newEnv(Options{}, map[string][]step{
			"a/m": {{err: unsupported}},
			"o/m": {{body: `{"id":"o"}`}},
		}, false, rt("m", 0, nil, dep("a", "m", 1000), dep("o", "m", 1)))
		resp, _, err := e.chat(t, "m", false)
		if err != nil || string(resp.Body) != `{"id":"o"}` {
			t.Fatalf("err %v: want the other deployment's answer", err)
		}
		if n := e.f.count("a/m"); n != 1 {
			t.Fatalf("the refusing deployment was called %d times", n)
		}
	})
}

// A primary that fails with a retryable error (a 429 with its retry-after,
// a 500) and whose only fallback is too small for the prompt answers with
// the primary's error: the fallback's context-length refusal says nothing
// of why the primary failed, and turned a retryable 429 into a final 400.
// A context-length error of the primary itself still stands.
func TestSmallFallbackKeepsThePrimaryError(t *testing.T) {
	t.Parallel()
	limited := status(429, `{"error":{"message":"slow down","code":"rate_limit_exceeded"}}`)
	tooLong := status(400, `{"error":{"code":"context_length_exceeded","message":"too long"}}`)
	e := newEnv(Options{}, map[string][]step{"p/big": {{err: limited}, {err: limited}, {err: limited}}, "p/small": {{err: tooLong}}}, true,
		rt("big", 100000, []string{"small"}, dep("p", "big", 1)),
		rt("small", 50, nil, dep("p", "small", 1)))
	_, _, err := e.chat(t, "big", false)
	if err != limited {
		t.Fatalf("err = %v, want the primary's 429", err)
	}
}
