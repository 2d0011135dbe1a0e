package contextedit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

func TestClearPolicy(t *testing.T) {
	t.Parallel()
	alt := func(i int) string {
		if i%2 == 1 {
			return "fetch"
		}
		return "search"
	}
	type want struct {
		cleared []int // rounds whose results are cleared; the others are intact
		inputs  bool  // cleared rounds also have blank arguments
		ph      string
	}
	tests := []struct {
		name  string
		msgs  []string
		cfg   func(*config.ContextEdit)
		under bool // the trigger is above the count: nothing may change
		want  want
	}{
		{name: "keep 3 clears all older", msgs: loop(10, 8, search), want: want{cleared: []int{0, 1, 2, 3, 4, 5, 6}}},
		{name: "keep 0", msgs: loop(4, 8, search), cfg: func(c *config.ContextEdit) { c.Keep = 0 }, want: want{cleared: []int{0, 1, 2, 3}}},
		{name: "keep more than results", msgs: loop(3, 8, search), cfg: func(c *config.ContextEdit) { c.Keep = 5 }, want: want{}},
		{name: "exclude tools", msgs: loop(10, 8, alt), cfg: func(c *config.ContextEdit) { c.ExcludeTools = []string{"fetch"} }, want: want{cleared: []int{0, 2, 4, 6}}},
		{name: "placeholder", msgs: loop(5, 8, search), cfg: func(c *config.ContextEdit) { c.Placeholder = "(result removed; call the tool again if needed)" },
			want: want{cleared: []int{0, 1}, ph: "(result removed; call the tool again if needed)"}},
		{name: "clear tool inputs", msgs: loop(6, 8, search), cfg: func(c *config.ContextEdit) { c.ClearToolInputs = true }, want: want{cleared: []int{0, 1, 2}, inputs: true}},
		{name: "short results are not worth clearing", msgs: loop(6, 0, search), cfg: func(c *config.ContextEdit) { c.Placeholder = strings.Repeat("long placeholder ", 20) }, want: want{}},
		{name: "under trigger", msgs: loop(10, 8, search), under: true, want: want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := chatBody(tt.msgs...)
			total := mustCount(t, body)
			cfg := ceConfig(func(c *config.ContextEdit) {
				c.Trigger = float64(total - 1)
				if tt.under {
					c.Trigger = float64(total)
				}
				if tt.cfg != nil {
					tt.cfg(c)
				}
			})
			h, next := newHandler(cfg)
			req := request(body, 1_000_000)
			if _, err := h.Chat(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			got := next.last(t)
			if len(tt.want.cleared) == 0 {
				if got != req || &got.Body[0] != &body[0] {
					t.Fatal("unchanged request was not passed through as is")
				}
				if v := req.Meta.Get(MetaHeader); v != "" {
					t.Errorf("meta = %q, want none", v)
				}
				return
			}
			if string(req.Body) != string(body) {
				t.Fatal("the caller's body was modified")
			}
			if got.Messages.Rewritten {
				t.Error("clearing results moved no message, but the request says its messages were rewritten")
			}
			checkPairing(t, got.Body)
			if a, b := len(messages(got.Body)), len(tt.msgs); a != b {
				t.Fatalf("%d messages, want %d", a, b)
			}
			ph := tt.want.ph
			if ph == "" {
				ph = cfg.Placeholder
			}
			cleared := map[string]bool{}
			for _, r := range tt.want.cleared {
				cleared[fmt.Sprintf("call_%d", r)] = true
			}
			orig, origArgs := contents(body), arguments(body)
			args := arguments(got.Body)
			for id, c := range contents(got.Body) {
				switch {
				case cleared[id] && c != ph:
					t.Errorf("%s = %.40q, want the placeholder", id, c)
				case !cleared[id] && c != orig[id]:
					t.Errorf("%s was modified", id)
				}
				wantArgs := origArgs[id]
				if cleared[id] && tt.want.inputs {
					wantArgs = "{}"
				}
				if args[id] != wantArgs {
					t.Errorf("%s arguments = %q, want %q", id, args[id], wantArgs)
				}
			}
			after := mustCount(t, got.Body)
			if after > total-1 {
				t.Errorf("count after = %d, trigger %d", after, total-1)
			}
			wantMeta := fmt.Sprintf("cleared=%d;tokens_saved=%d", len(tt.want.cleared), total-after)
			if v := req.Meta.Get(MetaHeader); v != wantMeta {
				t.Errorf("meta = %q, want %q", v, wantMeta)
			}
		})
	}
}

// round runs one model call of a tool loop whose context carries log.
func round(t *testing.T, h pipeline.Handler, next *capture, elog *EditLog, body []byte, window int) []byte {
	t.Helper()
	req := request(body, window)
	req.EditLog = elog
	if _, err := h.Chat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return next.last(t).Body
}

// prefix returns body up to the end of its last message.
func prefix(body []byte) string {
	msgs := messages(body)
	last := msgs[len(msgs)-1]
	i := strings.LastIndex(string(body), last)
	return string(body[:i+len(last)])
}

// Round N+1's transcript is round N's plus new messages. After editing, round
// N's edited messages must come back byte for byte (the provider's cached
// prefix survives), cleared results must stay cleared, and the tool loop may
// keep either the unedited or the edited transcript.
func TestStableAcrossRounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		edited bool // the tool loop keeps the edited transcript (EditLog.Apply)
	}{{name: "unedited transcript"}, {name: "edited transcript", edited: true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := loop(6, 8, search)
			window := mustCount(t, chatBody(base...)) + 200 // the trigger (0.8) is crossed at once
			h, next := newHandler(ceConfig(func(c *config.ContextEdit) { c.ClearToolInputs = true; c.ClearAtLeast = 500 }))
			elog := &EditLog{}
			transcript := base
			var prevOut []byte
			var prevCleared []string
			edits, stable := 0, 0
			for r := range 8 {
				body := chatBody(transcript...)
				out := round(t, h, next, elog, body, window)
				checkPairing(t, out)
				cl := elog.Cleared()
				if len(cl) < len(prevCleared) || strings.Join(cl[:len(prevCleared)], ",") != strings.Join(prevCleared, ",") {
					t.Fatalf("round %d: cleared %v after %v", r, cl, prevCleared)
				}
				if prevOut != nil {
					if len(cl) == len(prevCleared) {
						// No new edit: the whole previous request is a prefix.
						if !strings.HasPrefix(string(out), prefix(prevOut)) {
							t.Fatalf("round %d: the edited prefix changed", r)
						}
						stable++
					} else {
						// A new batch: only the newly cleared pairs differ.
						fresh := strings.Join(cl[len(prevCleared):], ",")
						now := messages(out)
						for i, m := range messages(prevOut) {
							if now[i] == m {
								continue
							}
							id := gjson.Get(now[i], "tool_call_id").Str
							if id == "" {
								id = gjson.Get(now[i], "tool_calls.0.id").Str
							}
							if id == "" || !strings.Contains(","+fresh+",", ","+id+",") {
								t.Fatalf("round %d: message %d changed but is not newly cleared: %.80s", r, i, now[i])
							}
						}
					}
				}
				if out2 := round(t, h, next, elog, body, window); string(out2) != string(out) {
					t.Fatalf("round %d: the same transcript edited twice differs", r)
				}
				if len(cl) > len(prevCleared) {
					edits++
				}
				applied, err := elog.Apply(body)
				if err != nil {
					t.Fatal(err)
				}
				if string(applied) != string(out) {
					t.Fatalf("round %d: Apply differs from the middleware's body", r)
				}
				prevOut, prevCleared = out, cl
				// The tool loop appends the model's next call and its result.
				id := fmt.Sprintf("call_r%d", r)
				next := []string{callMsg(id, "search", `{"query":"more"}`), resultMsg(id, toolOutput(100+r, 4))}
				if tc.edited {
					transcript = append(messages(out), next...)
				} else {
					transcript = append(transcript, next...)
				}
			}
			if edits < 2 || stable < 3 {
				t.Errorf("%d rounds cleared results, %d kept the prefix: the test did not exercise batching", edits, stable)
			}
			n, saved, _ := elog.Stats()
			if n != len(prevCleared) || saved <= 0 {
				t.Errorf("Stats = %d, %d", n, saved)
			}
			// The header reports the whole client request, not the last round.
			req := request(chatBody(transcript...), window)
			req.EditLog = elog
			if _, err := h.Chat(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if v, want := req.Meta.Get(MetaHeader), fmt.Sprintf("cleared=%d;tokens_saved=%d", n, saved); v != want {
				t.Errorf("meta = %q, want %q", v, want)
			}
		})
	}
}

// clear_at_least clears more than the trigger needs, and the next round,
// under the trigger again, clears nothing.
func TestClearAtLeast(t *testing.T) {
	t.Parallel()
	base := loop(10, 8, search)
	total := mustCount(t, chatBody(base...))
	one := counter(t, "").CountText(toolOutput(0, 8)) // about one result
	tests := []struct {
		name        string
		atLeast     int
		wantCleared int // exactly, or 0 for none
	}{
		{name: "just enough", atLeast: 1, wantCleared: 1},
		{name: "batch of three", atLeast: 2*one + one/2, wantCleared: 3},
		{name: "minimum out of reach", atLeast: 100 * one, wantCleared: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, next := newHandler(ceConfig(func(c *config.ContextEdit) { c.Trigger = float64(total - 10); c.ClearAtLeast = tt.atLeast }))
			elog := &EditLog{}
			out := round(t, h, next, elog, chatBody(base...), 1_000_000)
			if n := len(elog.Cleared()); n != tt.wantCleared {
				t.Fatalf("cleared %d, want %d", n, tt.wantCleared)
			}
			if tt.wantCleared == 0 {
				return
			}
			// A short exchange keeps the count under the trigger: no new edit.
			more := append(append([]string{}, base...), asstMsg("Here is what I found."), userMsg("Thanks, and the weather?"))
			out2 := round(t, h, next, elog, chatBody(more...), 1_000_000)
			if n := len(elog.Cleared()); n != tt.wantCleared {
				t.Errorf("round 2 cleared %d in total, want %d", n, tt.wantCleared)
			}
			if !strings.HasPrefix(string(out2), prefix(out)) {
				t.Error("round 2 changed the prefix")
			}
		})
	}
}

func TestLastResortError(t *testing.T) {
	t.Parallel()
	body := chatBody(loop(10, 8, search)...)
	h, next := newHandler(ceConfig(nil))
	_, err := h.Chat(context.Background(), request(body, 600)) // 3 kept results do not fit
	var pe *pipeline.Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *pipeline.Error", err)
	}
	if pe.Status != 400 || pe.Code != "context_length_exceeded" || pe.Param != "messages" || pe.Type != "invalid_request_error" {
		t.Errorf("error = %+v", pe)
	}
	if !strings.Contains(pe.Message, "maximum context length is 600 tokens") {
		t.Errorf("message = %q", pe.Message)
	}
	if len(next.reqs) != 0 {
		t.Error("next was called")
	}
}

// The requested completion counts against the window.
func TestCompletionReserve(t *testing.T) {
	t.Parallel()
	msgs := loop(2, 2, search)
	total := mustCount(t, chatBody(msgs...))
	cfg := ceConfig(func(c *config.ContextEdit) { c.Trigger = 1; c.Keep = 5 })
	for _, tt := range []struct {
		name, extra string
		fail        bool
	}{{name: "no max tokens"}, {name: "max_completion_tokens", extra: `"max_completion_tokens":200,`, fail: true}, {name: "max_tokens", extra: `"max_tokens":200,`, fail: true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(strings.Replace(string(chatBody(msgs...)), `{"model":"m",`, `{"model":"m",`+tt.extra, 1))
			h, _ := newHandler(cfg)
			_, err := h.Chat(context.Background(), request(body, total+100))
			if (err != nil) != tt.fail {
				t.Errorf("err = %v, want failure %v", err, tt.fail)
			}
		})
	}
}

// turns builds n finished turns (user, call, result, answer) and a last turn
// in progress.
func turns(n int) []string {
	msgs := []string{sysMsg("You are helpful."), `{"role":"developer","content":"Be brief."}`}
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		msgs = append(msgs, userMsg(fmt.Sprintf("Question %d about foxes?", i)), callMsg(id, "search", `{"q":"fox"}`), resultMsg(id, toolOutput(i, 6)), asstMsg(fmt.Sprintf("Answer %d: foxes are fine.", i)))
	}
	return append(msgs, userMsg("Last question?"), callMsg("last", "search", `{"q":"last"}`), resultMsg("last", toolOutput(99, 6)))
}

func TestDropTurns(t *testing.T) {
	t.Parallel()
	msgs := turns(8)
	last := mustCount(t, chatBody(append(msgs[:2:2], msgs[len(msgs)-3:]...)...)) // system + latest turn
	tests := []struct {
		name     string
		window   int
		fail     bool
		keepsOld bool // some finished turn survives
	}{
		{name: "drops oldest turns", window: last + 600, keepsOld: true},
		{name: "only the latest turn fits", window: last + 40},
		{name: "latest turn alone is too big", window: last - 50, fail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, next := newHandler(ceConfig(func(c *config.ContextEdit) { c.LastResort = "drop_turns"; c.Keep = 8 }))
			elog := &EditLog{}
			req := request(chatBody(msgs...), tt.window)
			req.EditLog = elog
			_, err := h.Chat(context.Background(), req)
			if tt.fail {
				var pe *pipeline.Error
				if !errors.As(err, &pe) || pe.Code != "context_length_exceeded" {
					t.Fatalf("err = %v, want context_length_exceeded", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !next.last(t).Messages.Rewritten {
				t.Error("turns were dropped, but the request does not say its messages moved")
			}
			out := next.last(t).Body
			checkPairing(t, out)
			got := messages(out)
			if got[0] != msgs[0] || got[1] != msgs[1] {
				t.Error("system or developer message dropped")
			}
			if strings.Join(got[len(got)-3:], ",") != strings.Join(msgs[len(msgs)-3:], ",") {
				t.Error("the latest turn was changed")
			}
			if !strings.Contains(got[2], `"role":"user"`) {
				t.Errorf("first kept message is not a user turn: %.60s", got[2])
			}
			if len(got) >= len(msgs) {
				t.Fatal("nothing dropped")
			}
			if kept := len(got) > 5; kept != tt.keepsOld {
				t.Errorf("older turns kept = %v, want %v (%d messages)", kept, tt.keepsOld, len(got))
			}
			if n := mustCount(t, out); n > tt.window {
				t.Errorf("count %d > window %d", n, tt.window)
			}
			if _, _, d := elog.Stats(); d != len(msgs)-len(got) {
				t.Errorf("Stats dropped = %d, want %d", d, len(msgs)-len(got))
			}
			// Next round: the same turns are dropped again, the prefix holds.
			id := "next"
			more := append(append([]string{}, msgs...), callMsg(id, "search", `{}`), resultMsg(id, "short"))
			out2 := round(t, h, next, elog, chatBody(more...), tt.window)
			checkPairing(t, out2)
			if !strings.HasPrefix(string(out2), prefix(out)) {
				t.Error("round 2 changed the prefix")
			}
		})
	}
}

// Each route is edited for its own window (fallback calls each route's chain).
func TestRouteWindow(t *testing.T) {
	t.Parallel()
	body := chatBody(loop(10, 8, search)...)
	total := mustCount(t, body)
	h, next := newHandler(ceConfig(nil))
	big := request(body, 2*total)
	if _, err := h.Chat(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if next.last(t) != big {
		t.Error("big window: request edited")
	}
	small := request(body, total)
	small.Route.Encoding = "cl100k_base"
	if _, err := h.Chat(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	if got := next.last(t); got == small || len(got.Body) >= len(body) {
		t.Error("small window: request not edited")
	}
	unknown := request(body, 0)
	if _, err := h.Chat(context.Background(), unknown); err != nil || next.last(t) != unknown {
		t.Errorf("unknown window: err %v or edited", err)
	}
}

// The previous round's prompt_tokens replace counting the prefix.
func TestPromptHint(t *testing.T) {
	t.Parallel()
	msgs := loop(8, 8, search)
	body := chatBody(msgs...)
	total := mustCount(t, body)
	for _, tt := range []struct {
		name    string
		hint    bool
		log     bool
		cleared bool
		bytes   bool // the trigger is above the body's bytes: the cheap bound alone would skip
	}{
		{name: "no hint"},
		{name: "hint", hint: true, log: true, cleared: true},
		{name: "hint without log is ignored", hint: true},
		{name: "no hint, body under the byte bound", bytes: true},
		{name: "hint over a body under the byte bound", hint: true, log: true, cleared: true, bytes: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			trigger := total + 100
			if tt.bytes {
				trigger = len(body) + 100
			}
			h, next := newHandler(ceConfig(func(c *config.ContextEdit) { c.Trigger = float64(trigger) }))
			req := request(body, 1_000_000)
			if tt.log {
				req.EditLog = NewEditLog()
			}
			if tt.hint {
				// The provider counted the first len-2 messages as more than the trigger.
				req.PromptHint = pipeline.PromptHint{Tokens: trigger + 50, Messages: len(msgs) - 2}
			}
			if _, err := h.Chat(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if edited := next.last(t) != req; edited != tt.cleared {
				t.Errorf("edited = %v, want %v", edited, tt.cleared)
			}
		})
	}
}

func TestEditLogApply(t *testing.T) {
	t.Parallel()
	l := &EditLog{}
	if editLogOf(&pipeline.Request{}) != nil || editLogOf(&pipeline.Request{EditLog: l}) != l {
		t.Error("editLogOf does not return the request's log")
	}
	if _, err := l.Apply([]byte(`[]`)); !errors.Is(err, ErrInvalidBody) {
		t.Errorf("Apply([]) err = %v", err)
	}
	body := chatBody(loop(2, 1, search)...)
	if out, err := l.Apply(body); err != nil || &out[0] != &body[0] {
		t.Error("Apply of an empty log copied the body")
	}
}

// metricsRuns gives each TestMetrics run its own route label.
var metricsRuns atomic.Int64

func TestMetrics(t *testing.T) {
	t.Parallel()
	route := fmt.Sprintf("metrics-test-%d", metricsRuns.Add(1)) // the counters are global: -count=N safe
	body := chatBody(loop(6, 8, search)...)
	total := mustCount(t, body)
	h, _ := newHandler(ceConfig(func(c *config.ContextEdit) { c.Trigger = float64(total - 1) }))
	req := request(body, 1_000_000)
	req.Route.Name = route
	if _, err := h.Chat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	small := request(chatBody(userMsg("hi")), 1_000_000)
	small.Route.Name = route
	if _, err := h.Chat(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	over := request(body, 100)
	over.Route.Name = route
	if _, err := h.Chat(context.Background(), over); err == nil {
		t.Fatal("no error over the window")
	}
	for _, tt := range []struct {
		name string
		got  float64
		want float64
	}{
		{name: "cleared", got: value(t, metricCleared.WithLabelValues(route)), want: 3},
		{name: "calls cleared", got: value(t, metricCalls.WithLabelValues(route, outcomeCleared)), want: 1},
		{name: "calls skipped", got: value(t, metricCalls.WithLabelValues(route, outcomeSkipped)), want: 1},
		{name: "calls rejected", got: value(t, metricCalls.WithLabelValues(route, outcomeRejected)), want: 1},
		{name: "last resort error", got: value(t, metricLastResort.WithLabelValues(route, "error")), want: 1},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if saved := value(t, metricSaved.WithLabelValues(route)); saved <= 0 {
		t.Errorf("tokens saved = %v", saved)
	}
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// The refusal names the client's field: "input" for a Responses request's
// messages. It says "after context editing" only when editing took
// something out.
func TestLastResortErrorNamesClientField(t *testing.T) {
	t.Parallel()
	h, _ := newHandler(ceConfig(nil))
	req := request(chatBody(userMsg(strings.Repeat("word ", 300))), 60)
	req.Messages.Input = true
	_, err := h.Chat(context.Background(), req)
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Code != "context_length_exceeded" || pe.Param != "input" {
		t.Fatalf("err = %#v, want context_length_exceeded naming input", err)
	}
	if strings.Contains(pe.Message, "after context editing") {
		t.Errorf("message = %q: nothing was edited", pe.Message)
	}
	_, err = h.Chat(context.Background(), request(chatBody(loop(10, 8, search)...), 600))
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, "after context editing") {
		t.Errorf("err = %v: the results cleared were not said", err)
	}
}
