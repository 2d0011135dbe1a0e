package toolloop

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// countLog is a pipeline.EditLog that reports fixed counts.
type countLog struct{}

func (*countLog) Stats() (int, int, int) { return 2, 40, 0 }

// TestRoundsCarryEditLogAndHint: every round of one client request carries
// the same edit log on its Request, the first round no prompt hint, and each
// later round the previous round's prompt_tokens over the messages it sent;
// the trace reports the log's counts.
func TestRoundsCarryEditLogAndHint(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var logs []pipeline.EditLog
			var hints []pipeline.PromptHint
			record := func(chunks []string, body string) turnFn {
				return func(r *pipeline.Request) ([]string, string) {
					mu.Lock()
					defer mu.Unlock()
					logs, hints = append(logs, r.EditLog), append(hints, r.PromptHint)
					return chunks, body
				}
			}
			m := &fakeModel{turns: []turnFn{
				record(toolRound("up-1", "call_a", "calculator", `{"expression":"1+2"}`, 10, 5),
					completion("up-1", "", `[{"id":"call_a","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`, "tool_calls", 10, 5)),
				record(textRound("up-2", "3", 30, 7), completion("up-2", `"3"`, "", "stop", 30, 7)),
			}}
			made := 0
			l := newLoop(t, []config.Tool{calcTool}, func(o *Options) {
				o.NewEditLog = func() pipeline.EditLog { made++; return &countLog{} }
			})
			body := userBody + `}`
			if stream {
				body = userBody + `,"stream":true}`
			}
			req := request(m, stream, body)
			req.Hints.ToolTrace = true
			resp, err := l.Chat(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			var trace []byte
			if stream {
				sum := checkStream(t, sse(t, resp.Stream), false)
				trace = sum.Chunks[len(sum.Chunks)-1]
			} else {
				trace = resp.Body
			}
			mu.Lock()
			defer mu.Unlock()
			if made != 1 || len(logs) != 2 || logs[0] == nil || logs[0] != logs[1] {
				t.Fatalf("logs made %d, per round %v: want one, shared by both rounds", made, logs)
			}
			// The first round sent the user's message; its 10 prompt tokens
			// cover it in the second round.
			if hints[0] != (pipeline.PromptHint{}) || hints[1] != (pipeline.PromptHint{Tokens: 10, Messages: 1}) {
				t.Fatalf("hints %+v", hints)
			}
			if got := gjson.GetBytes(trace, "x_gateway.context_edits.cleared").Raw; got != "2" {
				t.Fatalf("trace cleared %q in %s", got, trace)
			}
		})
	}
}

// TestNoContextEditDependency: the loop reaches context editing only through
// pipeline's typed request fields, never by importing it.
func TestNoContextEditDependency(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasSuffix(dep, "/contextedit") {
			t.Fatalf("toolloop depends on %s", dep)
		}
	}
}
