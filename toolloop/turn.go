package toolloop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// session is the loop state of one client request, shared by the streaming
// and the blocking loop. Used by one goroutine at a time.
type session struct {
	l     *Loop
	req   *pipeline.Request
	p     *plan
	start time.Time

	history      []byte                 // messages appended by the loop, each preceded by ','
	shown        []byte                 // blocking loop: the text of the rounds before the current one, as a stream shows it
	shownSide    [len(sideTexts)][]byte // blocking loop: the same for refusal and reasoning texts
	shownLP      wire.Logprobs          // blocking loop: the logprobs of the rounds before the current one whose text is shown
	textsAt      *pipeline.TextsAt      // blocking loop: the answer's texts through the current round (ServerCall.At)
	afterClient  bool                   // blocking loop: the current round also hands client calls back (ServerCall.AfterClientCalls)
	iterations   int                    // model calls made
	consecErrors int
	final        bool   // the last model call was the forced final one (tool_choice none)
	stop         string // why the loop ended
	usage        usage
	traceOn      bool
	trace        trace

	id      string // the first round's id and created, shown on every chunk
	created int64
	// The first round's system_fingerprint and service_tier ("" when it
	// had none): a stream shows them on every chunk, and so the JSON
	// answer of several rounds has them too.
	fingerprint, tier string

	// Context editing's prompt hint (pipeline.PromptHint): the
	// upstream's prompt_tokens for an earlier round and how many messages
	// that round's request held, so later rounds count only what was added.
	msgs       int // messages of the transcript: the client's and those appended
	clientMsgs int // the client's messages (pipeline.MessageMap.Client)
	sent       int // messages in the request of the current round
	hintTokens int
	hintMsgs   int

	elog pipeline.EditLog // this request's context edits, on every round; nil = none

	msgsEnd   int  // offset of the ']' that closes p.body's messages; 0 = not found yet (withHistory)
	msgsEmpty bool // p.body's messages array is empty

	lim   callLimits // tool and model calls used of the request's limits (limits.go)
	todos []byte     // the last list write_todos returned (todos.go); nil = none

	pending []*call // calls shown to the client for approval (approval.go)

	// thinking receives the current round's signed reasoning blocks
	// (pipeline.Thinking); appendTurn keeps them on its assistant message.
	thinking *pipeline.Thinking

	// outCap is the request's cap on output tokens, which bounds the whole
	// answer, as a provider's bounds one answer: each round after the first
	// is given what the rounds before left of it. Read when first needed
	// (capRead): an answer of one round never needs it.
	outCap  wire.OutputCap
	capRead bool
}

// outputCap returns the request's output cap.
func (s *session) outputCap() wire.OutputCap {
	if !s.capRead {
		s.outCap, s.capRead = wire.ReadOutputCap(s.p.body), true
	}
	return s.outCap
}

// outputSpent reports whether the rounds so far, by their usage, used the
// request's whole output cap. Without usage from the upstream the cap is
// each round's, as before.
func (s *session) outputSpent() bool {
	return s.usage.seen && s.outputCap().Spent(s.usage.sum.Completion)
}

func (l *Loop) newSession(req *pipeline.Request, p *plan) *session {
	s := &session{l: l, req: req, p: p, start: time.Now()}
	s.traceOn = req.Hints.ToolTrace || req.Tenant.TracesTools()
	view(p.messages).ForEach(func(_, _ gjson.Result) bool { s.msgs++; return true })
	s.clientMsgs = s.msgs - p.prepended - int(req.Messages.Prepended)
	return s
}

// noteUsage keeps the round's prompt_tokens for the next rounds' context
// editing. A round without usage leaves an older hint, which only overcounts.
func (s *session) noteUsage(n int64) {
	if n > 0 && s.sent > 0 {
		s.hintTokens, s.hintMsgs = int(n), s.sent
	}
}

// nextRequest builds the next model call: the injected body with the
// history appended, and tool_choice "none" when the call is the final one,
// unless the client's own tools meet its required choice: "none" would
// break the choice for certain, so the final call keeps it and offers the
// client's tools alone (plan.finalTools): a server call it made would be
// dropped, as in any final round, and leave the choice unmet.
func (s *session) nextRequest() (*pipeline.Request, error) {
	body := s.p.body
	if len(s.history) > 0 {
		body = s.withHistory()
		if body == nil {
			return nil, pipeline.Errorf(http.StatusInternalServerError, pipeline.TypeServer, "", "the tool loop could not extend messages")
		}
	}
	if s.iterations > 0 {
		var err error
		if body, err = s.outputCap().Left(body, s.usage.sum.Completion); err != nil {
			return nil, pipeline.Errorf(http.StatusInternalServerError, pipeline.TypeServer, "", "the tool loop could not set the round's token cap")
		}
	}
	if s.final {
		var err error
		switch {
		case s.p.choice != choiceClientRequired:
			body, err = sjson.SetBytes(body, "tool_choice", "none")
		default:
			if body, err = sjson.SetRawBytes(body, "tools", s.p.finalTools); err == nil && s.p.finalChoice != nil {
				body, err = sjson.SetRawBytes(body, "tool_choice", s.p.finalChoice)
			}
		}
		if err != nil {
			return nil, pipeline.Errorf(http.StatusInternalServerError, pipeline.TypeServer, "", "the tool loop could not set the final round's tools")
		}
	}
	r := s.req.Clone()
	r.Body = body
	r.FinalRound = s.final && s.p.choice != choiceClientRequired
	r.Round = s.iterations
	s.thinking = &pipeline.Thinking{Max: s.l.roundMax} // kept for the next round, as the round's text is
	r.Thinking = s.thinking
	// An upstream error naming a message names the client's (pipeline.MessageMap).
	r.Messages.Prepend(s.p.prepended)
	if len(s.history) > 0 {
		r.Messages.Append(s.clientMsgs)
	}
	// The loop takes tool-call deltas, finish and usage chunks without
	// writing anything: the client's writer must not hold what it has for
	// an upstream event that may come to nothing (pipeline.Lookahead).
	r.Lookahead = nil
	// Only the rounds carry the edit log and the hint: a tool's own model
	// call (an agent tool) is another conversation.
	r.EditLog, r.PromptHint = s.elog, pipeline.PromptHint{}
	if s.hintTokens > 0 && s.hintMsgs > 0 {
		r.PromptHint = pipeline.PromptHint{Tokens: s.hintTokens, Messages: s.hintMsgs}
	}
	if s.iterations > 0 {
		// A later round reports into its own Meta (see noteRound): the
		// client's x-gateway-attempts and x-gateway-model describe the first
		// model call, the only one a stream's headers can describe.
		r.Meta = &pipeline.Meta{}
	}
	if s.iterations == 0 && s.lim.model.used.Load() == 0 {
		// The request layer admitted it: ModelCallLimit does not admit it
		// again, unless a model call was made for the request before it
		// (a tool selector's), which may have spent the budget.
		s.lim.model.first.Store(r)
	}
	s.iterations++
	s.sent = s.msgs
	s.lim.model.round.Store(r)
	return r, nil
}

// withHistory returns a new body: the plan's body with the history appended
// to its messages array, built in one copy (the array's place in the body is
// found once per request), or nil when the body has no messages array.
func (s *session) withHistory() []byte {
	body := s.p.body
	if s.msgsEnd == 0 {
		m := gjson.GetBytes(body, "messages")
		if !m.IsArray() || m.Index <= 0 {
			return nil
		}
		raw := strings.TrimRight(m.Raw, " \t\r\n")
		s.msgsEnd = m.Index + len(raw) - 1 // at ']'
		s.msgsEmpty = strings.TrimSpace(raw[1:len(raw)-1]) == ""
	}
	h := s.history
	if s.msgsEmpty {
		h = h[1:] // no leading comma after '['
	}
	out := make([]byte, 0, len(body)+len(h))
	out = append(out, body[:s.msgsEnd]...)
	out = append(out, h...)
	return append(out, body[s.msgsEnd:]...)
}

// noteRound runs after a round's model call answered (r is the request
// nextRequest built for it): it records the round's model and upstream
// attempts for the trace, notes the model that answered a later round in
// the client's Meta (not as a header), and passes a later round's other
// response headers (context edits) on to it.
func (s *session) noteRound(r *pipeline.Request) {
	if s.traceOn {
		rt := roundTrace{model: r.Meta.Get(fallback.HeaderModel), attempts: -1, meta: r.Meta}
		if n, err := strconv.Atoi(r.Meta.Get(fallback.HeaderAttempts)); err == nil {
			rt.attempts = n
		}
		s.trace.rounds = append(s.trace.rounds, rt)
	}
	if r.Meta == s.req.Meta || s.req.Meta == nil {
		return
	}
	// The model that answered this round, for the response cache's
	// fallback check (pipeline.Meta.NoteAnswered): the client's
	// x-gateway-model keeps describing the first call.
	s.req.Meta.NoteAnswered(r.Meta.Get(fallback.HeaderModel))
	for _, h := range r.Meta.Headers() {
		if h.Key != fallback.HeaderAttempts && h.Key != fallback.HeaderModel {
			s.req.Meta.Set(h.Key, h.Value)
		}
	}
}

// checkBudget runs before every model call after the first: when a budget
// is spent, the call becomes the final one (tool_choice "none").
func (s *session) checkBudget() {
	cfg := &s.l.cfg
	reason := s.limitReason()
	switch {
	case s.iterations+1 >= cfg.MaxIterations:
		reason = "max_iterations"
	case reason != "":
	case time.Since(s.start) >= cfg.WallTime.D():
		reason = "wall_time"
	case s.consecErrors >= cfg.MaxConsecutiveErrors:
		reason = "max_consecutive_errors"
	}
	if reason == "" {
		return
	}
	s.final, s.stop = true, reason
	s.l.log.Info().Str("request_id", s.req.ID).Str("reason", reason).Int("iterations", s.iterations).
		Int("consecutive_errors", s.consecErrors).Int("tool_calls", s.lim.toolCalls).Int64("model_calls", s.lim.model.used.Load()).Msg("tool loop budget reached: the next model call is final")
}

// gatewayIDs reports whether the calls of this request get ids of the
// gateway's own (call.assignID): when server tools are in play.
func (s *session) gatewayIDs() bool { return len(s.p.set.tools) > 0 }

// ensureIDs gives every call an id (the history needs one per call, and a
// client's tool message must name it); it reports whether it made one.
func ensureIDs(calls []*call) (made bool) {
	for _, c := range calls {
		if c.id == "" {
			c.id, made = newCallID(), true
		}
	}
	return made
}

// split classifies calls; it returns the server and the client calls.
func (s *session) split(calls []*call) (server, client []*call) {
	for _, c := range calls {
		s.classify(c)
		if c.kind == kindClient {
			client = append(client, c)
		} else {
			server = append(server, c)
		}
	}
	return server, client
}

func (s *session) classify(c *call) {
	if c.kind != kindUnknown {
		return
	}
	switch {
	case s.p.isClient(c.name):
		c.kind = kindClient
	case len(s.p.set.tools) == 0:
		// No server tool is offered (the loop only normalizes the client's
		// calls): a call of a name the client did not offer is the
		// client's too, as the provider would have handed it over.
		c.kind = kindClient
	case s.gate(c): // a gated server tool: shown to the client for approval
	default:
		c.kind = kindServer // unknown names go to the tool chain: an error result the model can act on
		if t := s.l.resolve(s.p.set.tools, c.name); t != nil {
			// A near miss runs as its tool, under its tool's name: the
			// history, a mixed turn's hidden round, the trace and the
			// Responses items all name the tool that ran (gate does the
			// same for a gated one).
			c.name = t.cfg.Name
		} else if n := s.p.clientNear(c.name); n != "" {
			// A slip of the client's own tool's name (Get_Weather): the
			// client's call, under the name its code dispatches on, not
			// an unknown server tool whose error tells the model its
			// real tool does not exist.
			c.kind, c.name = kindClient, n
		}
	}
}

// runCalls runs the server calls of one turn through the tool chain,
// concurrently when tool_loop.parallel is set; results are in call order.
// It fails only when ctx ends.
func (s *session) runCalls(ctx context.Context, calls []*call) ([]*pipeline.ToolResult, error) {
	tctx := withToolSet(ctx, s.p.set)
	var wall context.Context // ends when the loop's wall time runs out; nil without one
	if wt := s.l.cfg.WallTime.D(); wt > 0 {
		// The loop's wall time bounds the calls running when it ends, not
		// only the rounds after them: a tool that outlasts it is stopped,
		// a call not started yet is not run, and the final model call
		// follows.
		var cancel context.CancelFunc
		tctx, cancel = context.WithDeadline(tctx, s.start.Add(wt))
		defer cancel()
		wall = tctx
	}
	results := make([]*pipeline.ToolResult, len(calls))
	tcs := make([]pipeline.ToolCall, len(calls))
	for i, c := range calls {
		tcs[i] = pipeline.ToolCall{ID: c.id, Name: c.name, Arguments: c.args, Request: s.req}
	}
	s.admit(tcs, results) // a call a limit refused has its result already, which stands
	run := func(i int) {
		if results[i] == nil && wall != nil && wall.Err() != nil {
			results[i] = s.wallResult(&tcs[i], "it was not run")
			return
		}
		refused := results[i] != nil
		start := time.Now()
		s.l.runCall(tctx, &tcs[i], &results[i])
		if r := results[i]; !refused && wall != nil && wall.Err() != nil && (r == nil || r.IsError) {
			// Ended by the wall time as it returned (a result that came
			// before, an error included, is the tool's own).
			results[i] = s.wallResult(&tcs[i], "it was stopped")
			results[i].Stop = r != nil && r.Stop
			results[i].Duration = time.Since(start) // how long it ran before it was stopped (the trace)
		}
	}
	if *s.l.cfg.Parallel && len(calls) > 1 {
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() { run(i) })
		}
		wg.Wait()
	} else {
		for i := range calls {
			if ctx.Err() != nil {
				break
			}
			run(i)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, nil
}

// wallResult is the result of call c when the loop's wall time ran out
// before it ran or while it ran (what says which).
func (s *session) wallResult(c *pipeline.ToolCall, what string) *pipeline.ToolResult {
	return s.l.errResult(c, &ToolError{Kind: "wall_time",
		Message: fmt.Sprintf("the tool loop's wall time (%s) ran out; %s", s.l.cfg.WallTime.D(), what)})
}

// runCall runs c through the tool chain into *res, unless a limit already
// refused it (*res set).
func (l *Loop) runCall(ctx context.Context, c *pipeline.ToolCall, res **pipeline.ToolResult) {
	if *res != nil {
		if l.opts.Outer != nil {
			// Refused by a limit before the chain: the outermost layer
			// (the trace's execute_tool span) sees it all the same.
			r := *res
			_, _ = l.opts.Outer(pipeline.ToolHandlerFunc(func(context.Context, *pipeline.ToolCall) (*pipeline.ToolResult, error) {
				return r, nil
			})).CallTool(ctx, c)
		}
		return
	}
	defer func() {
		if p := recover(); p != nil {
			// A bug in a tool or the tool chain: the call fails, as a
			// tool's error does. Parallel calls run on goroutines of their
			// own, where a panic no request's recovery catches would end
			// the process.
			l.logPanic(p, c.Request, "tool "+c.Name)
			*res = l.errResult(c, errToolPanicked)
		}
	}()
	r, err := l.chain.CallTool(ctx, c)
	if err != nil || r == nil {
		if err == nil {
			err = errNoResult
		}
		r = l.errResult(c, err)
	}
	*res = r
}

var (
	errNoResult     = &ToolError{Kind: "tool_error", Message: "the tool returned no result"}
	errToolPanicked = &ToolError{Kind: "tool_error", Message: "the tool failed"}
)

// logPanic logs a panic recovered on the loop's behalf, with its stack, and
// counts it with the server's (gateway_panics_total).
func (l *Loop) logPanic(p any, r *pipeline.Request, what string) {
	id := ""
	if r != nil {
		id = r.ID
	}
	observe.Panics.Inc()
	l.log.Error().Str("request_id", id).Str("panic", fmt.Sprint(p)).Bytes("stack", debug.Stack()).Msg(what + " panicked")
}

// record notes results in the trace and the error budget; it reports
// whether a result asks to stop the loop.
func (s *session) record(calls []*call, results []*pipeline.ToolResult) (stop bool) {
	for i, r := range results {
		if r.IsError {
			s.consecErrors++
		} else {
			s.consecErrors = 0
		}
		stop = stop || r.Stop
		s.noteTodos(r)
		if s.req.OnServerCall != nil {
			s.reportCall(calls[i], r)
		}
		if s.traceOn {
			status := "ok"
			if r.IsError {
				status = "error"
			}
			s.trace.calls = append(s.trace.calls, traceCall{name: calls[i].name, args: shownArgs(calls[i].args), status: status, duration: r.Duration})
		}
	}
	return stop
}

// shownArgs returns a server call's arguments as a client may see them
// (the trace, a Responses mcp_call item): the configured secrets masked,
// however escaped, as in the call's result. A model that learned a key
// could otherwise write it where the client reads it.
func shownArgs(args []byte) []byte { return observe.Secrets.RedactEscaped(args) }

// reportCall tells the request's OnServerCall of a server call that ran.
func (s *session) reportCall(c *call, r *pipeline.ToolResult) {
	// A name no offered tool answers to (an unknown tool) lives nowhere:
	// "gateway", whose error result it got, as an approval's label is.
	src, repeatable := "gateway", false
	t := s.p.set.get(c.name)
	if t == nil && r.Name != "" {
		t = s.p.set.get(r.Name) // a near miss, run under the tool's own name
	}
	if t != nil {
		src = t.cfg.Kind
		if t.cfg.Server != "" {
			src = t.cfg.Server
		}
		repeatable = t.cfg.Idempotent || t.cfg.Repeatable
	}
	sc := &pipeline.ServerCall{Name: c.name, Source: src, Arguments: shownArgs(c.args), Output: r.Content, IsError: r.IsError, At: s.textsAt,
		AfterClientCalls: s.afterClient, Repeatable: repeatable}
	if strings.HasPrefix(c.id, approvalPrefix) {
		sc.ApprovalID = c.id
	}
	s.req.OnServerCall(sc)
}

// appendTurn adds the assistant message (its text, every call of the turn
// and the round's signed reasoning blocks) and the tool results, in call
// order, to the history.
func (s *session) appendTurn(text []byte, calls []*call, results []*pipeline.ToolResult) {
	s.history = append(s.history, ',')
	var thinking []byte
	if s.thinking != nil {
		thinking = s.thinking.Blocks
	}
	s.history = appendAssistant(s.history, text, calls, thinking)
	for i, r := range results {
		s.history = append(s.history, ',')
		s.history = appendToolMessage(s.history, calls[i].id, r.Content)
	}
	s.msgs += 1 + len(results)
}

// appendAssistant appends an assistant message. thinking, when set, is a
// JSON array of the provider's signed reasoning blocks (pipeline.Thinking),
// kept in the gateway's own member for the next round's request only.
func appendAssistant(dst, text []byte, calls []*call, thinking []byte) []byte {
	dst = append(dst, `{"role":"assistant","content":`...)
	if len(text) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, text)
	}
	if len(calls) > 0 {
		dst = append(dst, `,"tool_calls":`...)
		dst = appendToolCalls(dst, calls, false)
	}
	if len(thinking) > 0 {
		dst = append(dst, `,"`+pipeline.ThinkingMember+`":`...)
		dst = append(dst, thinking...)
	}
	return append(dst, '}')
}

func appendToolMessage(dst []byte, id string, content []byte) []byte {
	dst = append(dst, `{"role":"tool","tool_call_id":`...)
	dst = appendJSONString(dst, []byte(id))
	dst = append(dst, `,"content":`...)
	dst = appendJSONString(dst, content)
	return append(dst, '}')
}

// saveHidden keeps the hidden part of a round that hands client calls out,
// when a StateStore is set: the earlier server-only rounds, and this
// round's server calls with their results (a mixed turn). A round without
// server calls hides nothing when no server round came before it. One
// after server rounds is kept for a Responses client too, which was shown
// them as mcp_call items: @openai/agents replays them without their
// output, and with store false nothing else holds it (a follow-up that
// carries them is not spliced again: resume).
func (s *session) saveHidden(ctx context.Context, text []byte, calls, client []*call, server []*call, results []*pipeline.ToolResult) {
	if s.l.opts.State == nil || len(client) == 0 {
		return
	}
	if len(server) == 0 && len(s.history) <= 1 {
		return
	}
	t := &HiddenTurn{Assistant: appendAssistant(nil, text, calls, nil), Saved: time.Now()}
	if len(s.history) > 1 {
		t.Prior = append([]byte(nil), s.history[1:]...) // history starts with ','
	}
	for i, r := range results {
		t.ToolResults = append(t.ToolResults, appendToolMessage(nil, server[i].id, r.Content))
	}
	for _, c := range client {
		t.ClientIDs = append(t.ClientIDs, c.id)
	}
	if err := s.l.opts.State.Save(ctx, StateKey(s.req.Tenant, client[0].id), t); err != nil {
		metricState.WithLabelValues("save_error").Inc()
		s.l.log.Warn().Err(err).Str("request_id", s.req.ID).Msg("tool loop: saving a mixed turn failed; its follow-up will lack the hidden server calls")
		return
	}
	metricState.WithLabelValues("save").Inc()
}

// resultsText joins the plain text of results (the tool_choice rule and a
// stop result make it the assistant's answer).
func resultsText(results []*pipeline.ToolResult) []byte {
	var b strings.Builder
	for i, r := range results {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(resultText(r.Content))
	}
	return []byte(b.String())
}

// isEcho reports whether text only repeats the arguments JSON of a call.
func isEcho(text []byte, calls []*call) bool {
	t := bytes.TrimSpace(text)
	if len(t) == 0 || t[0] != '{' || len(calls) == 0 {
		return false
	}
	var ct bytes.Buffer
	if json.Compact(&ct, t) != nil {
		return false
	}
	var ca bytes.Buffer
	for _, c := range calls {
		ca.Reset()
		if json.Compact(&ca, bytes.TrimSpace(c.args)) == nil && bytes.Equal(ct.Bytes(), ca.Bytes()) {
			return true
		}
	}
	return false
}

// end records the loop's end in metrics.
func (s *session) end(reason string) {
	if reason == "client_tool_calls" && len(s.pending) > 0 {
		reason = "approval"
	}
	if s.stop == "" {
		s.stop = reason
	}
	metricIterations.Observe(float64(s.iterations))
	metricLoopEnd.WithLabelValues(s.stop).Inc()
}

// traceJSON returns the x_gateway object, or nil when tracing is off and
// write_todos wrote no list.
func (s *session) traceJSON() []byte {
	if !s.traceOn {
		return s.appendApprovals(s.appendTodos(nil))
	}
	var cleared, saved, dropped int
	if s.elog != nil {
		cleared, saved, dropped = s.elog.Stats()
	}
	return s.appendApprovals(s.appendTodos(s.p.sel.appendJSON(s.trace.appendJSON(nil, s.iterations, s.stop, cleared, saved, dropped))))
}

func jsonCompact(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }
