package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// Fallback bugs other gateways shipped; see toolcall_stream_test.go.

// fallbackLoopConfig is fallbackConfig with a server tool, so that chat
// requests take the tool loop (whose upstream rounds go through the same
// model-call layer).
const fallbackLoopConfig = fallbackConfig + `
[[tools]]
name = "calculator"
kind = "builtin"
`

// withIdle sets the provider's retries, and its stream idle and first-byte
// timeouts to idle (a stall before the first event is a first-byte wait:
// the mock has not flushed its headers yet).
func withIdle(cfg string, retries int, idle string) string {
	return strings.Replace(cfg, "retries = 1", fmt.Sprintf("retries = %d\nstream_idle_timeout = %q\nfirst_byte_timeout = %q", retries, idle, idle), 1)
}

// Pitfall: no fallback when the upstream stream ends abnormally (cut,
// stalled, malformed chunk) before any byte reached the client. Offset 0 is
// before the first event; offset 1 is after the role chunk only, which
// carries no answer yet. See also TestStreamCutBeforeFirstByteFallsBack.
func TestPitfall_NoFallbackOnAbnormalEnd(t *testing.T) {
	t.Parallel()
	faults := []struct {
		name  string
		fault *mockllm.Fault
	}{
		{"cut before the first event", mockllm.CutFault(0)},
		{"cut after the role chunk", mockllm.CutFault(1)},
		{"malformed first chunk", mockllm.MalformedFault(0)},
		{"malformed after the role chunk", mockllm.MalformedFault(1)},
		{"stalled before the first event", mockllm.StallFault(0, 5*time.Second)},
		{"stalled after the role chunk", mockllm.StallFault(1, 5*time.Second)},
		{"error event after the role chunk", mockllm.ErrorEventFault(1, "server_error", "overloaded")},
	}
	for _, path := range []struct{ name, config string }{{"fast path", fallbackConfig}, {"tool loop", fallbackLoopConfig}} {
		for _, f := range faults {
			t.Run(path.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				// 2 s, not less: under a loaded CI machine the mock may
				// take over a second to record the primary's call.
				h := newHarness(t, withIdle(path.config, 0, "2s"), mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
					"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Text: "the primary's answer", Fault: f.fault} },
					"up-small":   func(int) mockllm.Turn { return mockllm.Turn{Text: "the fallback's complete answer"} },
				})})
				var hr *http.Response
				acc, sum, err := h.streamChat(primaryParams(), wiretest.Options{}, wiretest.LoadSchema(t), option.WithResponseInto(&hr))
				if err != nil {
					t.Fatalf("the client got an error instead of the fallback's answer: %v", err)
				}
				if acc.Choices[0].Message.Content != "the fallback's complete answer" || sum.Content != acc.Choices[0].Message.Content || sum.Model != "primary" {
					t.Fatalf("client got %q from %q", acc.Choices[0].Message.Content, sum.Model)
				}
				if hr.Header.Get("X-Gateway-Model") != "small" || h.mock.Calls("up-primary") != 1 || h.mock.Calls("up-small") != 1 {
					t.Fatalf("x-gateway-model %q, primary calls %d, small calls %d", hr.Header.Get("X-Gateway-Model"), h.mock.Calls("up-primary"), h.mock.Calls("up-small"))
				}
			})
		}
	}
}

// Pitfall: the upstream closed mid-answer and the gateway ended its own
// stream cleanly (200, no error event, no [DONE]), so the client took a
// truncated answer for a complete one. The client must see an SDK error and
// an "event: error" as the last event, never [DONE]; no fallback answer may
// be spliced in after bytes were sent. See also TestUpstreamCutMidStream.
func TestPitfall_MidAnswerCloseEndsCleanly(t *testing.T) {
	t.Parallel()
	const text = "this answer is long enough to be cut in the middle of a sentence"
	faults := []struct {
		name  string
		fault *mockllm.Fault
	}{
		{"cut", mockllm.CutFault(4)},
		{"malformed chunk", mockllm.MalformedFault(4)},
		{"stalled", mockllm.StallFault(4, 5*time.Second)},
		{"error event", mockllm.ErrorEventFault(4, "server_error", "overloaded")},
	}
	for _, path := range []struct{ name, config string }{{"fast path", fallbackConfig}, {"tool loop", fallbackLoopConfig}} {
		for _, f := range faults {
			t.Run(path.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, withIdle(path.config, 0, "1s"), mockllm.Options{
					Respond: byModel(map[string]func(int) mockllm.Turn{
						"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Text: text, Fault: f.fault} },
					}),
					Chunking: mockllm.Chunking{TextRunes: 3},
				})
				for _, usage := range []bool{false, true} {
					p := primaryParams()
					if usage {
						p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
					}
					acc, sum, err := h.streamChat(p, wiretest.Options{WantError: true, WantUsage: usage}, wiretest.LoadSchema(t))
					if err == nil {
						t.Fatalf("usage=%v: the SDK stream ended without an error; the client holds %q as a complete answer", usage, acc.Choices[0].Message.Content)
					}
					raw, _ := h.lastRaw()
					if bytes.Contains(raw, []byte("[DONE]")) || !bytes.HasPrefix(lastEvent(raw), []byte("event: error\n")) {
						t.Fatalf("usage=%v: the stream does not end with an error event:\n%s", usage, raw)
					}
					if sum.Content == "" || !strings.HasPrefix(text, sum.Content) || sum.Content == text {
						t.Fatalf("usage=%v: content %q is not a strict prefix of the answer", usage, sum.Content)
					}
					if sum.FinishReason != "" {
						t.Fatalf("usage=%v: a truncated answer got finish_reason %q", usage, sum.FinishReason)
					}
				}
				if n := h.mock.Calls("up-small") + h.mock.Calls("up-large"); n != 0 {
					t.Fatalf("a fallback was called %d times after bytes reached the client", n)
				}
			})
		}
	}
}

// lastEvent returns the last SSE event of raw (without its blank line).
func lastEvent(raw []byte) []byte {
	evs := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n\n"))
	return evs[len(evs)-1]
}

// outcome is what a client and the upstream saw for one request.
type outcome struct {
	status   int    // 200, or the error status
	answered string // x-gateway-model
	content  string
	calls    [3]int // upstream calls to primary, small, large
}

// Pitfall: streaming and non-streaming requests followed different
// fallback rules. The same scripted failure of the primary is replayed for a
// JSON request and for a stream, each on a fresh gateway (so that breaker
// state does not differ): retries, which fallback answers, and the error a
// client gets when nothing may answer must be the same.
func TestPitfall_StreamAndNonStreamSameFallbackRules(t *testing.T) {
	t.Parallel()
	faults := []struct {
		name  string
		fault *mockllm.Fault
		want  outcome // the expectation both modes must meet
	}{
		{"500 is retried then falls back", mockllm.StatusFault(500, "", ""), outcome{200, "small", "answer from up-small", [3]int{2, 1, 0}}},
		{"429 is retried then falls back", &mockllm.Fault{Status: 429, RetryAfterMs: "10"}, outcome{200, "small", "answer from up-small", [3]int{2, 1, 0}}},
		{"connection reset", mockllm.ResetFault(), outcome{200, "small", "answer from up-small", [3]int{2, 1, 0}}},
		{"cut before any byte", mockllm.CutFault(0), outcome{200, "small", "answer from up-small", [3]int{2, 1, 0}}},
		{"malformed body", mockllm.MalformedFault(0), outcome{200, "small", "answer from up-small", [3]int{2, 1, 0}}},
		// A 200 JSON error body is an error event before any content.
		{"error before any content is retried then falls back", mockllm.ErrorAnswerFault("server_error", "overloaded"), outcome{200, "small", "answer from up-small", [3]int{2, 1, 0}}},
		// "choices":[] is a stream that ends cleanly without content.
		{"answer without content is retried then falls back", mockllm.EmptyFault(), outcome{200, "small", "answer from up-small", [3]int{2, 1, 0}}},
		{"context length skips the smaller window", &mockllm.Fault{Status: 400, Code: "context_length_exceeded", Message: "too long"}, outcome{200, "large", "answer from up-large", [3]int{1, 0, 1}}},
		{"invalid request never falls back", mockllm.StatusFault(400, "invalid_value", "bad temperature"), outcome{400, "", "", [3]int{1, 0, 0}}},
		{"bad upstream key never falls back", mockllm.StatusFault(401, "", ""), outcome{401, "", "", [3]int{1, 0, 0}}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			got := map[bool]outcome{}
			for _, stream := range []bool{false, true} {
				h := newHarness(t, fallbackConfig, mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
					"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Text: "never seen", Fault: f.fault} },
				})})
				var (
					hr  *http.Response
					o   outcome
					err error
				)
				if stream {
					var acc openai.ChatCompletion
					stream := h.client.Chat.Completions.NewStreaming(context.Background(), primaryParams(), option.WithResponseInto(&hr))
					var a openai.ChatCompletionAccumulator
					for stream.Next() {
						a.AddChunk(stream.Current())
					}
					err, acc = stream.Err(), a.ChatCompletion
					_ = stream.Close()
					if err == nil && len(acc.Choices) > 0 {
						raw, _ := h.lastRaw()
						wiretest.CheckStreamAll(t, raw, wiretest.Options{}, nil)
						o.content = acc.Choices[0].Message.Content
					}
				} else {
					var resp *openai.ChatCompletion
					resp, err = h.client.Chat.Completions.New(context.Background(), primaryParams(), option.WithResponseInto(&hr))
					if err == nil && len(resp.Choices) > 0 {
						o.content = resp.Choices[0].Message.Content
					}
				}
				var apiErr *openai.Error
				switch {
				case err == nil:
					o.status, o.answered = 200, hr.Header.Get("X-Gateway-Model")
				case errors.As(err, &apiErr):
					o.status = apiErr.StatusCode
				default:
					t.Fatalf("stream=%v: %v", stream, err)
				}
				o.calls = [3]int{h.mock.Calls("up-primary"), h.mock.Calls("up-small"), h.mock.Calls("up-large")}
				got[stream] = o
			}
			if got[false] != got[true] {
				t.Fatalf("different rules:\n  json   %+v\n  stream %+v", got[false], got[true])
			}
			if got[false] != f.want {
				t.Fatalf("both modes got %+v, want %+v", got[false], f.want)
			}
		})
	}
}

// Pitfall: a fallback model with a smaller context window was tried with the
// same oversized prompt and failed. The primary (window 1000 in the
// gateway's config) refuses the prompt; its fallbacks are small (500) and
// large (100000). The smaller model must never be called, and the larger one
// answers with the prompt intact, streaming or not. See also
// TestContextLengthSkipsSmallerWindows.
func TestPitfall_SmallerWindowFallbackSkipped(t *testing.T) {
	t.Parallel()
	sentence := "The quick brown fox jumps over the lazy dog. "
	cases := []struct {
		name    string
		prompt  string
		windows map[string]int // the mock's own windows
		respond func(*mockllm.Call) mockllm.Turn
		bug     string
	}{
		// ~500 tokens: under the gateway's 1000, over the upstream's real 300.
		{name: "upstream context_length_exceeded", prompt: strings.Repeat(sentence, 50),
			windows: map[string]int{"up-primary": 300, "up-small": 200, "up-large": 100000}},
		{name: "anthropic-style message-only error", prompt: strings.Repeat(sentence, 50),
			respond: byModel(map[string]func(int) mockllm.Turn{
				"up-primary": func(int) mockllm.Turn {
					return mockllm.Turn{Fault: &mockllm.Fault{Status: 400, Type: "invalid_request_error", Code: "-", Message: "prompt is too long: 2051 tokens > 1000 maximum"}}
				},
			})},
		// Some providers (vLLM, OpenRouter) report the error after the 200:
		// an error event before any content, or a 200 JSON error object. It
		// is the same context-length error as a 400's.
		{name: "context length in a 200 answer", prompt: strings.Repeat(sentence, 50),
			respond: byModel(map[string]func(int) mockllm.Turn{
				"up-primary": func(int) mockllm.Turn {
					return mockllm.Turn{Fault: &mockllm.Fault{ErrorEvent: true, ErrorOK: true, Type: "invalid_request_error",
						Code: "context_length_exceeded", Message: "This model's maximum context length is 300 tokens."}}
				},
			})},
		// ~1800 tokens: over the primary's configured window, so the
		// primary's own context editing refuses it before any upstream
		// call; that refusal must still move to the larger window.
		{name: "gateway's own window check", prompt: strings.Repeat(sentence, 180)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			respond := c.respond
			if respond == nil {
				respond = byModel(nil)
			}
			h := newHarness(t, fallbackConfig, mockllm.Options{Respond: respond, ContextWindow: c.windows})
			p := primaryParams()
			p.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.prompt)}
			for _, stream := range []bool{false, true} {
				var (
					content string
					err     error
				)
				if stream {
					var acc openai.ChatCompletion
					acc, err = sdkStream(h, p)
					if err == nil {
						content = acc.Choices[0].Message.Content
					}
				} else {
					var resp *openai.ChatCompletion
					resp, err = h.client.Chat.Completions.New(context.Background(), p)
					if err == nil {
						content = resp.Choices[0].Message.Content
					}
				}
				if err != nil || content != "answer from up-large" {
					msg := fmt.Sprintf("stream=%v: %q, %v (upstream calls: primary %d, small %d, large %d)", stream, content, err,
						h.mock.Calls("up-primary"), h.mock.Calls("up-small"), h.mock.Calls("up-large"))
					if c.bug != "" {
						t.Skip(c.bug + "; " + msg)
					}
					t.Fatal(msg)
				}
			}
			if n := h.mock.Calls("up-small"); n != 0 {
				t.Fatalf("the smaller-window fallback was called %d times with a prompt that cannot fit", n)
			}
			if n := h.mock.Calls("up-primary"); n > 2 {
				t.Fatalf("primary called %d times; a context-length error is not retried", n)
			}
			for _, r := range requestsFor(h, "up-large") {
				if gjson.GetBytes(r.Body, "messages.0.content").Str != c.prompt {
					t.Fatal("the larger model did not get the prompt intact")
				}
			}
		})
	}
}

// result is what a client saw for one chat request, streamed or not.
type result struct {
	status         int
	model, cache   string // x-gateway-model, x-gateway-cache
	content        string
	typ, code, msg string // the error envelope's
}

// chatResult sends p, streamed or not, through the SDK.
func chatResult(t *testing.T, h *harness, p openai.ChatCompletionNewParams, stream bool) result {
	t.Helper()
	var (
		hr  *http.Response
		r   result
		err error
	)
	if stream {
		s := h.client.Chat.Completions.NewStreaming(context.Background(), p, option.WithResponseInto(&hr))
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		err = s.Err()
		_ = s.Close()
		if err == nil && len(acc.Choices) > 0 {
			r.content = acc.Choices[0].Message.Content
		}
	} else {
		var resp *openai.ChatCompletion
		resp, err = h.client.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&hr))
		if err == nil && len(resp.Choices) > 0 {
			r.content = resp.Choices[0].Message.Content
		}
	}
	var apiErr *openai.Error
	switch {
	case err == nil:
		r.status, r.model, r.cache = 200, hr.Header.Get("X-Gateway-Model"), hr.Header.Get("X-Gateway-Cache")
	case errors.As(err, &apiErr):
		r.status, r.typ, r.code, r.msg = apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Message
		r.model, r.cache = apiErr.Response.Header.Get("X-Gateway-Model"), apiErr.Response.Header.Get("X-Gateway-Cache")
	default:
		t.Fatalf("stream=%v: %v", stream, err)
	}
	return r
}

// noAnswerFaults are the upstream answers that carry no answer: a 200 JSON
// error body (as some OpenAI-compatible providers send) and "choices":[],
// with their stream equivalents, an error event before any content and a
// stream that ends cleanly without content. want is the error a client gets
// when no model is left to answer: a 502 in the OpenAI envelope, with the
// upstream's own message relayed as a 5xx error body's is.
var noAnswerFaults = []struct {
	name  string
	fault *mockllm.Fault
	want  result
}{
	{"error before any content", mockllm.ErrorAnswerFault("server_error", "overloaded"),
		result{status: 502, typ: "server_error", msg: "overloaded"}},
	{"answer without content", mockllm.EmptyFault(),
		result{status: 502, typ: "server_error", code: "upstream_cut", msg: "upstream answered without any content"}},
}

// Pitfall: a 200 answer without an answer was passed to JSON clients as
// the answer, while the stream that says the same is a failure. When every
// model answers so, JSON and stream clients get the same error, on the fast
// path and through the tool loop, after the same attempts (a retry each,
// every fallback tried).
func TestPitfall_NoAnswerLeftIsTheSameError(t *testing.T) {
	t.Parallel()
	for _, path := range []struct{ name, config string }{{"fast path", fallbackConfig}, {"tool loop", fallbackLoopConfig}} {
		for _, f := range noAnswerFaults {
			t.Run(path.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				for _, stream := range []bool{false, true} {
					h := newHarness(t, path.config, mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn {
						return mockllm.Turn{Text: "never seen", Fault: f.fault}
					}})
					got := chatResult(t, h, primaryParams(), stream)
					if got != f.want {
						t.Fatalf("stream=%v: got %+v, want %+v", stream, got, f.want)
					}
					if calls := [3]int{h.mock.Calls("up-primary"), h.mock.Calls("up-small"), h.mock.Calls("up-large")}; calls != [3]int{2, 2, 2} {
						t.Fatalf("stream=%v: upstream calls %v, want a retry and every fallback", stream, calls)
					}
				}
			})
		}
	}
}

// An answer without an answer, from a model without fallbacks, is the
// client's error and is never stored in the response cache: the next
// request goes upstream (a miss) and its answer is the one cached.
func TestNoAnswerIsNeverCached(t *testing.T) {
	t.Parallel()
	for _, f := range noAnswerFaults {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", f.name, stream), func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, cacheConfig, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
					if c.N == 1 {
						return mockllm.Turn{Fault: f.fault}
					}
					return numbered(c)
				}})
				want := f.want
				want.cache = "miss"
				if got := chatResult(t, h, det("q"), stream); got != want {
					t.Fatalf("first: got %+v, want %+v", got, want)
				}
				second := chatResult(t, h, det("q"), stream)
				if second.status != 200 || second.cache != "miss" || !strings.HasPrefix(second.content, "answer 2 ") {
					t.Fatalf("second: %+v, want call 2's answer, not from the cache", second)
				}
				if third := chatResult(t, h, det("q"), stream); third.cache != "hit" || third.content != second.content {
					t.Fatalf("third: %+v, want the second's answer from the cache", third)
				}
			})
		}
	}
}

// An upstream that cuts its answer off (a JSON body shorter than its
// Content-Length, a stream before its first event, a connection reset
// after the request was sent) is the same failure
// streamed or not: when every model does, both clients get 502
// upstream_cut, never "upstream unreachable" for an upstream that answered.
func TestCutAnswerIsTheSameErrorStreamedOrNot(t *testing.T) {
	t.Parallel()
	want := result{status: 502, typ: "server_error", code: "upstream_cut", msg: "upstream closed the connection before the response was complete"}
	for _, c := range []struct {
		stream bool
		fault  *mockllm.Fault
	}{{false, mockllm.CutFault(0)}, {true, mockllm.CutFault(0)}, {false, mockllm.ResetFault()}, {true, mockllm.ResetFault()}} {
		stream := c.stream
		h := newHarness(t, fallbackConfig, mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn {
			return mockllm.Turn{Text: "an answer long enough to be cut in half", Fault: c.fault}
		}})
		if got := chatResult(t, h, primaryParams(), stream); got != want {
			t.Fatalf("stream=%v reset=%v: got %+v, want %+v", stream, c.fault.Reset, got, want)
		}
		if calls := [3]int{h.mock.Calls("up-primary"), h.mock.Calls("up-small"), h.mock.Calls("up-large")}; calls != [3]int{2, 2, 2} {
			t.Fatalf("stream=%v: upstream calls %v, want a retry and every fallback", stream, calls)
		}
	}
}
