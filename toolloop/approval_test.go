package toolloop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

func TestParseVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		kind    verdictKind
		args    string
		message string
	}{
		{name: "approve", text: `{"decision":"approve"}`, kind: decApprove},
		{name: "approve with spaces", text: " \n{ \"decision\" : \"approve\" }\n", kind: decApprove},
		{name: "edit object", text: `{"decision":"edit","arguments":{"path":"/b"}}`, kind: decEdit, args: `{"path":"/b"}`},
		{name: "edit string", text: `{"decision":"edit","arguments":"{\"path\":\"/b\"}"}`, kind: decEdit, args: `{"path":"/b"}`},
		{name: "edit array", text: `{"decision":"edit","arguments":[1]}`, kind: decInvalid, message: "not a JSON object"},
		{name: "edit missing", text: `{"decision":"edit"}`, kind: decInvalid, message: "not a JSON object"},
		{name: "edit string not json", text: `{"decision":"edit","arguments":"path=/b"}`, kind: decInvalid, message: "not a JSON object"},
		{name: "reject", text: `{"decision":"reject","message":"no"}`, kind: decReject, message: "no"},
		{name: "reject bare", text: `{"decision":"reject"}`, kind: decReject},
		{name: "reject long message bounded", text: `{"decision":"reject","message":"` + strings.Repeat("é", 3000) + `"}`, kind: decReject, message: strings.Repeat("é", 1000)},
		{name: "unknown decision", text: `{"decision":"maybe"}`, kind: decInvalid, message: `"maybe" is not one of`},
		{name: "decision not a string", text: `{"decision":true}`, kind: decInvalid, message: "true is not one of"},
		{name: "wrong case", text: `{"decision":"APPROVE"}`, kind: decInvalid},
		{name: "free text", text: "I did it myself.", kind: decAnswer},
		{name: "other json", text: `{"files":3}`, kind: decAnswer},
		{name: "broken json", text: `{"decision":"approve"`, kind: decAnswer},
		{name: "json array", text: `[{"decision":"approve"}]`, kind: decAnswer},
		{name: "empty", text: "", kind: decAnswer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := parseVerdict(tc.text)
			if v.kind != tc.kind || string(v.args) != tc.args {
				t.Fatalf("got %v args %q, want %v args %q", v.kind, v.args, tc.kind, tc.args)
			}
			if tc.kind == decReject && v.message != tc.message {
				t.Fatalf("message %q, want %q", v.message, tc.message)
			}
			if tc.kind == decInvalid && !strings.Contains(v.message, tc.message) {
				t.Fatalf("message %q, want it to contain %q", v.message, tc.message)
			}
		})
	}
}

// FuzzParseVerdict: never panics; only an object with a "decision" key
// runs anything, an edit's arguments are always one JSON object, and a
// reject reason stays bounded valid UTF-8.
func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{`{"decision":"approve"}`, `{"decision":"edit","arguments":{"a":1}}`, `{"decision":"edit","arguments":"{}"}`,
		`{"decision":"reject","message":"x"}`, `{"decision":1}`, "text", `{"decision":"edit","arguments":"[1]"}`, "{\"decision\":\"reject\",\"message\":\"\xff\"}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		v := parseVerdict(text)
		if v.kind != decAnswer && !strings.Contains(text, "decision") {
			t.Fatalf("%v without a decision key: %q", v.kind, text)
		}
		if v.kind == decEdit && (!gjson.ValidBytes(v.args) || !gjson.ParseBytes(v.args).IsObject()) {
			t.Fatalf("edit arguments %q", v.args)
		}
		if v.kind == decReject && len(v.message) > maxReasonBytes {
			t.Fatalf("reason of %d bytes", len(v.message))
		}
		_ = v.kind.String()
	})
}

func TestApprovalIDs(t *testing.T) {
	t.Parallel()
	acme, globex := &pipeline.Tenant{Name: "acme"}, &pipeline.Tenant{Name: "globex"}
	k := newApprovalKey("s3cret", nil)
	id := k.mint(acme)
	if !strings.HasPrefix(id, approvalPrefix) || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		t.Fatalf("id %q: want the prefix, at most 64 characters of [A-Za-z0-9_-]", id)
	}
	if k.mint(acme) == id {
		t.Fatal("two ids alike")
	}
	tampered := id[:len(approvalPrefix)] + "A" + id[len(approvalPrefix)+1:]
	if tampered == id {
		tampered = id[:len(approvalPrefix)] + "B" + id[len(approvalPrefix)+1:]
	}
	tests := []struct {
		name   string
		key    approvalKey
		tenant *pipeline.Tenant
		id     string
		want   bool
	}{
		{name: "own", key: k, tenant: acme, id: id, want: true},
		{name: "same secret, another process", key: newApprovalKey("s3cret", nil), tenant: acme, id: id, want: true},
		{name: "other tenant", key: k, tenant: globex, id: id},
		{name: "no tenant", key: k, id: id},
		{name: "other secret", key: newApprovalKey("other", nil), tenant: acme, id: id},
		{name: "random key", key: newApprovalKey("", nil), tenant: acme, id: id},
		{name: "tampered nonce", key: k, tenant: acme, id: tampered},
		{name: "no tag", key: k, tenant: acme, id: approvalPrefix + "ABC"},
		{name: "ordinary id", key: k, tenant: acme, id: newCallID()},
	}
	// A generated key (Options.ApprovalKey) is what a reload hands on: the
	// ids it minted verify under it, not under another random key, and a
	// configured secret wins over it.
	gen := NewApprovalKey()
	gid := newApprovalKey("", gen).mint(acme)
	tests = append(tests, []struct {
		name   string
		key    approvalKey
		tenant *pipeline.Tenant
		id     string
		want   bool
	}{
		{name: "same generated key", key: newApprovalKey("", gen), tenant: acme, id: gid, want: true},
		{name: "generated key, other tenant", key: newApprovalKey("", gen), tenant: globex, id: gid},
		{name: "another random key", key: newApprovalKey("", nil), tenant: acme, id: gid},
		{name: "secret over generated key", key: newApprovalKey("s3cret", gen), tenant: acme, id: gid},
	}...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.key.verify(tc.tenant, tc.id); got != tc.want {
				t.Fatalf("verify = %v", got)
			}
		})
	}
}

// gatedCalc is the calculator behind approval.
var gatedCalc = config.Tool{Name: "calculator", Kind: "builtin", Approval: "always"}

// TestApprovalStreamAfterServerRound: a gated call in a later round of a
// stream (after a server-only round) is shown with dense index 0 and an
// approval id, its server sibling's round is kept, and x_gateway lists it.
func TestApprovalStreamAfterServerRound(t *testing.T) {
	t.Parallel()
	m := &fakeModel{turns: []turnFn{
		always(toolRound("up1", "u1", "current_time", `{}`, 10, 1), ""),
		always([]string{
			chunk("up2", `{"role":"assistant","content":null}`, ""),
			chunk("up2", callWhole(0, "u2", "current_time", `{}`), ""),
			chunk("up2", callWhole(1, "u3", "calculator", `{"expression":"6*7"}`), ""),
			chunk("up2", `{}`, "tool_calls"),
			usageChunk("up2", 10, 1, 0),
		}, ""),
	}}
	st := NewMemoryState(time.Hour, 100, 1<<20)
	l := newLoop(t, []config.Tool{gatedCalc, timeTool}, func(o *Options) { o.State = st })
	resp, err := l.Chat(context.Background(), request(m, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), false)
	if len(sum.ToolCalls) != 1 || sum.ToolCalls[0].Name != "calculator" || !strings.HasPrefix(sum.ToolCalls[0].ID, approvalPrefix) || sum.FinishReason != "tool_calls" {
		t.Fatalf("client saw %+v, finish %s", sum.ToolCalls, sum.FinishReason)
	}
	xg := gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway")
	if xg.Get("awaiting_approval.0.id").Str != sum.ToolCalls[0].ID || xg.Get("awaiting_approval.0.arguments").Str != `{"expression":"6*7"}` {
		t.Fatalf("x_gateway %s", xg.Raw)
	}
	if n, _ := st.Len(); n != 2 { // the mixed turn and the call awaiting approval
		t.Fatalf("%d state entries", n)
	}
}

// FuzzSettle: any follow-up body naming approval ids settles without
// panicking, into valid JSON in which no approval answer is left as sent.
func FuzzSettle(f *testing.F) {
	l := newLoop(f, []config.Tool{gatedCalc}, func(o *Options) { o.State = NewMemoryState(time.Hour, 100, 1<<20) })
	id := l.approval.mint(nil)
	f.Add(`{"model":"gpt-x","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"calculator","arguments":"{}"}}]},{"role":"tool","tool_call_id":"` + id + `","content":"{\"decision\":\"approve\"}"}]}`)
	f.Add(`{"messages":[{"role":"tool","tool_call_id":"call_gwa_x","content":[{"type":"text","text":"{\"decision\":\"approve\"}"}]}]}`)
	f.Add(`{"messages":[{"role":"tool","tool_call_id":"call_gwa_","content":null},1,"x"]}`)
	f.Fuzz(func(t *testing.T, body string) {
		if !gjson.Valid(body) {
			return
		}
		req := request(nil, false, body)
		out, _, err := l.settle(context.Background(), req, l.static.tools)
		if err != nil {
			t.Fatal(err)
		}
		if !gjson.ValidBytes(out.Body) {
			t.Fatalf("invalid body %q", out.Body)
		}
		for _, m := range gjson.GetBytes(out.Body, "messages").Array() {
			if m.Get("role").Str == "tool" && strings.HasPrefix(m.Get("tool_call_id").Str, approvalPrefix) && m.Get("content").Type != gjson.String {
				t.Fatalf("an answer left as sent: %s", m.Raw)
			}
		}
	})
}

// BenchmarkApproval is the cost of approvals configured but not triggered:
// a loop of calculator rounds (never gated) with and without a gated tool
// offered, and a follow-up body scanned for approval ids.
func BenchmarkApproval(b *testing.B) {
	for _, tc := range []struct {
		name  string
		tools []config.Tool
	}{
		{"off", []config.Tool{calcTool, timeTool}},
		{"configured", []config.Tool{calcTool, {Name: "current_time", Kind: "builtin", Approval: "always"}}},
	} {
		for _, stream := range []bool{false, true} {
			body := userBody + `}`
			name := tc.name + "/blocking"
			if stream {
				body = userBody + `,"stream":true,"stream_options":{"include_usage":true}}`
				name = tc.name + "/stream"
			}
			b.Run(name, func(b *testing.B) {
				m := newInstantModel()
				l := newLoop(b, tc.tools, func(o *Options) { o.State = NewMemoryState(time.Hour, 100, 1<<20) })
				req := request(m, stream, body)
				b.ReportAllocs()
				for b.Loop() {
					chatAndDrain(b, l, req)
				}
			})
		}
	}
}

// BenchmarkApprovalChecks is the work approvals add to a request that calls
// no gated tool: the scan of the body for approval ids, and the gate check
// of one server call (name resolution and the tenant's policy).
func BenchmarkApprovalChecks(b *testing.B) {
	l := newLoop(b, []config.Tool{calcTool, {Name: "current_time", Kind: "builtin", Approval: "always"}}, nil)
	body := []byte(userBody + `,"tools":[{"type":"function","function":{"name":"lookup_city","parameters":{"type":"object"}}}]}`)
	req := request(nil, false, string(body))
	s := &session{l: l, req: req, p: &plan{set: &toolSet{tools: l.static.tools}}}
	c := &call{name: "calculator"} // a call is on the heap already
	b.ReportAllocs()
	for b.Loop() {
		if hasApprovals(body) {
			b.Fatal("approval ids found")
		}
		if s.gate(c) {
			b.Fatal("calculator gated")
		}
	}
}

// A call awaiting approval that cannot be kept fails the response with
// 503 approval_unavailable, JSON and stream alike: the pause would be
// handed to a person whose decision finds nothing.
func TestApprovalUnsavedFails(t *testing.T) {
	t.Parallel()
	round := []string{
		chunk("up", `{"role":"assistant","content":null}`, ""),
		chunk("up", callWhole(0, "u1", "calculator", `{"expression":"6*7"}`), ""),
		chunk("up", `{}`, "tool_calls"),
	}
	body := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"u1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}}]},"finish_reason":"tool_calls"}]}`
	for _, stream := range []bool{false, true} {
		m := &fakeModel{turns: []turnFn{always(round, body)}}
		l := newLoop(t, []config.Tool{gatedCalc}, func(o *Options) { o.State = failingState{} }) // state_test.go: a store that cannot save
		b := userBody + `}`
		if stream {
			b = userBody + `,"stream":true}`
		}
		req := request(m, stream, b)
		resp, err := l.Chat(context.Background(), req)
		if stream && err == nil {
			for {
				if _, err = resp.Stream.Next(); err != nil {
					break
				}
			}
		}
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 503 || pe.Code != pipeline.CodeApprovalUnavailable {
			t.Fatalf("stream %v: err %v, want 503 approval_unavailable", stream, err)
		}
		// The JSON answer's error hands nothing over: no header says a call
		// awaits a decision (a stream sets none at all).
		if v := req.Meta.Get(HeaderApproval); !stream && v != "" {
			t.Fatalf("stream %v: the failed answer says %s: %s", stream, HeaderApproval, v)
		}
	}
}

// A call awaiting approval that the history hands out but never answers
// (the person went on to the next message) is left out of what the model
// reads: an upstream would refuse an assistant call without its tool
// message on this turn and every later one. An answered one stays.
func TestUnansweredApprovalDropped(t *testing.T) {
	t.Parallel()
	const pending = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_gwa_PENDING","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]}`
	for _, tc := range []struct{ name, history string }{
		{"alone", `{"role":"user","content":"add"},` + pending + `,{"role":"user","content":"never mind, tell a joke"}`},
		{"beside text", `{"role":"user","content":"add"},` + strings.Replace(pending, `"content":null`, `"content":"Let me add."`, 1) + `,{"role":"user","content":"never mind"}`},
	} {
		m := &fakeModel{turns: []turnFn{always(textRound("up", "A joke.", 1, 1), `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"A joke."},"finish_reason":"stop"}]}`)}}
		l := newLoop(t, []config.Tool{gatedCalc}, func(o *Options) { o.State = NewMemoryState(time.Hour, 100, 1<<20) })
		resp, err := l.Chat(context.Background(), request(m, false, `{"model":"gpt-x","messages":[`+tc.history+`]}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c := gjson.GetBytes(resp.Body, "choices.0.message.content").Str; c != "A joke." {
			t.Fatalf("%s: answer %s", tc.name, resp.Body)
		}
		up := string(m.bodies[0])
		if strings.Contains(up, "call_gwa_PENDING") || !strings.Contains(up, "never mind") || !gjson.Valid(up) {
			t.Fatalf("%s: the model read %s", tc.name, up)
		}
		if tc.name == "beside text" && !strings.Contains(up, "Let me add.") {
			t.Fatalf("%s: the assistant's text was dropped: %s", tc.name, up)
		}
	}
}

// The same decision sent twice for one call (two tool messages answering
// it) settles once, and the second message is left out of what the model
// reads: an upstream refuses a tool message its call does not expect, and
// the client got that 400 after the tool had run.
func TestApprovalAnsweredTwiceSentOnce(t *testing.T) {
	t.Parallel()
	const call = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_gwa_X","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]}`
	const answer = `{"role":"tool","tool_call_id":"call_gwa_X","content":"{\"decision\":\"approve\"}"}`
	m := &fakeModel{turns: []turnFn{always(textRound("up", "Done.", 1, 1), `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`)}}
	l := newLoop(t, []config.Tool{gatedCalc}, func(o *Options) { o.State = NewMemoryState(time.Hour, 100, 1<<20) })
	if _, err := l.Chat(context.Background(), request(m, false, `{"model":"gpt-x","messages":[{"role":"user","content":"add"},`+call+`,`+answer+`,`+answer+`]}`)); err != nil {
		t.Fatal(err)
	}
	if n := gjson.GetBytes(m.bodies[0], `messages.#(tool_call_id=="call_gwa_X")#`).Get("#").Int(); n != 1 {
		t.Fatalf("the model read %d answers to the call: %s", n, m.bodies[0])
	}
}

// A stored history keeps only outcomes a later request meets too: not a
// call claimed by another request, nor a state that could not be read.
func TestTransientOutcomes(t *testing.T) {
	t.Parallel()
	for content, want := range map[string]bool{
		`{"status":"error","error":{"type":"approval_in_progress","message":"m"}}`: true,
		`{"status":"error","error":{"type":"approval_expired","message":"m"}}`:     true,
		`{"status":"error","error":{"type":"rejected","message":"no"}}`:            false,
		`{"status":"ok","data":{"result":42}}`:                                     false,
	} {
		if got := transient([]byte(content)); got != want {
			t.Errorf("%s: %v, want %v", content, got, want)
		}
	}
}

// A decision that cannot be applied because the state store fails (Redis
// stalled) fails the request with 503 approval_unavailable: told "not
// run", the call would run on a later replay of the same history once the
// store answers. A history whose answer is already a settled result (a
// stored response's) needs no state and goes on.
func TestApprovalStateUnreadableFails(t *testing.T) {
	t.Parallel()
	const call = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_gwa_X","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]}`
	done := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`
	for _, tc := range []struct {
		answer string
		fails  bool
	}{
		{`{\"decision\":\"approve\"}`, true},
		{`{\"status\":\"ok\",\"data\":{\"result\":2}}`, false},
	} {
		m := &fakeModel{turns: []turnFn{always(textRound("up", "Done.", 1, 1), done)}}
		l := newLoop(t, []config.Tool{gatedCalc}, func(o *Options) { o.State = failingState{} })
		body := `{"model":"gpt-x","messages":[{"role":"user","content":"add"},` + call + `,{"role":"tool","tool_call_id":"call_gwa_X","content":"` + tc.answer + `"}]}`
		_, err := l.Chat(context.Background(), request(m, false, body))
		var pe *pipeline.Error
		if failed := errors.As(err, &pe) && pe.Status == 503 && pe.Code == pipeline.CodeApprovalUnavailable; failed != tc.fails || !tc.fails && err != nil {
			t.Fatalf("answer %s: err %v, want failed %v", tc.answer, err, tc.fails)
		}
		if tc.fails && len(m.bodies) != 0 {
			t.Fatalf("answer %s: the model was called: %s", tc.answer, m.bodies[0])
		}
	}
}

// A near miss of a gated tool is shown for approval under the name of the
// tool that will run on approval, not the one the model wrote: a person
// must approve what runs.
func TestApprovalNearMissShowsTheToolThatRuns(t *testing.T) {
	t.Parallel()
	body := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"u1","type":"function","function":{"name":"calculater","arguments":"{\"expression\":\"6*7\"}"}}]},"finish_reason":"tool_calls"}]}`
	m := &fakeModel{turns: []turnFn{always(nil, body)}}
	l := newLoop(t, []config.Tool{gatedCalc}, nil)
	resp, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	call := gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.0")
	if call.Get("function.name").Str != "calculator" || !strings.HasPrefix(call.Get("id").Str, approvalPrefix) {
		t.Fatalf("the call awaiting approval: %s", call.Raw)
	}
}

// A request that ends (its client left) while the call it approved runs
// keeps that outcome: a replay of the history shows the call interrupted,
// not "in progress" (nothing runs) nor "expired" (the decision was
// applied), and the tool does not run again. A call that finished as the
// request ended keeps its own result.
func TestApprovalInterruptedRunIsKept(t *testing.T) {
	t.Parallel()
	for tool, want := range map[string]string{"mcp_hang": "interrupted", "mcp_late": "late but done"} {
		t.Run(tool, func(t *testing.T) {
			t.Parallel()
			approvalInterrupted(t, tool, want)
		})
	}
}

func approvalInterrupted(t *testing.T, tool, want string) {
	src := &fakeSource{}
	hang := srcTool(tool, `{"type":"object"}`)
	hang.Approval = "always"
	src.set(hang)
	callBody := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"u1","type":"function","function":{"name":"` + tool + `","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`
	done := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`
	m := &fakeModel{turns: []turnFn{always(nil, callBody), always(nil, done)}}
	l := newLoop(t, nil, func(o *Options) { o.Source, o.State = src, NewMemoryState(time.Hour, 100, 1<<20) })
	first, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	call := gjson.GetBytes(first.Body, "choices.0.message")
	id := call.Get("tool_calls.0.id").Str
	if !strings.HasPrefix(id, approvalPrefix) {
		t.Fatalf("no call awaiting approval: %s", first.Body)
	}
	history := `{"model":"gpt-x","messages":[{"role":"user","content":"hang"},` + call.Raw +
		`,{"role":"tool","tool_call_id":"` + id + `","content":"{\"decision\":\"approve\"}"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := l.Chat(ctx, request(m, false, history)); err == nil {
		t.Fatal("the request whose client left succeeded")
	}
	if _, err := l.Chat(context.Background(), request(m, false, history)); err != nil {
		t.Fatal(err)
	}
	last := m.bodies[len(m.bodies)-1]
	got := gjson.GetBytes(last, `messages.#(tool_call_id=="`+id+`").content`).Str
	if !strings.Contains(got, want) {
		t.Fatalf("the replay shows the call as %s, want %s", got, want)
	}
}

// A call whose claim was left by a request that never finished it (its
// replica stopped while the call ran) is in progress while the call could
// still be running, and interrupted once the claim is older than the
// tool's timeout and claimSlack: never run again, and no longer "in
// progress" for the state's whole lifetime. The outcome is kept for
// later replays.
func TestApprovalLeftClaimIsInterrupted(t *testing.T) {
	t.Parallel()
	st := NewMemoryState(3*time.Hour, 100, 1<<20)
	body := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"u1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}}]},"finish_reason":"tool_calls"}]}`
	done := `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`
	m := &fakeModel{turns: []turnFn{always(nil, body), always(nil, done)}}
	l := newLoop(t, []config.Tool{gatedCalc}, func(o *Options) { o.State = st })
	first, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	call := gjson.GetBytes(first.Body, "choices.0.message")
	id := call.Get("tool_calls.0.id").Str
	history := `{"model":"gpt-x","messages":[{"role":"user","content":"x"},` + call.Raw +
		`,{"role":"tool","tool_call_id":"` + id + `","content":"{\"decision\":\"approve\"}"}]}`
	seen := func() string {
		if _, err := l.Chat(context.Background(), request(m, false, history)); err != nil {
			t.Fatal(err)
		}
		return gjson.GetBytes(m.bodies[len(m.bodies)-1], `messages.#(tool_call_id=="`+id+`").content`).Str
	}
	claim := func(ago time.Duration) {
		st.mu.Lock()
		st.now = func() time.Time { return time.Now().Add(-ago) }
		st.mu.Unlock()
		if won, err := st.Claim(context.Background(), approvalClaimKey(nil, id)); err != nil || !won {
			t.Fatalf("claim: %v %v", won, err)
		}
		st.mu.Lock()
		st.now = time.Now
		st.mu.Unlock()
	}
	claim(time.Second) // a request that is running the call now
	if got := seen(); !strings.Contains(got, "approval_in_progress") {
		t.Fatalf("a young claim: the model read %s", got)
	}
	// A claim from ten minutes ago: the call's 5 s timeout is long past.
	st.mu.Lock()
	for k, el := range st.byKey {
		if k == approvalClaimKey(nil, id) {
			st.remove(el)
		}
	}
	st.mu.Unlock()
	claim(10 * time.Minute)
	if got := seen(); !strings.Contains(got, `"interrupted"`) || strings.Contains(got, "42") {
		t.Fatalf("a claim left behind: the model read %s", got)
	}
	// Kept: a later replay shows the same, without the claim's age.
	if got := seen(); !strings.Contains(got, `"interrupted"`) {
		t.Fatalf("the replay after: %s", got)
	}
}
