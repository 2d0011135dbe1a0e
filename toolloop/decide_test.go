package toolloop

import (
	"context"
	"fmt"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/tidwall/gjson"
)

// TestDecide walks every combination of final/forced, server/client/no
// calls, tool_choice mode, whether the server calls ran (and asked to
// stop) and the upstream's finish_reason, and checks the rule's answer.
func TestDecide(t *testing.T) {
	t.Parallel()
	for _, final := range []bool{false, true} {
		for _, server := range []int{0, 2} {
			for _, client := range []int{0, 1} {
				for _, required := range []bool{false, true} {
					for _, ran := range []bool{false, true} {
						for _, stopReq := range []bool{false, true} {
							for _, up := range []string{"", "stop", "tool_calls", "length", "content_filter"} {
								o := roundOutcome{final: final, server: server, client: client, required: required, ran: ran, stopReq: stopReq, upstream: up}
								if (!ran && stopReq) || (ran && (final || server == 0)) {
									continue // cannot happen: only run server calls report, and only they run
								}
								t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
									t.Parallel()
									got := decide(o)
									want := wantDecision(o)
									if got != want {
										t.Fatalf("decide = %+v, want %+v", got, want)
									}
								})
							}
						}
					}
				}
			}
		}
	}
}

// wantDecision states the rule case by case, the way docs/architecture.md
// draws the state machine.
func wantDecision(o roundOutcome) decision {
	answer := map[string]string{"": "stop", "stop": "stop", "tool_calls": "stop", "length": "length", "content_filter": "content_filter"}[o.upstream]
	switch {
	case o.server == 0 && o.client == 0: // no calls: the answer
		return decision{finish: answer, reason: "answer"}
	case o.final && o.client > 0: // forced final: server calls dropped, client calls shown
		return decision{finish: "tool_calls", reason: "client_tool_calls"}
	case o.final: // forced final with only server calls: dropped; the upstream's reason stays
		return decision{finish: answer, reason: "answer"}
	case o.server == 0: // client calls only
		return decision{finish: "tool_calls", reason: "client_tool_calls"}
	case !o.ran:
		return decision{next: stepRunTools}
	case o.client > 0: // mixed turn
		return decision{finish: "tool_calls", reason: "client_tool_calls", saveHidden: true}
	case o.required:
		return decision{finish: "stop", reason: "tool_choice", resultsAnswer: true}
	case o.stopReq:
		return decision{finish: "stop", reason: "tool_stop", resultsAnswer: true}
	}
	return decision{next: stepNextRound}
}

// TestForcedFinalLengthSameBothWays: a forced final round (max_iterations
// spent) whose upstream still calls only server tools and stops with
// "length" ends with the same finish_reason streamed and as JSON. The
// streamed loop kept "length" and the JSON loop said "stop" before both
// called decide.
func TestForcedFinalLengthSameBothWays(t *testing.T) {
	t.Parallel()
	args := `{"expression":"1+1"}`
	m := func() *fakeModel {
		return &fakeModel{turns: []turnFn{
			always(toolRound("up-1", "c1", "calculator", args, 10, 2),
				completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":`+q(args)+`}}]`, "tool_calls", 10, 2)),
			always([]string{
				chunk("up-2", `{"role":"assistant","content":""}`, ""),
				chunk("up-2", `{"content":"partial"}`, ""),
				chunk("up-2", callWhole(0, "c2", "calculator", args), ""),
				chunk("up-2", `{}`, "length"),
				usageChunk("up-2", 10, 2, 0),
			}, completion("up-2", "partial", `[{"id":"c2","type":"function","function":{"name":"calculator","arguments":`+q(args)+`}}]`, "length", 10, 2)),
		}}
	}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			t.Parallel()
			l := newLoop(t, []config.Tool{calcTool}, func(o *Options) { o.Loop.MaxIterations = 2 })
			fm := m()
			body := userBody + `}`
			if stream {
				body = userBody + `,"stream":true}`
			}
			resp, err := l.Chat(context.Background(), request(fm, stream, body))
			if err != nil {
				t.Fatal(err)
			}
			var finish string
			if stream {
				sum := checkStream(t, sse(t, resp.Stream), false)
				finish = sum.FinishReason
			} else {
				finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str
				if gjson.GetBytes(resp.Body, "choices.0.message.tool_calls").Exists() {
					t.Fatalf("dropped server calls shown: %s", resp.Body)
				}
			}
			if fm.calls() != 2 || gjson.GetBytes(fm.body(1), "tool_choice").Str != "none" {
				t.Fatalf("want a forced final second call, got %d calls", fm.calls())
			}
			if finish != "length" {
				t.Fatalf("finish_reason %q, want length (the upstream cut the final round)", finish)
			}
		})
	}
}
