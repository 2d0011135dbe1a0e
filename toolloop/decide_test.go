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
								for _, spent := range []bool{false, true} {
									o := roundOutcome{final: final, server: server, client: client, required: required, ran: ran, stopReq: stopReq, upstream: up, spent: spent}
									cut := up == "length" || up == "content_filter"
									if (!ran && stopReq) || (ran && (final || server == 0 || cut)) {
										continue // cannot happen: only run server calls report, and only they run
									}
									if ran && spent && client == 0 && !required {
										continue // cannot happen: a spent cap ends such a round before its calls run
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
}

// wantDecision states the rule case by case, the way docs/architecture.md
// draws the state machine.
func wantDecision(o roundOutcome) decision {
	answer := map[string]string{"": "stop", "stop": "stop", "tool_calls": "stop", "length": "length", "content_filter": "content_filter"}[o.upstream]
	cut := answer == "length" || answer == "content_filter"
	switch {
	case o.server == 0 && o.client == 0: // no calls: the answer
		return decision{finish: answer, reason: "answer"}
	case cut && o.client > 0: // a cut round hands its client calls back with the upstream's reason: the last call may be cut off
		return decision{finish: answer, reason: "client_tool_calls"}
	case cut && o.final: // forced final, cut: server calls dropped as on any final round
		return decision{finish: answer, reason: "answer"}
	case cut: // server calls of a cut round are never run: their arguments may be cut off
		return decision{finish: answer, reason: "cut"}
	case o.final && o.client > 0: // forced final: server calls dropped, client calls shown, earlier server rounds kept
		return decision{finish: "tool_calls", reason: "client_tool_calls", saveHidden: true}
	case o.final: // forced final with only server calls: dropped, and the budget ended the answer
		return decision{finish: "length", reason: "answer"}
	case o.server == 0: // client calls only: earlier server rounds are kept
		return decision{finish: "tool_calls", reason: "client_tool_calls", saveHidden: true}
	case !o.ran && o.spent && o.client == 0 && !o.required: // the output cap is spent: no round may follow, so the calls are not run
		return decision{finish: "length", reason: "max_tokens"}
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

// TestCutRoundEndsWithItsReason: a round the upstream cut ("length") ends
// the answer with "length", streamed and as JSON. A client call cut in the
// middle of its arguments is handed back as it is, but not as "tool_calls"
// (the stream said "tool_calls" and the JSON answer "length"); a server call
// is never run on arguments that may be cut off, and no round follows.
func TestCutRoundEndsWithItsReason(t *testing.T) {
	t.Parallel()
	const weather = `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	cut := func(header string) turnFn {
		return always([]string{
			chunk("up-1", `{"role":"assistant","content":null}`, ""),
			chunk("up-1", header, ""),
			chunk("up-1", callFrag(0, `{"ci`), ""),
			chunk("up-1", `{}`, "length"),
			usageChunk("up-1", 10, 2, 0),
		}, completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":`+q(gjson.Get(header, "tool_calls.0.function.name").Str)+`,"arguments":"{\"ci"}}]`, "length", 10, 2))
	}
	for _, tc := range []struct {
		name   string
		tools  []config.Tool
		header string
		calls  int // client calls shown
	}{
		{name: "client call", header: callHeader(0, "c1", "get_weather"), calls: 1},
		{name: "client call, server tools offered", tools: []config.Tool{calcTool}, header: callHeader(0, "c1", "get_weather"), calls: 1},
		{name: "server call", tools: []config.Tool{calcTool}, header: callHeader(0, "c1", "calculator")},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprint(tc.name, "/stream=", stream), func(t *testing.T) {
				t.Parallel()
				l := newLoop(t, tc.tools, nil)
				fm := &fakeModel{turns: []turnFn{cut(tc.header), always(textRound("up-2", "a second round", 10, 2), completion("up-2", "a second round", "", "stop", 10, 2))}}
				body := userBody + weather + `}`
				if stream {
					body = userBody + weather + `,"stream":true}`
				}
				resp, err := l.Chat(context.Background(), request(fm, stream, body))
				if err != nil {
					t.Fatal(err)
				}
				var finish string
				var args []string
				if stream {
					sum := checkStream(t, sse(t, resp.Stream), false)
					finish = sum.FinishReason
					for _, c := range sum.ToolCalls {
						args = append(args, c.Arguments)
					}
				} else {
					finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str
					for _, c := range gjson.GetBytes(resp.Body, "choices.0.message.tool_calls").Array() {
						args = append(args, c.Get("function.arguments").Str)
					}
				}
				if finish != "length" {
					t.Fatalf("finish_reason %q, want the upstream's length", finish)
				}
				if len(args) != tc.calls || (tc.calls > 0 && args[0] != `{"ci`) {
					t.Fatalf("client calls' arguments %q, want %d cut call(s)", args, tc.calls)
				}
				if fm.calls() != 1 {
					t.Fatalf("%d model calls: a cut round must end the answer", fm.calls())
				}
			})
		}
	}
}
