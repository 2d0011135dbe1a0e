package toolloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// loopStream is the Stream the client reads. It is pull-based: Next drives
// the state machine (read an upstream round, run the turn's server tools,
// call the model again). Only the blocking steps (tool calls, later model
// calls) run on another goroutine, the stream's worker, which Next waits
// for while it yields keep-alives; Close cancels them and waits until the
// worker has exited, so no goroutine outlives the request.
//
// Next's result is valid until the next call to Next or Close. Next is
// called by one goroutine at a time; Close may be called from any goroutine,
// more than once.
type loopStream struct {
	roundUsage []byte // the current round's last usage object (raw JSON)
	s          *session
	ctx        context.Context
	cancel     context.CancelFunc

	mu     sync.Mutex // guards up, closed, and wg.Add against Close's Wait
	up     pipeline.Stream
	closed bool
	once   sync.Once
	wg     sync.WaitGroup
	ended  atomic.Bool // loop-end metrics recorded

	w     wire.ChatSSE
	out   []byte   // arena of queued chunks
	queue [][2]int // offsets into out
	qpos  int

	state int
	err   error
	op    chan opResult                       // result of the running blocking step
	work  chan func(context.Context) opResult // the worker's ops (startOp); nil until the first
	then  func(opResult)
	ka    *time.Timer

	// the current round
	acc        accumulator
	text       []byte        // this round's text, unescaped (for the history)
	held       []byte        // text not yet shown (argument-echo protection)
	heldLP     wire.Logprobs // the logprobs of the chunks whose text is held
	textMode   int
	finish     string
	roundEnded bool
	emitPos    int          // next call to consider for re-streaming
	zero       bool         // a chunk carried choice 0
	stray      bool         // a chunk carried choices, none at index 0 (choiceZero)
	extra      wire.Members // the round's other delta members (annotations…), sent at the end if the round is the last
	sideBytes  int          // bytes of this round's refusal and reasoning text (a JSON answer keeps them)
	top        wire.Members // the round's other top-level members (citations…), on the finish chunk if the round is the last
	shownChars int          // characters of content shown before this round (annotations count from them)

	shownTotal int // characters of content shown so far

	started bool // id/created known, role sent
	nextOut int  // next dense index for a client call
}

const (
	stRound = iota // reading the upstream round
	stWait         // a blocking step runs; yield keep-alives
	stDone
)

const (
	textUndecided = iota // only whitespace so far: held
	textLive             // forwarded as it arrives
	textHeld             // starts with '{': held until the round ends (echo check)
)

type opResult struct {
	results []*pipeline.ToolResult
	resp    *pipeline.Response
	err     error
}

// startStream makes the first model call synchronously, so that a failure
// before any byte becomes an HTTP error, and returns the loop's stream.
func (s *session) startStream(ctx context.Context) (*pipeline.Response, error) {
	lctx, cancel := context.WithCancel(ctx)
	r, err := s.nextRequest()
	if err != nil {
		cancel()
		s.end("error")
		return nil, err
	}
	resp, err := s.req.Route.ModelLayer.Chat(lctx, r)
	if err != nil {
		cancel()
		s.stop = failReason(ctx)
		s.end("")
		return nil, err
	}
	s.noteRound(r)
	st := &loopStream{s: s, ctx: lctx, cancel: cancel, up: asStream(resp), op: make(chan opResult, 1)}
	st.acc.gatewayIDs = s.gatewayIDs()
	return &pipeline.Response{Stream: st}, nil
}

// Next returns the next chunk for the client.
func (st *loopStream) Next() ([]byte, error) {
	if st.qpos >= len(st.queue) {
		st.out, st.queue, st.qpos = st.out[:0], st.queue[:0], 0
	}
	for {
		if st.qpos < len(st.queue) {
			q := st.queue[st.qpos]
			st.qpos++
			return st.out[q[0]:q[1]:q[1]], nil
		}
		if st.err != nil {
			return nil, st.err
		}
		switch st.state {
		case stRound:
			up := st.upstream()
			if up == nil {
				st.fail(context.Canceled)
				continue
			}
			ch, err := up.Next()
			if err != nil {
				if isEOF(err) {
					st.endRound()
				} else {
					st.fail(err)
				}
				continue
			}
			if len(ch) == 0 {
				continue
			}
			if ch[0] == ':' {
				return ch, nil // an upstream keep-alive comment
			}
			st.onChunk(ch)
		case stWait:
			select {
			case r := <-st.op:
				st.ka.Stop()
				then := st.then
				st.then = nil
				then(r)
			case <-st.ka.C:
				st.push(pipeline.KeepAlive)
				st.ka.Reset(st.s.l.cfg.KeepAliveInterval.D())
			case <-st.ctx.Done():
				st.fail(st.ctx.Err())
			}
		default:
			return nil, io.EOF
		}
	}
}

// Close cancels the upstream call and every running tool, and waits for the
// blocking step's goroutine to exit.
func (st *loopStream) Close() {
	st.once.Do(func() {
		st.cancel()
		st.mu.Lock()
		st.closed = true
		up := st.up
		st.up = nil
		st.mu.Unlock()
		if up != nil {
			up.Close()
		}
		st.wg.Wait()
		select {
		case r := <-st.op:
			if r.resp != nil && r.resp.Stream != nil {
				r.resp.Stream.Close()
			}
		default:
		}
		if st.ended.CompareAndSwap(false, true) {
			metricLoopEnd.WithLabelValues("canceled").Inc()
		}
	})
}

func (st *loopStream) upstream() pipeline.Stream {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.up
}

func (st *loopStream) closeUp() {
	st.mu.Lock()
	up := st.up
	st.up = nil
	st.mu.Unlock()
	if up != nil {
		up.Close()
	}
}

func (st *loopStream) fail(err error) {
	if st.err != nil {
		return
	}
	if st.ctx.Err() != nil {
		err = st.ctx.Err()
	}
	st.err, st.state = err, stDone
	st.closeUp()
	if st.ended.CompareAndSwap(false, true) {
		st.s.stop = failReason(st.ctx)
		st.s.end("")
	}
}

// push queues a chunk (copied into the arena).
func (st *loopStream) push(b []byte) {
	start := len(st.out)
	st.out = append(st.out, b...)
	st.queue = append(st.queue, [2]int{start, len(st.out)})
}

// emit queues the chunk of e, if the stream rules let it have one.
func (st *loopStream) emit(e *wire.Event) {
	start := len(st.out)
	if st.out = st.w.Encode(st.out, e); len(st.out) > start {
		st.queue = append(st.queue, [2]int{start, len(st.out)})
	}
}

// begin fixes the id/created/model of the whole response (and the
// system_fingerprint and service_tier, which the relay passes on) from the
// first upstream chunk and sends the one role delta.
func (st *loopStream) begin(id string, created int64, model, fingerprint, tier string) {
	st.started = true
	s := st.s
	if id == "" {
		id = wire.GatewayID()
	}
	if created <= 0 { // missing, or not unix seconds: the SDKs' schema wants a non-negative integer
		created = time.Now().Unix()
	}
	if s.req.Model != "" {
		model = s.req.Model
	}
	s.id, s.created = id, created
	st.w.Reset(wire.Header{ID: id, Created: created, Model: model, Fingerprint: fingerprint, ServiceTier: tier, IncludeUsage: s.req.IncludeUsage})
	st.emit(&wire.Event{Kind: wire.Role})
}

// choiceZero returns the member of a chunk's choices whose index is 0 (the
// one choice the loop follows), or the zero Result; stray reports that
// choices holds a choice object but none at index 0 (one at index 1, say:
// a choice the loop does not follow, since it runs only for n <= 1).
func choiceZero(choices gjson.Result) (choice gjson.Result, stray bool) {
	if !choices.IsArray() {
		return choice, false
	}
	choices.ForEach(func(_, c gjson.Result) bool {
		if c.Get("index").Int() == 0 {
			choice = c
			return false
		}
		stray = stray || c.IsObject()
		return true
	})
	return choice, stray && !choice.Exists()
}

// errStrayChoices is the cause of the failure of a round whose upstream
// answered with choices, none of them at index 0, and errCallOverflow of
// one whose tool call had an index past maxCallIndex, or that made more
// than maxCalls calls. Followed as if they
// were not there, either round would end as an empty answer, finish_reason
// "stop", which the client could not tell from a real one.
var (
	errStrayChoices = errors.New("toolloop: the upstream's choices have no index 0")
	errCallOverflow = errors.New("toolloop: a tool call's index is out of range, or the round made more than 128 calls")
	errNotObject    = errors.New("toolloop: an upstream chunk is not a JSON object")
	errShape        = errors.New("toolloop: the upstream's message content is not text, or its tool_calls not a list")
)

// badShape reports whether a message's (or a delta's) content or
// tool_calls has a type no answer has: content that is not a string, a
// list of parts or null, tool_calls that is not a list or null. Followed,
// such a round would drop the content or the calls (a stream) or relay
// them as they are with a finish that contradicts them (a JSON answer).
func badShape(content, toolCalls gjson.Result) bool {
	switch content.Type {
	case gjson.True, gjson.False, gjson.Number:
		return true
	case gjson.JSON:
		if !content.IsArray() {
			return true
		}
	}
	return toolCalls.Exists() && toolCalls.Type != gjson.Null && !toolCalls.IsArray()
}

// malformed is the upstream_malformed failure of a round of req whose
// upstream answer the loop cannot follow (cause).
func malformed(req *pipeline.Request, cause error) error {
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: req.Route.Name, Err: cause}
}

func (st *loopStream) onChunk(ch []byte) {
	var id, created, model, fingerprint, tier, choices gjson.Result
	root := gjson.ParseBytes(ch)
	if !root.IsObject() {
		// The providers' streams hand out JSON objects only (the OpenAI
		// upstream checks each event); anything else is not a chunk, and
		// its members would be read as one of "" (found by fuzzing).
		st.fail(malformed(st.s.req, errNotObject))
		return
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			id = v
		case "created":
			created = v
		case "model":
			model = v
		case "system_fingerprint":
			fingerprint = v
		case "service_tier":
			tier = v
		case "choices":
			choices = v
		case "usage":
			// Some upstreams send running totals on several chunks: keep the
			// round's last usage and count it once, when the round ends.
			if v.IsObject() {
				st.roundUsage = append(st.roundUsage[:0], v.Raw...)
			}
		default:
			// A provider's own member (citations, search results), as the
			// JSON answer keeps the last round's: the finish chunk carries
			// the last value each had.
			if !wire.OwnTop(k.Str) && k.Str != "x_gateway" {
				st.top.Set(k.Str, v)
			}
		}
		return true
	})
	if st.kept() > st.s.l.roundMax {
		// A chunk of top-level members only (citations, search results)
		// is bounded as the delta's members are (found by fuzzing).
		st.tooLarge()
		return
	}
	if !st.started {
		fp, tr := "", ""
		if fingerprint.Type == gjson.String {
			fp = fingerprint.Str // as the JSON answer keeps it
		}
		if tier.Type == gjson.String {
			tr = tier.Str
		}
		st.begin(id.String(), created.Int(), model.String(), fp, tr)
	}
	choice, stray := choiceZero(choices)
	if stray {
		// Another choice only: the round fails at its end unless a chunk
		// brings choice 0 (an upstream may send extra choices beside it).
		st.stray = true
	}
	if !choice.IsObject() {
		return
	}
	st.zero = true
	if fr := wire.FinishReason(choice); fr != "" {
		st.finish = fr
	}
	// The chunk's logprobs go with its content text (held with it, if it
	// is held), or with its refusal when it has no content text: the
	// token lists of both are in the one object, and the stream shows it
	// once.
	delta := choice.Get("delta")
	if badShape(delta.Get("content"), delta.Get("tool_calls")) {
		st.fail(malformed(st.s.req, errShape))
		return
	}
	var lp []byte
	if l := choice.Get("logprobs"); l.IsObject() && jsonvalid.String(l.Raw) { // written as it is
		lp = []byte(l.Raw)
	}
	refusalLP := lp
	if c := delta.Get("content"); lp != nil && c.Type == gjson.String && c.Str != "" {
		refusalLP = nil
	}
	// What the round keeps is checked after each piece of text and each
	// tool_calls entry: it never exceeds the limit by more than what one
	// event carries (text counts twice while it is held).
	limit := st.s.l.roundMax
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			if v.Type == gjson.String && v.Str != "" {
				st.onText(v.Str, lp)
				lp = nil // a repeated key's text is the same fragment's
			}
		case "refusal":
			if v.Type == gjson.String && v.Str != "" {
				st.sideBytes += len(v.Str)
				st.emit(&wire.Event{Kind: wire.Text, Key: k.Str, Text: []byte(v.Str), Logprobs: refusalLP})
				refusalLP = nil
			}
		case "reasoning_content", "reasoning":
			if v.Type == gjson.String && v.Str != "" {
				st.sideBytes += len(v.Str)
				st.emit(&wire.Event{Kind: wire.Text, Key: k.Str, Text: []byte(v.Str)})
			}
		case "tool_calls":
			v.ForEach(func(_, e gjson.Result) bool {
				// Whitespace before a tool call stays held: endRound drops
				// it when no other text follows (the JSON answer hides
				// such a text too), and text that follows shows it.
				st.acc.add(e)
				return st.kept() <= limit
			})
		default:
			// What the JSON answer's message carries beside its texts
			// and calls (the last round's message, as the upstream
			// wrote it): sent before the finish. Audio comes in
			// fragments of its own shape, not a member kept whole.
			if !wire.OwnMember(k.Str) {
				st.extra.Add(k.Str, v)
			}
		}
		return st.kept() <= limit
	})
	if st.kept() > limit {
		st.tooLarge()
		return
	}
	if st.acc.overflow {
		st.fail(malformed(st.s.req, errCallOverflow))
		return
	}
	st.pump()
}

// onText takes a chunk's content text t and the chunk's logprobs object lp
// (nil when none).
func (st *loopStream) onText(t string, lp []byte) {
	st.text = append(st.text, t...)
	switch st.textMode {
	case textLive:
		st.emitText([]byte(t), lp)
	case textUndecided:
		st.held = append(st.held, t...)
		st.heldLP.Add(lp)
		// held was only whitespace before t (or the mode would be
		// decided): only t needs reading, not all of held again.
		for i := 0; i < len(t); i++ {
			switch t[i] {
			case ' ', '\t', '\r', '\n':
				continue
			case '{':
				st.textMode = textHeld
			default:
				if st.s.p.structured {
					// Under a JSON response_format, whether a round's
					// text is shown depends on its end (endRound).
					st.textMode = textHeld
					return
				}
				st.textMode = textLive
				st.emitHeld()
			}
			return
		}
	case textHeld:
		st.held = append(st.held, t...)
		st.heldLP.Add(lp)
	}
}

// emitText queues a content text t with its logprobs object lp (nil: none).
func (st *loopStream) emitText(t, lp []byte) {
	if len(t) == 0 {
		return
	}
	st.shownTotal += wire.Characters(t)
	st.emit(&wire.Event{Kind: wire.Text, Key: "content", Text: t, Logprobs: lp})
}

// emitHeld shows the held text, as one fragment with the logprobs of the
// chunks it came in joined, and empties it.
func (st *loopStream) emitHeld() {
	var lp []byte
	if !st.heldLP.Empty() {
		lp = st.heldLP.AppendJSON(nil)
	}
	st.emitText(st.held, lp)
	st.held = st.held[:0]
	st.heldLP.Reset()
}

// pump re-streams client calls: each as one header delta then argument
// fragments, one call after the other (a later call waits until the earlier
// one is complete), dense indices from 0. Server calls are skipped.
func (st *loopStream) pump() {
	if st.textMode == textHeld && !st.roundEnded {
		return // the text may be an echo of the arguments: decide first
	}
	calls := st.acc.calls
	for i, c := range calls {
		// A call is classified once its name is settled: it has argument
		// fragments, a later call started, or the round ended.
		if c.kind == kindUnknown && c.name != "" && (len(c.args) > 0 || i < len(calls)-1 || st.roundEnded) {
			st.s.classify(c)
		}
	}
	for st.emitPos < len(calls) {
		c := calls[st.emitPos]
		if c.kind == kindUnknown {
			if !st.roundEnded {
				return
			}
			st.s.classify(c)
		}
		if c.kind == kindServer {
			st.emitPos++
			continue
		}
		if !c.headerSent {
			ensureIDs(calls[st.emitPos : st.emitPos+1])
			c.outIndex, c.headerSent = st.nextOut, true
			st.nextOut++
			st.emit(&wire.Event{Kind: wire.CallHeader, ID: c.id, Name: c.name})
		}
		if len(c.args) > c.emitted {
			st.emit(&wire.Event{Kind: wire.CallArgs, Text: c.args[c.emitted:]})
			c.emitted = len(c.args)
		}
		if !st.roundEnded && !(st.emitPos < len(calls)-1 && c.scan.valid(c.args)) {
			return // more fragments may come
		}
		c.closed = true
		st.emitPos++
	}
}

// endRound runs when an upstream round reached [DONE].
func (st *loopStream) endRound() {
	s := st.s
	st.closeUp()
	if len(st.roundUsage) > 0 {
		u := gjson.ParseBytes(st.roundUsage)
		s.noteUsage(s.usage.add(u))
		st.roundUsage = st.roundUsage[:0]
	}
	if st.stray && !st.zero {
		st.fail(malformed(s.req, errStrayChoices)) // after the round's usage: the upstream spent it
		return
	}
	if !st.started {
		st.begin("", 0, "", "", "")
	}
	st.roundEnded = true
	calls := st.acc.calls
	server, client := s.split(calls)
	ensureIDs(calls)
	o := roundOutcome{final: s.final, server: len(server), client: len(client), required: s.p.choice == choiceRequired,
		upstream: st.finish, spent: len(server) > 0 && s.outputSpent()}
	d := decide(o)
	switch st.textMode {
	case textUndecided:
		if len(calls) == 0 {
			st.emitHeld()
		} else {
			st.text = st.text[:0]
		}
	case textHeld:
		switch {
		case isEcho(st.text, calls):
			st.text = st.text[:0]
		case s.p.structured && d.next != stepEnd:
			// Under a JSON response_format the answer's content is the
			// structured text alone: a round whose server calls run shows
			// none of its text (as the JSON answer); the history keeps it.
		default:
			st.emitHeld()
		}
	}
	st.held, st.textMode = st.held[:0], textLive
	st.heldLP.Reset()
	st.pump()

	if d.next == stepEnd {
		if d.saveHidden {
			s.saveHidden(st.ctx, st.text, client, client, nil, nil) // as the JSON loop's (blocking.go)
		}
		st.finishStream(d.finish, d.reason)
		return
	}
	text := append([]byte(nil), st.text...)
	st.startOp(func(ctx context.Context) opResult {
		res, err := s.runCalls(ctx, server)
		return opResult{results: res, err: err}
	}, func(r opResult) {
		if r.err != nil {
			st.fail(r.err)
			return
		}
		after := o // a copy: o stays captured by value
		after.ran, after.stopReq = true, s.record(server, r.results)
		d := decide(after)
		switch {
		case d.next == stepNextRound:
			s.appendTurn(text, calls, r.results)
			s.checkBudget()
			st.startModelCall()
			return
		case d.saveHidden:
			s.saveHidden(st.ctx, text, calls, client, server, r.results)
		case d.resultsAnswer:
			st.emitText(resultsText(r.results), nil)
		}
		st.finishStream(d.finish, d.reason)
	})
}

// startModelCall makes the next round's model call in the background.
func (st *loopStream) startModelCall() {
	s := st.s
	r, err := s.nextRequest()
	if err != nil {
		st.fail(err)
		return
	}
	st.startOp(func(ctx context.Context) opResult {
		resp, err := s.req.Route.ModelLayer.Chat(ctx, r)
		return opResult{resp: resp, err: err}
	}, func(res opResult) {
		if res.err != nil {
			st.fail(res.err)
			return
		}
		s.noteRound(r)
		up := asStream(res.resp)
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			up.Close()
			st.fail(context.Canceled)
			return
		}
		st.up = up
		st.mu.Unlock()
		st.acc.reset()
		st.text, st.held, st.textMode = st.text[:0], st.held[:0], textUndecided
		st.heldLP.Reset()
		st.finish, st.roundEnded, st.emitPos = "", false, 0
		st.zero, st.stray = false, false
		st.sideBytes = 0
		st.extra.Reset()
		st.top.Reset()
		st.shownChars = st.shownTotal
		st.state = stRound
	})
}

// startOp runs fn on the stream's worker goroutine; Next waits for its
// result (yielding keep-alives) and then calls then. The worker is started
// by the first op and serves every later one (a goroutine per op began each
// with a small stack and grew it again); it is tracked by wg and returns
// when the stream's context ends, which Close makes sure of.
func (st *loopStream) startOp(fn func(context.Context) opResult, then func(opResult)) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		st.fail(context.Canceled)
		return
	}
	if st.work == nil {
		st.work = make(chan func(context.Context) opResult, 1)
		st.wg.Add(1)
		go st.worker(st.work)
	}
	st.mu.Unlock()
	st.then, st.state = then, stWait
	if st.ka == nil {
		st.ka = time.NewTimer(st.s.l.cfg.KeepAliveInterval.D())
	} else {
		st.ka.Reset(st.s.l.cfg.KeepAliveInterval.D())
	}
	st.work <- fn // never blocks: one op at a time, and Next took the last one's result
}

// worker runs the ops startOp hands it until the stream's context ends.
// Its one result at a time fits st.op's buffer, so it never blocks there.
func (st *loopStream) worker(work <-chan func(context.Context) opResult) {
	defer st.wg.Done()
	for {
		select {
		case fn := <-work:
			st.op <- st.run(fn)
		case <-st.ctx.Done():
			return
		}
	}
}

// run runs one op. A panic in it (a bug in a layer the round calls) is the
// op's error, which ends the stream with an error event, as a panic on the
// stream's own goroutine does: on this goroutine no request's recovery
// would catch it, and it would end the process.
func (st *loopStream) run(fn func(context.Context) opResult) (res opResult) {
	defer func() {
		if p := recover(); p != nil {
			st.s.l.logPanic(p, st.s.req, "tool loop round")
			res = opResult{err: pipeline.Internal(fmt.Errorf("toolloop: panic: %v", p), "internal error")}
		}
	}()
	return fn(st.ctx)
}

// finishStream queues the one finish chunk and, when asked for, the one
// usage chunk; x_gateway goes on the last of them. When no round reported
// usage there is no usage chunk: zeros would be taken for a count by the
// client, the access log and a cache entry, and the JSON answer of the same
// rounds has no usage either (the meter charges such a round with its own
// input estimate).
func (st *loopStream) finishStream(finish, reason string) {
	s := st.s
	if err := s.awaitApproval(st.ctx); err != nil {
		st.fail(err)
		return
	}
	if st.ended.CompareAndSwap(false, true) {
		s.end(reason)
	}
	tr := s.traceJSON()
	if st.extra.Size() > 0 {
		st.emit(&wire.Event{Kind: wire.Extra, Raw: st.extra.AppendJSON(nil, st.shownChars)})
	}
	var top []byte
	if st.top.Size() > 0 {
		top = st.top.AppendJSON(nil, 0)
	}
	if s.req.IncludeUsage && s.usage.seen {
		st.emit(&wire.Event{Kind: wire.Finish, Finish: finish, Raw: top})
		var buf [256]byte // the usage object, on the stack: Encode copies it
		st.emit(&wire.Event{Kind: wire.Usage, Raw: s.usage.appendJSON(buf[:0], s.iterations), Trace: tr})
	} else {
		st.emit(&wire.Event{Kind: wire.Finish, Finish: finish, Raw: top, Trace: tr})
	}
	st.state = stDone
}
