package gateway

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// roundsConfig: gpt-x priced at $2 input / $10 output per million tokens,
// the calculator as the only server tool, and up to 10 rounds; {{LIMITS}}
// is replaced by each test's limits and budgets (for the tenant "default":
// the harness's key names none).
const roundsConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
api_key = "sk-upstream-secret"
retries = 0
[[models]]
name = "gpt-x"
provider = "up"
upstream = "up-model"
context_window = 100000
price = { input = 2, output = 10 }
[[tools]]
name = "calculator"
kind = "builtin"
[tool_loop]
max_iterations = 10
keepalive_interval = "100ms"
{{LIMITS}}
`

// calcRounds calls the calculator in every round until the request has
// rounds-1 tool results, then answers; each call reports 100 prompt and
// 10 completion tokens: 110 tokens, 300 µ$ at roundsConfig's price.
func calcRounds(rounds int) func(*mockllm.Call) mockllm.Turn {
	return func(c *mockllm.Call) mockllm.Turn {
		u := &mockllm.Usage{Prompt: 100, Completion: 10}
		if len(gjson.GetBytes(c.Body, `messages.#(role=="tool")#`).Array()) >= rounds-1 {
			return mockllm.Turn{Text: "done", Usage: u}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: u}
	}
}

// loopBody is a tool-loop request, streamed or not.
func loopBody(stream bool) string {
	if stream {
		return `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"compute"}]}`
	}
	return `{"model":"gpt-x","messages":[{"role":"user","content":"compute"}]}`
}

// eachLoopForm runs f in parallel subtests for a JSON answer and a stream,
// each with a gateway of its own on roundsConfig with limits, whose model
// answers with calcRounds(rounds).
func eachLoopForm(t *testing.T, limits string, rounds int, f func(t *testing.T, h *harness, stream bool)) {
	t.Helper()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, strings.Replace(roundsConfig, "{{LIMITS}}", limits, 1), mockllm.Options{Respond: calcRounds(rounds)})
			f(t, h, stream)
		})
	}
}

// streamError returns the error object of the stream's error event
// ("event: error"), and whether the stream ended with it (nothing but
// [DONE] after it).
func streamError(body []byte) (gjson.Result, bool) {
	events := bytes.Split(bytes.TrimSpace(body), []byte("\n\n"))
	for i, ev := range events {
		data, ok := bytes.CutPrefix(ev, []byte("event: error\ndata: "))
		if !ok {
			continue
		}
		if e := gjson.GetBytes(data, "error"); e.Exists() {
			rest := events[i+1:]
			return e, len(rest) == 0 || (len(rest) == 1 && string(rest[0]) == "data: [DONE]")
		}
	}
	return gjson.Result{}, false
}

// loopRefused posts a tool-loop request that its limits stop, and returns
// the error that ended it: a JSON answer's, which must be a 429 (with its
// Retry-After header), or the error event a stream must end with.
func loopRefused(t *testing.T, h *harness, stream bool) (e gjson.Result, hdr http.Header) {
	t.Helper()
	status, hdr, body := h.post("/chat/completions", loopBody(stream), nil)
	if !stream {
		if status != 429 {
			t.Fatalf("status %d %s, want 429", status, body)
		}
		return gjson.GetBytes(body, "error"), hdr
	}
	if status != 200 {
		t.Fatalf("stream status %d %s", status, body)
	}
	e, last := streamError(body)
	if !last {
		t.Fatalf("the stream does not end with an error event:\n%s", body)
	}
	return e, nil
}

// A loop's later rounds pass the tenant's budget: once the request's own
// rounds have spent it, the next model call is not made. The JSON answer is
// the request layer's 429 insufficient_quota; a stream, already answering,
// ends with that error as its error event. The rounds made are charged.
func TestLoopRoundRefusedWhenBudgetSpent(t *testing.T) {
	t.Parallel()
	// 500 µ$: round 1 spends 300 (under), round 2 another 300 (over):
	// round 3 is refused.
	eachLoopForm(t, `
[[budgets]]
tenant = "default"
amount = 0.0005
period = "day"
`, 5, func(t *testing.T, h *harness, stream bool) {
		e, _ := loopRefused(t, h, stream)
		if e.Get("code").Str != "insufficient_quota" || e.Get("type").Str != "insufficient_quota" {
			t.Fatalf("error %s, want insufficient_quota", e.Raw)
		}
		if n := h.mock.TotalCalls(); n != 2 {
			t.Fatalf("upstream calls %d, want 2 (the third round refused)", n)
		}
		// Both rounds were charged: the next request is refused up front.
		if status, _, body := h.post("/chat/completions", loopBody(false), nil); status != 429 || gjson.GetBytes(body, "error.code").Str != "insufficient_quota" {
			t.Fatalf("next request: %d %s", status, body)
		}
		if n := h.mock.TotalCalls(); n != 2 {
			t.Fatalf("upstream calls %d after a refused request", n)
		}
	})
}

// A loop's later rounds pass the tenant's tokens_per_minute: once the
// request's own rounds have used it up, the next model call is not made,
// with the request layer's 429 rate_limit_exceeded and its retry-after; a
// JSON answer's x-ratelimit-*-tokens say the counter that refused is spent,
// not what remained when the request was admitted.
func TestLoopRoundRefusedWhenTokensSpent(t *testing.T) {
	t.Parallel()
	// 200 tokens a minute: round 1 uses 110, round 2 another 110
	// (20 over): round 3 is refused.
	eachLoopForm(t, `
[[limits]]
tenant = "*"
tokens_per_minute = 200
`, 5, func(t *testing.T, h *harness, stream bool) {
		e, hdr := loopRefused(t, h, stream)
		if !stream {
			ra, _ := strconv.Atoi(hdr.Get("Retry-After"))
			reset, err := time.ParseDuration(hdr.Get("X-Ratelimit-Reset-Tokens"))
			if ra <= 0 || hdr.Get("X-Ratelimit-Remaining-Tokens") != "0" || err != nil || reset < time.Duration(ra-1)*time.Second {
				t.Fatalf("a 429 on tokens: retry-after %q, x-ratelimit-remaining-tokens %q, x-ratelimit-reset-tokens %q",
					hdr.Get("Retry-After"), hdr.Get("X-Ratelimit-Remaining-Tokens"), hdr.Get("X-Ratelimit-Reset-Tokens"))
			}
		}
		if e.Get("code").Str != "rate_limit_exceeded" || e.Get("type").Str != "tokens" {
			t.Fatalf("error %s, want rate_limit_exceeded on tokens", e.Raw)
		}
		if n := h.mock.TotalCalls(); n != 2 {
			t.Fatalf("upstream calls %d, want 2 (the third round refused)", n)
		}
	})
}

// A loop within its limits runs every round: a later round takes no
// client request and no second input estimate. With requests_per_minute = 1
// a four-round loop finishes, and the client's next request is the one
// refused.
func TestLoopRoundsWithinLimitsAllRun(t *testing.T) {
	t.Parallel()
	eachLoopForm(t, `
[[limits]]
tenant = "*"
requests_per_minute = 1
tokens_per_minute = 100000
[[budgets]]
tenant = "default"
amount = 1
period = "day"
`, 4, func(t *testing.T, h *harness, stream bool) {
		status, _, body := h.post("/chat/completions", loopBody(stream), nil)
		if status != 200 {
			t.Fatalf("status %d %s", status, body)
		}
		if e, _ := streamError(body); e.Exists() {
			t.Fatalf("stream error %s", e.Raw)
		}
		if !bytes.Contains(body, []byte("done")) {
			t.Fatalf("no final answer: %s", body)
		}
		if n := h.mock.TotalCalls(); n != 4 {
			t.Fatalf("upstream calls %d, want 4", n)
		}
		if status, _, body := h.post("/chat/completions", loopBody(false), nil); status != 429 || gjson.GetBytes(body, "error.type").Str != "requests" {
			t.Fatalf("second client request: %d %s, want 429 on requests", status, body)
		}
	})
}

// A request refused for the requests it has in flight (concurrent) spends
// no per-minute counter: its x-ratelimit-*-requests still say what
// requests_per_minute has left, not none.
func TestConcurrencyRefusalKeepsTheRateTrio(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var first atomic.Bool
	h := newHarness(t, baseConfig+`
[[limits]]
tenant = "*"
requests_per_minute = 100
concurrent = 1
`, mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		return mockllm.Turn{Text: "ok"}
	}})
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.Post(h.base+"/chat/completions", "application/json", strings.NewReader(body)); err == nil {
			_ = resp.Body.Close()
		}
	}()
	for h.mock.TotalCalls() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	status, hdr, b := h.post("/chat/completions", body, nil)
	close(release)
	<-done
	if status != 429 || gjson.GetBytes(b, "error.code").Str != "rate_limit_exceeded" {
		t.Fatalf("the second request in flight: %d %s", status, b)
	}
	if r := hdr.Get("X-Ratelimit-Remaining-Requests"); r == "" || r == "0" {
		t.Fatalf("x-ratelimit-remaining-requests %q after a concurrency refusal, want what the minute has left", r)
	}
}
