package toolloop

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/pipeline"
)

// Human approval of server tools (docs/architecture.md §3, "Approval").
//
// A call of a gated tool is not run: the loop shows it to the client as an
// ordinary client call whose id the gateway minted (approvalPrefix, a
// nonce, and a keyed tag over the tenant and the nonce), ends the response
// with finish_reason "tool_calls", and keeps the call as the model made it
// in the state store. The client answers with a tool message for that id;
// settle turns the answer into the tool's result before the loop runs.

// approvalPrefix starts every id of a call awaiting approval.
const approvalPrefix = pipeline.ApprovalIDPrefix

// HeaderApproval is set to "pending" on a JSON response that ends with
// calls awaiting approval.
const HeaderApproval = "x-gateway-approval"

// maxSettle bounds the approval answers looked up per request (the most
// recent ones): one batched store call, whatever the history's length.
const maxSettle = 64

// needsApproval reports whether a call of t by req's tenant waits for a
// person's decision: the tenant's approval_tools when its policy sets them,
// else the tool's own approval setting. Allocation-free.
func needsApproval(req *pipeline.Request, t *tool) bool {
	if required, set := req.Tenant.ApprovalRequired(t.cfg.Name); set {
		return required
	}
	return t.cfg.Approval == "always"
}

// approvalKey keys the tag of approval ids. Immutable.
type approvalKey []byte

// newApprovalKey returns the configured secret's key, else generated
// (Options.ApprovalKey), else a random one.
func newApprovalKey(secret string, generated []byte) approvalKey {
	if secret != "" {
		return approvalKey(secret)
	}
	if len(generated) > 0 {
		return approvalKey(generated)
	}
	return NewApprovalKey()
}

// NewApprovalKey returns a random key for approval ids (Options.ApprovalKey).
func NewApprovalKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// mint returns a new approval id for tenant t.
func (k approvalKey) mint(t *pipeline.Tenant) string {
	nonce := rand.Text()
	return approvalPrefix + nonce + "_" + k.tag(t, nonce)
}

func (k approvalKey) tag(t *pipeline.Tenant, nonce string) string {
	return tenantHash(hmac.New(sha256.New, k), t, nonce, 10)
}

// verify reports whether id was minted with this key for tenant t.
func (k approvalKey) verify(t *pipeline.Tenant, id string) bool {
	rest, ok := strings.CutPrefix(id, approvalPrefix)
	if !ok {
		return false
	}
	nonce, tag, ok := strings.Cut(rest, "_")
	return ok && hmac.Equal([]byte(tag), []byte(k.tag(t, nonce)))
}

// approvalStateKey is the store key of the call with approval id, for t.
func approvalStateKey(t *pipeline.Tenant, id string) string {
	return StateKey(t, "approval:"+id)
}

// gate shows c to the client for approval when it calls a gated tool (as
// the tool chain resolves the name): c becomes a client call with an
// approval id. It reports whether it did.
func (s *session) gate(c *call) bool {
	t := s.l.resolve(s.p.set.tools, c.name)
	if t == nil || !needsApproval(s.req, t) {
		return false
	}
	// The person approves the tool that will run: a near miss is shown
	// (and kept) under its tool's name, not the one the model wrote.
	c.name = t.cfg.Name
	c.kind, c.id = kindClient, s.l.approval.mint(s.req.Tenant)
	s.pending = append(s.pending, c)
	return true
}

// awaitApproval runs when a response ends: it keeps every call the round
// showed for approval, as the model made it, and marks a JSON response
// pending. A stream's headers left with its first model call; its last
// chunk's x_gateway lists the calls instead. A call it cannot keep (the
// state store failed: Redis down) fails the response, 503: a pause whose
// decision would find nothing is no pause to hand a person.
func (s *session) awaitApproval(ctx context.Context) error {
	if len(s.pending) == 0 {
		return nil
	}
	st := s.l.opts.State
	if st == nil {
		s.markPending()
		return nil // nothing kept: the answer will find no state and the tool will not run
	}
	now := time.Now()
	for _, c := range s.pending {
		t := &HiddenTurn{Assistant: appendAssistant(nil, nil, []*call{c}, nil), ClientIDs: []string{c.id}, Saved: now}
		if err := st.Save(ctx, approvalStateKey(s.req.Tenant, c.id), t); err != nil {
			metricApproval.WithLabelValues("save_error").Inc()
			s.l.log.Warn().Err(err).Str("request_id", s.req.ID).Str("tool", c.name).Msg("tool loop: saving a call awaiting approval failed; the response fails")
			return pipeline.Unavailable(pipeline.CodeApprovalUnavailable, time.Second, err,
				"the call awaiting approval could not be kept; retry the request")
		}
		metricApproval.WithLabelValues("pending").Inc()
	}
	s.markPending()
	return nil
}

// markPending sets the JSON answer's approval header: only once the
// answer hands calls over (their save failed: an error, which has none).
func (s *session) markPending() {
	if s.req.Meta != nil && !s.req.Stream {
		s.req.Meta.Set(HeaderApproval, "pending")
	}
}

// appendApprovals adds "awaiting_approval" (id, name and arguments of each
// call the response hands over for approval) to the x_gateway object tr,
// like appendTodos.
func (s *session) appendApprovals(tr []byte) []byte {
	if len(s.pending) == 0 {
		return tr
	}
	tr = appendTraceMember(tr, `"awaiting_approval":[`)
	for i, c := range s.pending {
		if i > 0 {
			tr = append(tr, ',')
		}
		tr = append(tr, `{"id":`...)
		tr = appendJSONString(tr, []byte(c.id))
		tr = appendCallOf(append(tr, ','), c.name, c.args)
		tr = append(tr, '}')
	}
	return append(tr, "]}"...)
}

// settledRuns are the gated calls settle ran, for the session's trace and
// limits.
type settledRuns struct {
	calls   []*call
	results []*pipeline.ToolResult
}

// noteSettled counts the calls settle ran as the request's own.
func (s *session) noteSettled(r *settledRuns) {
	if r == nil || len(r.calls) == 0 {
		return
	}
	s.record(r.calls, r.results)
	s.lim.toolCalls += len(r.calls)
}

// hasApprovals reports whether body may answer calls awaiting approval.
func hasApprovals(body []byte) bool {
	return bytes.Contains(body, []byte(approvalPrefix))
}

// settle replaces the content of every tool message that answers a call
// awaiting approval with the tool's result: the decision's (approve: the
// call as the model made it; edit: with the person's arguments, which the
// tool chain validates), an error result (reject, an invalid decision, an
// expired call, an id not minted for this tenant), or the person's own
// answer. A decided call's result is kept with the call, so a later request
// replaying the same history gets the same result and runs nothing again.
// The raw decision never reaches the model. tools is the request's offered
// set. It fails only when ctx ends; req is not modified.
func (l *Loop) settle(ctx context.Context, req *pipeline.Request, tools []*tool) (*pipeline.Request, *settledRuns, error) {
	req = dropUnanswered(req)
	msgs := gjson.GetBytes(req.Body, "messages")
	if !msgs.IsArray() {
		return req, nil, nil
	}
	type answer struct {
		pos int
		id  string
	}
	var (
		items   []gjson.Result
		answers []answer
		twice   bool // an approval answered by two tool messages: the later ones are dropped
		seen    = map[string]bool{}
	)
	msgs.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "tool" {
			if id := m.Get("tool_call_id").Str; strings.HasPrefix(id, approvalPrefix) {
				if seen[id] {
					// A second answer to one call (the same decision sent
					// twice) settles nothing more, and an upstream refuses
					// a tool message its call does not expect.
					twice = true
					return true
				}
				seen[id] = true
				answers = append(answers, answer{pos: len(items), id: id})
			}
		}
		items = append(items, m)
		return true
	})
	if len(answers) == 0 {
		return req, nil, nil
	}
	lookups := answers
	if len(lookups) > maxSettle {
		lookups = lookups[len(lookups)-maxSettle:]
	}
	recs := make([]*HiddenTurn, len(answers))
	if st := l.opts.State; st != nil {
		keys := make([]string, len(lookups))
		for i, a := range lookups {
			keys[i] = approvalStateKey(req.Tenant, a.id)
		}
		got, err := st.Load(ctx, keys)
		if err == nil && len(got) == len(keys) {
			copy(recs[len(answers)-len(lookups):], got)
		} else {
			metricApproval.WithLabelValues("load_error").Inc()
			for _, a := range lookups {
				if !settledResult(messageText(items[a.pos].Get("content"))) {
					// A decision that needs the state: told "not run" now,
					// it would run on a later replay of the same history,
					// once the store answers. The request fails instead.
					l.log.Warn().Err(err).Str("request_id", req.ID).Msg("tool loop: approval state unavailable; the request fails")
					return nil, nil, errApprovalUnreadable(err)
				}
			}
		}
	}
	contents := make(map[int][]byte, len(answers))
	runs := &settledRuns{}
	for i, a := range answers {
		m := items[a.pos]
		content, ran, err := l.settleOne(ctx, req, tools, recs[i], a.id, messageText(m.Get("content")))
		if err != nil {
			return nil, nil, err
		}
		if ran != nil {
			runs.calls = append(runs.calls, ran.c)
			runs.results = append(runs.results, ran.res)
		}
		if req.OnSettled != nil && !transient(content) {
			req.OnSettled(a.id, content)
		}
		contents[a.pos] = content
	}
	out := make([]byte, 0, len(msgs.Raw)+256*len(answers))
	out = append(out, '[')
	for i, m := range items {
		if i > 0 {
			out = append(out, ',')
		}
		content, ok := contents[i]
		if !ok {
			out = append(out, m.Raw...)
			continue
		}
		msg, err := sjson.SetBytes([]byte(m.Raw), "content", string(content))
		if err != nil { // not an object: cannot be, the role was read from it
			msg = appendToolMessage(nil, m.Get("tool_call_id").Str, content)
		}
		out = append(out, msg...)
	}
	out = append(out, ']')
	body, err := sjson.SetRawBytes(req.Body, "messages", out)
	if err != nil {
		return nil, nil, pipeline.Errorf(500, pipeline.TypeServer, "", "the tool loop could not rewrite messages")
	}
	r := req.Clone()
	r.Body = body
	if twice {
		r.Messages.Rewrite() // messages were dropped: an index no longer names the client's
	}
	return r, runs, nil
}

// settledRun is a gated call settle ran, and its result.
type settledRun struct {
	c   *call
	res *pipeline.ToolResult
}

// transient reports whether content is an outcome a later request may not
// meet (the call claimed by another request, the state unreadable or gone):
// a stored history does not keep it in the decision's place.
func transient(content []byte) bool {
	switch gjson.GetBytes(content, "error.type").Str {
	case "approval_in_progress", "approval_expired":
		return true
	}
	return false
}

// settledResult reports whether text is a tool result in the gateway's own
// form ({"status":"ok",...} or {"status":"error",...}), not a decision.
func settledResult(text string) bool {
	if !strings.HasPrefix(strings.TrimSpace(text), "{") {
		return false
	}
	s := gjson.Get(text, "status")
	return s.Type == gjson.String && (s.Str == "ok" || s.Str == "error") && !gjson.Get(text, "decision").Exists()
}

// settleOne returns the content the model sees for the answer text to the
// call with approval id, whose kept state is rec (nil when none).
func (l *Loop) settleOne(ctx context.Context, req *pipeline.Request, tools []*tool, rec *HiddenTurn, id, text string) ([]byte, *settledRun, error) {
	switch {
	case rec == nil && l.approval.verify(req.Tenant, id) && settledResult(text):
		// A result the gateway wrote in the decision's place (a stored
		// Responses history keeps the run's): the history is whole
		// without the kept state, which expires first. Nothing runs.
		return []byte(text), nil, nil
	case rec == nil && l.approval.verify(req.Tenant, id):
		metricApproval.WithLabelValues("expired").Inc()
		return errContent(&ToolError{Kind: "approval_expired", Message: "the approval of this call expired (or its state is unavailable) before a decision could be applied; the tool was not run"}, false), nil, nil
	case rec == nil:
		metricApproval.WithLabelValues("refused").Inc()
		return errContent(&ToolError{Kind: "approval_invalid", Message: "this call was not handed out for approval to this caller; the tool was not run"}, false), nil, nil
	case len(rec.ToolResults) > 0: // decided by an earlier request
		return decidedContent(rec), nil, nil
	}
	if cl, ok := l.opts.State.(StateClaimer); ok {
		// One decision runs the call once: a request that carries the
		// answer twice, or requests racing with it, find it claimed.
		won, err := cl.Claim(ctx, approvalClaimKey(req.Tenant, id))
		if err != nil {
			metricApproval.WithLabelValues("load_error").Inc()
			l.log.Warn().Err(err).Str("request_id", req.ID).Msg("tool loop: claiming a decided call failed; the request fails")
			return nil, nil, errApprovalUnreadable(err)
		}
		if !won {
			content, stale := l.claimedElsewhere(ctx, req, tools, rec, id)
			if stale {
				l.keepDecided(ctx, req, rec, id, content) // what every later replay shows
			}
			return content, nil, nil
		}
	}
	tc := gjson.GetManyBytes(rec.Assistant, "tool_calls.0.function.name", "tool_calls.0.function.arguments")
	c := &call{id: id, name: tc[0].String(), args: []byte(tc[1].String()), kind: kindServer}
	d := parseVerdict(text)
	metricApproval.WithLabelValues(d.kind.String()).Inc()
	var (
		content []byte
		ran     *settledRun
	)
	switch d.kind {
	case decApprove, decEdit:
		if d.kind == decEdit {
			c.args = d.args
		}
		var res *pipeline.ToolResult
		l.runCall(withToolSet(ctx, &toolSet{tools: tools}), &pipeline.ToolCall{ID: id, Name: c.name, Arguments: c.args, Request: req}, &res)
		if err := ctx.Err(); err != nil {
			// The request ended (its client left) while the approved call
			// ran: it may have partly run, and it is not run again. That
			// is what a replay shows, not a claim in progress or an
			// expired approval: the decision was applied. (A call that
			// finished as the request ended keeps its own result.)
			kept := errContent(&ToolError{Kind: "interrupted",
				Message: "the approved call was interrupted when its request ended (the client left); it may have partly run, and it was not run again"}, false)
			if res != nil && !res.IsError {
				kept = res.Content
			}
			l.keepDecided(context.WithoutCancel(ctx), req, rec, id, kept)
			return nil, nil, err
		}
		content = res.Content
		if d.kind == decEdit {
			// The history still shows the model's arguments: say which ran.
			content, _ = sjson.SetRawBytes(content, "arguments_edited_by_user", c.args)
		}
		ran = &settledRun{c: c, res: res}
	case decReject:
		msg := "the user rejected this call; the tool was not run"
		if d.message != "" {
			msg += ". The user said: " + d.message
		}
		content = errContent(&ToolError{Kind: "rejected", Message: msg}, false)
	case decInvalid:
		content = errContent(&ToolError{Kind: d.errKind, Message: d.message}, false)
	default:
		content = answerContent(text)
	}
	l.keepDecided(ctx, req, rec, id, content)
	return content, ran, nil
}

// keepDecided keeps content as the result of the call with approval id,
// whose kept state is rec, for the replays of its history.
func (l *Loop) keepDecided(ctx context.Context, req *pipeline.Request, rec *HiddenTurn, id string, content []byte) {
	st := l.opts.State
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, keepDecidedTimeout)
	defer cancel()
	kept := &HiddenTurn{Assistant: rec.Assistant, ClientIDs: rec.ClientIDs, Saved: time.Now(),
		ToolResults: [][]byte{appendToolMessage(nil, id, content)}}
	if err := st.Save(ctx, approvalStateKey(req.Tenant, id), kept); err != nil {
		l.log.Warn().Err(err).Str("request_id", req.ID).Msg("tool loop: keeping a decided call's result failed; a replay of this history will find it expired")
	}
}

// keepDecidedTimeout bounds the save of a decided call's result, which
// may run after its request ended (an interrupted run).
const keepDecidedTimeout = 5 * time.Second

// errApprovalUnreadable fails a request whose decision cannot be applied
// while the state store fails: 503 approval_unavailable, to be retried.
func errApprovalUnreadable(err error) error {
	return pipeline.Unavailable(pipeline.CodeApprovalUnavailable, time.Second, err,
		"the decision on a call awaiting approval cannot be applied right now; retry the request")
}

// approvalClaimKey is the store key that claims the call with approval id
// for the one request that applies its decision (StateClaimer).
func approvalClaimKey(t *pipeline.Tenant, id string) string {
	return StateKey(t, "approval-claim:"+id)
}

// decidedContent is the result a decided call keeps.
func decidedContent(rec *HiddenTurn) []byte {
	return []byte(gjson.GetBytes(rec.ToolResults[0], "content").String())
}

// claimedElsewhere is the content of an answer to a call whose decision
// another request claimed: that request's result once kept, else an error
// result: in progress while the call may still be running, interrupted
// (stale) once its claim is older than the call could run (the tool's
// timeout, and claimSlack), which a request that stopped (its replica
// crashed) leaves behind. The tool does not run again. rec is the call's
// kept state.
func (l *Loop) claimedElsewhere(ctx context.Context, req *pipeline.Request, tools []*tool, rec *HiddenTurn, id string) (content []byte, stale bool) {
	metricApproval.WithLabelValues("claimed").Inc()
	if got, err := l.opts.State.Load(ctx, []string{approvalStateKey(req.Tenant, id)}); err == nil && len(got) == 1 && got[0] != nil && len(got[0].ToolResults) > 0 {
		return decidedContent(got[0]), false
	}
	if ag, ok := l.opts.State.(ClaimAger); ok {
		bound := l.cfg.ToolTimeout.D()
		name := gjson.GetBytes(rec.Assistant, "tool_calls.0.function.name").String()
		for _, t := range tools {
			if t.cfg.Name == name && t.timeout > 0 {
				bound = t.timeout
			}
		}
		if at, ok, err := ag.ClaimedAt(ctx, approvalClaimKey(req.Tenant, id)); err == nil && ok && time.Since(at) > bound+claimSlack {
			metricApproval.WithLabelValues("claim_stale").Inc()
			return errContent(&ToolError{Kind: "interrupted",
				Message: "the approved call was started by a request that never finished it (its gateway stopped while the call ran); it may have partly run, and it was not run again"}, false), true
		}
	}
	return errContent(&ToolError{Kind: "approval_in_progress", Message: "a decision on this call is being applied by another request; the tool was not run again"}, false), false
}

// claimSlack is how much longer than its tool's timeout a claimed call may
// take before its claim counts as left behind: the request's own steps
// around the run (keeping its result), on a loaded replica.
const claimSlack = 30 * time.Second

// answerContent is the result of a call the person answered in the tool's
// place: their text, as the tool's data.
func answerContent(text string) []byte {
	out := []byte(`{"status":"ok","answered_by":"user","data":`)
	out = appendJSONString(out, []byte(text))
	return append(out, '}')
}

// messageText is the text of a message's content: a string, or the text
// parts of an array joined.
func messageText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var b strings.Builder
	c.ForEach(func(_, p gjson.Result) bool {
		if p.Get("type").Str == "text" {
			b.WriteString(p.Get("text").Str)
		}
		return true
	})
	return b.String()
}

// toolName is the name of a client tool definition (function or custom).
func toolName(v gjson.Result) string {
	if n := v.Get("function.name"); n.Exists() {
		return n.String()
	}
	return v.Get("custom.name").String()
}

// withoutStandIns drops the client's definitions of gated server tools.
// A client may define a function named after a gated tool that returns the
// person's decision (the openai SDK's runTools() dispatches calls to
// functions by name); the model still sees the server tool's definition,
// and the call stays the gateway's. offered are the server tools offered
// to req (prepare): a gated tool that is not is no stand-in's.
func withoutStandIns(req *pipeline.Request, offered []*tool, clientTools gjson.Result) gjson.Result {
	out := make([]byte, 0, len(clientTools.Raw))
	out = append(out, '[')
	clientTools.ForEach(func(_, v gjson.Result) bool {
		if t := offeredTool(offered, toolName(v)); t != nil && needsApproval(req, t) {
			return true
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, v.Raw...)
		return true
	})
	return gjson.ParseBytes(append(out, ']'))
}

// dropUnanswered returns req without the calls awaiting approval that its
// history hands out but never answers: a person who moves on to the next
// message without deciding (as OpenAI lets a conversation go on past an
// unanswered mcp_approval_request) leaves an assistant call without its
// tool message, which an upstream refuses on that turn and every later
// one. Such a call was not run; it is left out of what the model reads (an
// assistant message left with neither calls nor text goes too). req itself
// when there is none.
func dropUnanswered(req *pipeline.Request) *pipeline.Request {
	msgs := gjson.GetBytes(req.Body, "messages")
	answered := map[string]bool{}
	asked := false
	msgs.ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").Str {
		case "tool":
			if id := m.Get("tool_call_id").Str; strings.HasPrefix(id, approvalPrefix) {
				answered[id] = true
			}
		case "assistant":
			m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
				asked = asked || strings.HasPrefix(c.Get("id").Str, approvalPrefix)
				return !asked
			})
		}
		return true
	})
	if !asked {
		return req
	}
	out := []byte{'['}
	changed, n := false, 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		raw := m.Raw
		if m.Get("role").Str == "assistant" {
			calls := m.Get("tool_calls")
			var kept []string
			dropped := false
			calls.ForEach(func(_, c gjson.Result) bool {
				if id := c.Get("id").Str; strings.HasPrefix(id, approvalPrefix) && !answered[id] {
					dropped = true
				} else {
					kept = append(kept, c.Raw)
				}
				return true
			})
			if dropped {
				changed = true
				text := m.Get("content")
				if len(kept) == 0 && (text.Type == gjson.Null || !text.Exists() || text.Type == gjson.String && text.Str == "") {
					return true // nothing left of it
				}
				var err error
				var b []byte
				if len(kept) == 0 {
					b, err = sjson.DeleteBytes([]byte(raw), "tool_calls")
				} else {
					b, err = sjson.SetRawBytes([]byte(raw), "tool_calls", []byte("["+strings.Join(kept, ",")+"]"))
				}
				if err != nil {
					return true
				}
				raw = string(b)
			}
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, raw...)
		return true
	})
	if !changed {
		return req
	}
	body, err := sjson.SetRawBytes(req.Body, "messages", append(out, ']'))
	if err != nil {
		return req
	}
	r := req.Clone()
	r.Body = body
	r.Messages.Rewrite() // messages were dropped: an index no longer names the client's
	return r
}
