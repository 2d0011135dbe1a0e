package gateway

import (
	"fmt"
	"testing"

	"github.com/llmgw/gateway/mockllm"
)

// An answer a fallback model gave while the requested model failed reaches
// its client, but is never stored in the response cache: stored under the
// requested model's key, it answered every identical request with the
// stand-in for the whole TTL, after the model was back. The next request
// reaches the recovered model, and that answer is the one cached. Streams
// store on their own path (the recorder), JSON answers through the single
// flight: both are covered.
func TestCacheNeverStoresAFallbackAnswer(t *testing.T) {
	t.Parallel()
	cacheFallbackSteps(t, fallbackConfig, func(n int) mockllm.Turn {
		if n <= 2 { // the call and its one retry
			return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")}
		}
		return mockllm.Turn{Text: fmt.Sprintf("primary answer %d", n), Usage: cacheUsage}
	}, []cacheStep{
		{"primary fails, the fallback answers", result{status: 200, model: "small", cache: "miss", content: "stand-in answer"}, [2]int{2, 1}},
		{"primary back: not the stand-in from the cache", result{status: 200, model: "primary", cache: "miss", content: "primary answer 3"}, [2]int{3, 1}},
		{"the primary's answer is cached", result{status: 200, cache: "hit", content: "primary answer 3"}, [2]int{3, 1}},
	})
}

// A tool loop whose later round a fallback model answered is not stored
// either. Later rounds report into a Meta of their own (the client's
// x-gateway-model describes the first call, which the primary answered),
// so the cache must hear of every round's model: without that, the
// stand-in's final answer was stored and served as a hit. Both forms: a
// JSON answer is judged when the loop returns, a stream when it ends.
func TestCacheNeverStoresALoopWhoseLaterRoundFellBack(t *testing.T) {
	t.Parallel()
	cacheFallbackSteps(t, fallbackLoopConfig, func(n int) mockllm.Turn {
		switch n {
		case 1, 4: // each request's first round: a server tool
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: cacheUsage}
		case 2, 3: // the first request's second round and its one retry
			return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")}
		}
		return mockllm.Turn{Text: fmt.Sprintf("primary answer %d", n), Usage: cacheUsage}
	}, []cacheStep{
		{"the second round falls back", result{status: 200, model: "primary", cache: "miss", content: "stand-in answer"}, [2]int{3, 1}},
		{"primary back: not the stand-in from the cache", result{status: 200, model: "primary", cache: "miss", content: "primary answer 5"}, [2]int{5, 1}},
		{"the primary's answer is cached", result{status: 200, cache: "hit", content: "primary answer 5"}, [2]int{5, 1}},
	})
}

var cacheUsage = &mockllm.Usage{Prompt: 5, Completion: 2}

// cacheStep is one request of cacheFallbackSteps and what it must give.
type cacheStep struct {
	name  string
	want  result
	calls [2]int // upstream calls after the step: primary, small
}

// cacheFallbackSteps sends the same deterministic request once per step,
// as JSON and as a stream on gateways of their own (cfg with the response
// cache on), to a mock whose "up-primary" answers its n-th call with
// primary and whose "up-small" (the fallback) always answers "stand-in
// answer".
func cacheFallbackSteps(t *testing.T, cfg string, primary func(n int) mockllm.Turn, steps []cacheStep) {
	t.Helper()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, cfg+"[middleware.cache]\nenabled = true\n", mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
				"up-primary": primary,
				"up-small":   func(int) mockllm.Turn { return mockllm.Turn{Text: "stand-in answer", Usage: cacheUsage} },
			})})
			p := primaryParams()
			p.Temperature = det("").Temperature
			calls := func() [2]int { return [2]int{h.mock.Calls("up-primary"), h.mock.Calls("up-small")} }
			for _, step := range steps {
				if got := chatResult(t, h, p, stream); got != step.want || calls() != step.calls {
					t.Fatalf("%s: got %+v, upstream calls %v; want %+v, calls %v", step.name, got, calls(), step.want, step.calls)
				}
			}
		})
	}
}
