package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// A stream whose client did not ask for usage gets none, but its calls'
// usage is still what the access log and the prompt-cache metrics report:
// the meter, which takes the usage chunk out, notes it for them
// (pipeline.UsageLog). Before, both saw the stream the client got and
// reported nothing. With server tools, the access log carries the sum of
// the loop's calls, as the loop's own usage chunk would.
func TestUnaskedStreamUsageIsLogged(t *testing.T) {
	t.Parallel()
	// baseConfig with the access log at info and the calculator offered.
	const tools = `
[[tools]]
name = "calculator"
kind = "builtin"
models = ["gpt-x"]
`
	for _, tc := range []struct {
		name     string
		upstream string
		turns    []mockllm.Turn
		want     [3]int64 // prompt, completion, cached in the access log
	}{
		{"one call", "unasked-usage-one", []mockllm.Turn{{Text: "an answer", Usage: &mockllm.Usage{Prompt: 70, Completion: 11, Cached: 30}}}, [3]int64{70, 11, 30}},
		{"a tool round", "unasked-usage-loop", []mockllm.Turn{
			{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: &mockllm.Usage{Prompt: 50, Completion: 6, Cached: 20}},
			{Text: "42", Usage: &mockllm.Usage{Prompt: 60, Completion: 2, Cached: 40}},
		}, [3]int64{110, 8, 60}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			config := strings.NewReplacer(`log_level = "warn"`, `log_level = "info"`,
				`upstream = "up-model"`, `upstream = "`+tc.upstream+`"`).Replace(baseConfig) + tools
			h := newLoggedHarness(t, config, mockllm.Options{Respond: mockllm.Sequence(tc.turns...)})
			acc, _, err := h.streamChat(userMsg("hi"), wiretest.Options{}, wiretest.LoadSchema(t))
			if err != nil || acc.Choices[0].Message.Content != tc.turns[len(tc.turns)-1].Text {
				t.Fatalf("stream: %v %+v", err, acc)
			}
			if raw, _ := h.lastRaw(); strings.Contains(string(raw), `"usage"`) {
				t.Fatalf("the client got usage it did not ask for:\n%s", raw)
			}
			line := chatAccessLine(t, h)
			got := [3]int64{line.Get("prompt_tokens").Int(), line.Get("completion_tokens").Int(), line.Get("cached_tokens").Int()}
			if got != tc.want {
				t.Fatalf("access log tokens %v, want %v: %s", got, tc.want, line.Raw)
			}
			// The prompt-cache metrics count every call, labelled by the
			// upstream model (unique to this case).
			var prompt, cached float64
			for _, m := range h.metrics()["gateway_prompt_cache_tokens_total"].GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["model"] != tc.upstream {
					continue
				}
				switch labels["kind"] {
				case "prompt":
					prompt = m.GetCounter().GetValue()
				case "cached":
					cached = m.GetCounter().GetValue()
				}
			}
			if prompt != float64(tc.want[0]) || cached != float64(tc.want[2]) {
				t.Fatalf("prompt-cache metrics: prompt %v, cached %v, want %v and %v", prompt, cached, tc.want[0], tc.want[2])
			}
		})
	}
}

// A JSON tool loop that fails after a round (the second call's upstream
// answers 500) was charged the round that ran, and its access line says so:
// it said no tokens, since only a stream's calls were noted for the log.
func TestFailedJSONLoopUsageIsLogged(t *testing.T) {
	t.Parallel()
	config := strings.Replace(baseConfig, `log_level = "warn"`, `log_level = "info"`, 1) + calculatorTool
	h := newLoggedHarness(t, config, mockllm.Options{Respond: mockllm.Sequence(
		mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}, Usage: &mockllm.Usage{Prompt: 50, Completion: 6, Cached: 20}},
		mockllm.Turn{Fault: mockllm.StatusFault(500, "", "upstream down")},
	)})
	if st, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"compute"}]}`, nil); st < 500 {
		t.Fatalf("status %d: %s", st, b)
	}
	line := chatAccessLine(t, h)
	got := [3]int64{line.Get("prompt_tokens").Int(), line.Get("completion_tokens").Int(), line.Get("cached_tokens").Int()}
	if got != [3]int64{50, 6, 20} || line.Get("status").Int() < 500 {
		t.Fatalf("access line tokens %v (want the first round's 50, 6, 20): %s", got, line.Raw)
	}
}

// chatAccessLine waits for the last access line of a chat request in h's
// log (the log writer batches lines) and returns it.
func chatAccessLine(t *testing.T, h *harness) gjson.Result {
	t.Helper()
	var line gjson.Result
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !line.Exists(); time.Sleep(10 * time.Millisecond) {
		for _, l := range strings.Split(h.logs.String(), "\n") {
			if gjson.Get(l, "message").Str == "request" && gjson.Get(l, "path").Str == "/v1/chat/completions" {
				line = gjson.Parse(l)
			}
		}
	}
	return line
}
