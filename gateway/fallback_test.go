package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// fallbackConfig: "primary" (window 1000) falls back to "small" (window 500)
// then "large" (window 100000); each is a distinct upstream model on the mock
// so the mock's per-model call counts tell who was called.
const fallbackConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
retries = 1
[[models]]
name = "primary"
provider = "up"
upstream = "up-primary"
context_window = 1000
fallbacks = ["small", "large"]
[[models]]
name = "small"
provider = "up"
upstream = "up-small"
context_window = 500
[[models]]
name = "large"
provider = "up"
upstream = "up-large"
context_window = 100000
[middleware.fallback]
base_backoff = "10ms"
max_backoff = "50ms"
breaker_failures = 3
breaker_cooldown = "300ms"
`

// byModel scripts each upstream model; the function gets the model's call number.
func byModel(m map[string]func(n int) mockllm.Turn) func(*mockllm.Call) mockllm.Turn {
	return func(c *mockllm.Call) mockllm.Turn {
		if f := m[c.Model]; f != nil {
			return f(c.N)
		}
		return mockllm.Turn{Text: "answer from " + c.Model}
	}
}

func primaryParams() openai.ChatCompletionNewParams {
	p := userMsg("hi")
	p.Model = "primary"
	return p
}

func TestRetryThenSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fallbackConfig, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(n int) mockllm.Turn {
			if n == 1 {
				return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")}
			}
			return mockllm.Turn{Text: "second time lucky"}
		},
	})})
	resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams())
	if err != nil || resp.Choices[0].Message.Content != "second time lucky" {
		t.Fatalf("%v %+v", err, resp)
	}
	_, hdr := h.lastRaw()
	if h.mock.Calls("up-primary") != 2 || hdr.Get("X-Gateway-Attempts") != "2" || hdr.Get("X-Gateway-Model") != "primary" {
		t.Fatalf("calls %d, headers %v", h.mock.Calls("up-primary"), hdr)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fallbackConfig, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(n int) mockllm.Turn {
			if n == 1 {
				return mockllm.Turn{Fault: &mockllm.Fault{Status: 429, RetryAfter: "1"}}
			}
			return mockllm.Turn{Text: "after waiting"}
		},
	})})
	start := time.Now()
	resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams())
	if err != nil || resp.Choices[0].Message.Content != "after waiting" {
		t.Fatalf("%v %+v", err, resp)
	}
	// The request includes the wait: a lower bound cannot flake.
	if took := time.Since(start); took < time.Second || h.mock.Calls("up-primary") != 2 {
		t.Fatalf("answered after %v with %d calls; retry-after said 1s", took, h.mock.Calls("up-primary"))
	}
}

func TestPrimaryDownFallbackAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fallbackConfig, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "")} },
	})})
	resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams())
	if err != nil {
		t.Fatal(err)
	}
	_, hdr := h.lastRaw()
	if resp.Model != "primary" || resp.Choices[0].Message.Content != "answer from up-small" {
		t.Fatalf("model %q content %q", resp.Model, resp.Choices[0].Message.Content)
	}
	if hdr.Get("X-Gateway-Model") != "small" {
		t.Fatalf("x-gateway-model %q", hdr.Get("X-Gateway-Model"))
	}
}

func TestContextLengthSkipsSmallerWindows(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fallbackConfig, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(int) mockllm.Turn {
			return mockllm.Turn{Fault: &mockllm.Fault{Status: 400, Code: "context_length_exceeded", Message: "This model's maximum context length is 1000 tokens."}}
		},
	})})
	for _, stream := range []bool{false, true} {
		var content, model string
		if stream {
			acc, _, err := h.streamChat(primaryParams(), wiretest.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			content, model = acc.Choices[0].Message.Content, acc.Model
		} else {
			resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams())
			if err != nil {
				t.Fatal(err)
			}
			content, model = resp.Choices[0].Message.Content, resp.Model
		}
		if content != "answer from up-large" || model != "primary" {
			t.Fatalf("stream=%v: %q from %q", stream, content, model)
		}
	}
	if n := h.mock.Calls("up-small"); n != 0 {
		t.Fatalf("the smaller-window fallback was called %d times", n)
	}
	if n := h.mock.Calls("up-primary"); n != 2 { // a 400 is not retried
		t.Fatalf("primary called %d times", n)
	}
}

func TestStreamCutBeforeFirstByteFallsBack(t *testing.T) {
	t.Parallel()
	for _, fault := range []*mockllm.Fault{mockllm.CutFault(1), mockllm.MalformedFault(1), mockllm.StallFault(1, 3*time.Second), mockllm.ResetFault()} {
		h := newHarness(t, strings.Replace(fallbackConfig, `retries = 1`, "retries = 0\nstream_idle_timeout = \"500ms\"", 1), mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
			"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Text: "never seen", Fault: fault} },
			"up-small":   func(int) mockllm.Turn { return mockllm.Turn{Text: "the fallback's complete answer"} },
		})})
		acc, sum, err := h.streamChat(primaryParams(), wiretest.Options{}, wiretest.LoadSchema(t))
		if err != nil {
			t.Fatalf("%+v: %v", fault, err)
		}
		if acc.Choices[0].Message.Content != "the fallback's complete answer" || sum.Model != "primary" {
			t.Fatalf("%+v: got %q", fault, acc.Choices[0].Message.Content)
		}
	}
}

func TestCircuitOpensAndRecovers(t *testing.T) {
	t.Parallel()
	// A cooldown a loaded machine cannot exceed while requests 4-6 run;
	// should it still, the count is not held against the breaker.
	const cooldown = time.Second
	cfg := strings.Replace(fallbackConfig, `retries = 1`, `retries = 0`, 1)
	cfg = strings.Replace(cfg, `breaker_cooldown = "300ms"`, `breaker_cooldown = "1s"`, 1)
	healthy := make(chan struct{})
	h := newHarness(t, cfg, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(int) mockllm.Turn {
			select {
			case <-healthy:
				return mockllm.Turn{Text: "primary is back"}
			default:
				return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")}
			}
		},
	})})
	var third, opened time.Time // request 3 began, and ended: the breaker opened between
	for i := 0; i < 6; i++ {
		if i == 2 {
			third = time.Now()
		}
		resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams())
		if err != nil || resp.Choices[0].Message.Content != "answer from up-small" {
			t.Fatalf("request %d: %v", i, err)
		}
		if i == 2 {
			opened = time.Now()
		}
	}
	// The third failure opened the breaker until no earlier than
	// third+cooldown: every request that began before then was kept off
	// the primary.
	n := h.mock.Calls("up-primary")
	switch {
	case n != 3 && time.Since(third) < cooldown:
		t.Fatalf("primary called %d times; the breaker should open after 3 failures", n)
	case n != 3:
		t.Logf("the box was too slow to see the breaker open within the cooldown (%d calls)", n)
		opened = time.Now() // a failed probe among requests 4-6 reopened it
	}
	close(healthy)
	time.Sleep(time.Until(opened.Add(cooldown + 50*time.Millisecond))) // the cooldown
	resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams())
	if err != nil || resp.Choices[0].Message.Content != "primary is back" {
		t.Fatalf("half-open probe: %v %+v", err, resp)
	}
	resp, err = h.client.Chat.Completions.New(context.Background(), primaryParams())
	if err != nil || resp.Choices[0].Message.Content != "primary is back" || h.mock.Calls("up-primary") != n+2 {
		t.Fatalf("closed again: %v, calls %d", err, h.mock.Calls("up-primary"))
	}
}

const keysConfig = baseConfig + `
[[models]]
name = "gpt-y"
provider = "up"
upstream = "up-y"
middleware = []
[[keys]]
tenant = "team-a"
key = "k-a"
[[policies]]
tenant = "team-a"
models = ["gpt-x", "gpt-y"]
[[keys]]
tenant = "team-b"
key = "k-b"
[[policies]]
tenant = "team-b"
models = ["gpt-y"]
`

func TestKeysAndAllowLists(t *testing.T) {
	t.Parallel()
	h := newHarness(t, keysConfig, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-y": func(int) mockllm.Turn { return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")} },
	})})
	cases := []struct {
		name, key, model string
		status           int
	}{
		{"no key", "", "gpt-x", 401},
		{"wrong key", "k-zzz", "gpt-x", 401},
		{"allowed", "k-a", "gpt-x", 200},
		{"outside allow-list", "k-b", "gpt-x", 404},
		// gpt-y lists no model-call middleware: no retry, the 500 comes through (with
		// fallbacks, such a model is refused: TestValidate).
		{"per-model middleware", "k-a", "gpt-y", 500},
	}
	for _, c := range cases {
		hdr := map[string]string{}
		if c.key != "" {
			hdr["Authorization"] = "Bearer " + c.key
		}
		status, _, body := h.post("/chat/completions", `{"model":"`+c.model+`","messages":[{"role":"user","content":"x"}]}`, hdr)
		if status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, status, c.status, body)
		}
	}
	if n := h.mock.Calls("up-y"); n != 1 {
		t.Errorf("gpt-y without fallback middleware was called %d times", n)
	}
	// The SDK sees 401/403 as typed errors.
	_, err := h.client.Chat.Completions.New(context.Background(), userMsg("x"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Fatalf("sdk: %v", err)
	}
}

// A fallback never reaches a model the caller's policy refuses: a tenant
// allowed only "primary" and "small" gets small's answer when primary
// fails, and an error (not large's answer) when small fails too; a tenant
// allowed everything gets large.
func TestFallbackKeepsToTheTenantsModels(t *testing.T) {
	t.Parallel()
	cfg := fallbackConfig + `
[[keys]]
tenant = "acme"
key = "sk-client"
[[keys]]
tenant = "narrow"
key = "sk-narrow"
[[policies]]
tenant = "narrow"
models = ["primary", "small"]
`
	var smallDown atomic.Bool
	h := newHarness(t, strings.Replace(cfg, "breaker_failures = 3", "breaker_failures = 1000", 1), mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "down")} },
		"up-small": func(int) mockllm.Turn {
			if smallDown.Load() {
				return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "down")}
			}
			return mockllm.Turn{Text: "answer from up-small"}
		},
	})})
	ask := func(key string) (string, error) {
		resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams(), option.WithAPIKey(key))
		if err != nil {
			return "", err
		}
		return resp.Choices[0].Message.Content, nil
	}
	if got, err := ask("sk-narrow"); err != nil || got != "answer from up-small" {
		t.Fatalf("narrow, small up: %q %v", got, err)
	}
	smallDown.Store(true)
	before := h.mock.Calls("up-large")
	if got, err := ask("sk-narrow"); err == nil {
		t.Fatalf("narrow, small down: answered %q; large is not its model", got)
	}
	if n := h.mock.Calls("up-large") - before; n != 0 {
		t.Fatalf("narrow: large was called %d times", n)
	}
	if got, err := ask("sk-client"); err != nil || got != "answer from up-large" {
		t.Fatalf("acme, small down: %q %v", got, err)
	}
}

// A fallback does not get around the limits of the model it falls back to:
// a tenant whose calls of "large" are limited gets no more of them through
// "primary" failing than by asking for large itself, by requests or by
// tokens (the meter charges the fallback's tokens to large's counters).
func TestFallbackTakesTheFallbackModelsLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, limit string
		want        int // large's answers out of 5
	}{
		{"requests", "requests_per_minute = 2", 2},
		{"tokens", "tokens_per_minute = 30", 3}, // 13 tokens a call: the fourth finds the minute spent
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := fallbackConfig + `
[[keys]]
tenant = "acme"
key = "sk-client"
[[limits]]
tenant = "*"
model = "large"
` + tc.limit + "\n"
			h := newHarness(t, strings.Replace(cfg, "breaker_failures = 3", "breaker_failures = 1000", 1), mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
				"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "down")} },
				"up-small":   func(int) mockllm.Turn { return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "down")} },
			})})
			for i := 0; i < 5; i++ {
				_, _ = h.client.Chat.Completions.New(context.Background(), primaryParams())
			}
			if n := h.mock.Calls("up-large"); n != tc.want {
				t.Fatalf("large was called %d times through fallbacks, want %d", n, tc.want)
			}
		})
	}
}

// A tool loop whose every round falls back to the same model takes one
// request from that model's requests_per_minute, for the client request,
// as its rounds of its own model do: with a rule of one request a minute
// on large, a three-round loop through large finishes (it broke at the
// second round), and the next client request finds large's minute spent.
func TestFallbackRoundsTakeOneRequest(t *testing.T) {
	t.Parallel()
	cfg := fallbackConfig + `
[[tools]]
name = "calculator"
kind = "builtin"
[[keys]]
tenant = "acme"
key = "sk-client"
[[limits]]
tenant = "*"
model = "large"
requests_per_minute = 1
`
	var large atomic.Int64
	h := newHarness(t, strings.Replace(cfg, "breaker_failures = 3", "breaker_failures = 1000", 1), mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		switch c.Model {
		case "up-primary", "up-small":
			return mockllm.Turn{Fault: mockllm.StatusFault(503, "", "down")}
		}
		if large.Add(1) < 3 {
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
		}
		return mockllm.Turn{Text: "answer from up-large"}
	}})
	resp, err := h.client.Chat.Completions.New(context.Background(), primaryParams())
	if err != nil || resp.Choices[0].Message.Content != "answer from up-large" {
		t.Fatalf("a loop whose rounds fall back to large: %v", err)
	}
	if n := large.Load(); n != 3 {
		t.Fatalf("large answered %d rounds, want 3", n)
	}
	if _, err := h.client.Chat.Completions.New(context.Background(), primaryParams()); err == nil {
		t.Fatal("the next request fell back to large: its minute was spent")
	}
	if n := large.Load(); n != 3 {
		t.Fatalf("large was called by the next request (%d calls)", n)
	}
}
