package toolloop

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// runBlocking is the non-streaming loop: it returns the final
// chat.completion with the first round's id/created (and
// system_fingerprint and service_tier), the last round's
// message (server calls removed) whose content is the text of every round,
// as the stream of the same request shows it, and usage summed over every
// round.
func (s *session) runBlocking(ctx context.Context) (*pipeline.Response, error) {
	for {
		r, err := s.nextRequest()
		if err != nil {
			s.end("error")
			return nil, err
		}
		resp, err := s.req.Route.ModelLayer.Chat(ctx, r)
		if err != nil {
			s.stop = failReason(ctx)
			s.end("")
			return nil, err
		}
		s.noteRound(r)
		if resp.Stream != nil {
			resp.Stream.Close()
			s.end("error")
			return nil, pipeline.Errorf(http.StatusBadGateway, pipeline.TypeServer, pipeline.CodeBadUpstream, "the upstream answered a non-streaming request with a stream")
		}
		body := resp.Body
		res := readCompletion(body)
		if s.iterations == 1 {
			// As the stream's begin: an answer without an id, or with a
			// created that is no unix time, gets the gateway's.
			s.id, s.created = res.id.Str, res.created.Int()
			if res.id.Type != gjson.String || s.id == "" {
				s.id = wire.GatewayID()
			}
			if s.created <= 0 {
				s.created = time.Now().Unix()
			}
			if res.fingerprint.Type == gjson.String {
				s.fingerprint = res.fingerprint.Str
			}
			if res.tier.Type == gjson.String {
				s.tier = res.tier.Str
			}
		}
		s.noteUsage(s.usage.add(res.usage))
		if res.stray {
			// The round's usage is counted: the upstream spent it.
			s.end("error")
			return nil, malformed(s.req, errStrayChoices)
		}
		if badShape(res.content, res.toolCalls) {
			s.end("error")
			return nil, malformed(s.req, errShape)
		}
		text := []byte(res.content.String())
		calls := callsFromMessage(res.toolCalls, s.gatewayIDs())
		if len(calls) > maxCalls {
			s.end("error")
			return nil, malformed(s.req, errCallOverflow)
		}
		f := finalEdit{}
		server, client := s.split(calls)
		o := roundOutcome{final: s.final, server: len(server), client: len(client), required: s.p.choice == choiceRequired,
			upstream: res.finish.String(), spent: len(server) > 0 && s.outputSpent()}
		if len(calls) == 0 {
			d := decide(o)
			f.finish = d.finish
			s.answer(&f, text, nil, false)
			s.logprobs(&f, &res, true)
			s.end(d.reason)
			return s.finalBody(body, &res, f)
		}
		madeIDs := ensureIDs(calls)
		shown := true
		if hiddenText(text, calls) {
			// An echo of the arguments, or only whitespace before the calls:
			// the stream never shows it, nor does the history keep it.
			text, shown = nil, false
			f.text, f.setText = nil, true
		}
		// seen is the text the client is shown of this round. Under a
		// JSON response_format, a round whose server calls run shows none
		// (the stream holds it and drops it too): the answer's content is
		// the structured text alone. The history keeps it.
		seen := text
		if s.p.structured && decide(o).next != stepEnd {
			seen, shown = nil, false
			f.text, f.setText = nil, true
		}
		s.logprobs(&f, &res, shown)
		if shown && res.logprobs.IsObject() {
			s.shownLP.Add([]byte(res.logprobs.Raw)) // the next round's "earlier" ones
		}
		if d := decide(o); d.next == stepEnd {
			// The server calls of a forced final or a cut round are never
			// run: drop them. The client calls are written again when they
			// were renamed, or given the id they came without (as the
			// stream names them).
			f.calls, f.setCalls, f.finish = client, len(server) > 0 || len(s.pending) > 0 || s.gatewayIDs() || madeIDs, d.finish
			if len(client) == 0 {
				f.setText = true
			}
			if d.saveHidden {
				// The client's message holds its calls alone: the dropped
				// server calls have no result to pair with.
				s.saveHidden(ctx, text, client, client, nil, nil)
			}
			s.answer(&f, text, nil, f.setText)
			if err := s.awaitApproval(ctx); err != nil {
				s.end("")
				return nil, err
			}
			s.end(d.reason)
			return s.finalBody(body, &res, f)
		}
		results, err := s.runCalls(ctx, server)
		if err != nil {
			s.stop = failReason(ctx)
			s.end("")
			return nil, err
		}
		if s.req.OnServerCall != nil {
			s.textsAt = s.textsThrough(seen, &res)
			// A mixed turn: a stream hands the round's client calls out as
			// they come, before its server calls have run.
			s.afterClient = len(client) > 0
		}
		o.ran, o.stopReq = true, s.record(server, results)
		if d := decide(o); d.next == stepEnd {
			f.finish = d.finish
			if d.resultsAnswer {
				s.answer(&f, seen, resultsText(results), true)
				f.calls, f.setCalls = nil, true
			} else {
				s.saveHidden(ctx, text, calls, client, server, results)
				f.calls, f.setCalls = client, true
				s.answer(&f, seen, nil, f.setText)
			}
			if err := s.awaitApproval(ctx); err != nil {
				s.end("")
				return nil, err
			}
			s.end(d.reason)
			return s.finalBody(body, &res, f)
		}
		s.shown = append(s.shown, seen...)
		for i := range sideTexts {
			if res.side[i].Type == gjson.String { // as the stream: only text
				s.shownSide[i] = append(s.shownSide[i], res.side[i].Str...)
			}
		}
		s.appendTurn(text, calls, results)
		s.checkBudget()
	}
}

// textsThrough counts the answer's texts through the current round, whose
// shown text is text: where a stream of the request has shown this
// round's server calls.
func (s *session) textsThrough(text []byte, res *completionView) *pipeline.TextsAt {
	at := &pipeline.TextsAt{Content: len(s.shown) + len(text)}
	for i, k := range sideTexts {
		n := at.Of(k)
		*n = len(s.shownSide[i])
		if res.side[i].Type == gjson.String {
			*n += len(res.side[i].Str)
		}
	}
	return at
}

// answer sets the content of the final message: the text earlier rounds
// showed, this round's text, then extra (the results that answer a
// tool_choice or a stop request), the way the stream sends them one after
// the other. The upstream's content is kept as it is when nothing precedes
// or follows it and set is false.
func (s *session) answer(f *finalEdit, text, extra []byte, set bool) {
	if !set && len(s.shown) == 0 && len(extra) == 0 {
		return
	}
	out := make([]byte, 0, len(s.shown)+len(text)+len(extra))
	out = append(append(append(out, s.shown...), text...), extra...)
	f.text, f.setText = out, true
}

// logprobs sets, in case the current round is the last, the message's
// logprobs as the stream shows them: those of the text of every round
// before it that showed text (s.shownLP), then the current round's when
// its text is shown (the stream carries each chunk's on it; ChatJSON joins
// them the same way). The body's own are kept when they are all of it. A
// round whose content is hidden loses its refusal's logprobs with it (the
// stream keeps those on the refusal's chunk): no upstream sends both.
func (s *session) logprobs(f *finalEdit, res *completionView, shown bool) {
	switch {
	case s.shownLP.Empty() && shown: // only the body's own
		f.logprobs = nil
	case s.shownLP.Empty():
		f.logprobs = nil
		if res.logprobs.IsObject() {
			f.logprobs = []byte("null") // of a text the stream does not show
		}
	default:
		var lp wire.Logprobs
		lp.Add(s.shownLP.AppendJSON(nil))
		if shown && res.logprobs.IsObject() {
			lp.Add([]byte(res.logprobs.Raw))
		}
		f.logprobs = lp.AppendJSON(nil)
	}
}

// sideTexts are the message's other texts the stream forwards from every
// round as they come (wire.Text events): the JSON answer carries every
// round's too.
var sideTexts = [3]string{"refusal", "reasoning_content", "reasoning"}

// hiddenText reports whether a round's text is not shown when the round
// also calls tools: only whitespace, or an echo of a call's arguments.
func hiddenText(text []byte, calls []*call) bool {
	return len(calls) > 0 && (len(bytes.TrimSpace(text)) == 0 || isEcho(text, calls))
}

// finalEdit says how the last round's body becomes the client's answer.
type finalEdit struct {
	text     []byte
	setText  bool
	calls    []*call // client calls kept in message.tool_calls
	setCalls bool
	finish   string
	logprobs []byte // the choice's logprobs to write (JSON); nil: the body's stay
}

// finalBody edits the last round's body (read as got) into the client's
// answer. An edit that would write what the body already holds is skipped:
// each is a pass over the body and a copy of it.
func (s *session) finalBody(body []byte, got *completionView, f finalEdit) (*pipeline.Response, error) {
	var err error
	set := func(path string, v any) {
		if err == nil {
			body, err = sjson.SetBytes(body, path, v)
		}
	}
	setRaw := func(path string, raw []byte) {
		if err == nil {
			body, err = sjson.SetRawBytes(body, path, raw)
		}
	}
	body, err = onlyChoiceZero(body)
	// The first round's id and created, or the gateway's when it had none
	// (as the stream's begin gives them).
	if s.id != "" && (got.id.Type != gjson.String || got.id.Str != s.id) {
		set("id", s.id)
	}
	if s.created != 0 && (got.created.Type != gjson.Number || got.created.Raw != strconv.FormatInt(s.created, 10)) {
		setRaw("created", strconv.AppendInt(nil, s.created, 10))
	}
	if s.iterations > 1 {
		for _, f := range [...]struct {
			key, first string
			got        gjson.Result
		}{{"system_fingerprint", s.fingerprint, got.fingerprint}, {"service_tier", s.tier, got.tier}} {
			switch {
			case f.first != "" && (f.got.Type != gjson.String || f.got.Str != f.first):
				set(f.key, f.first)
			case f.first == "" && f.got.Exists() && err == nil:
				body, err = sjson.DeleteBytes(body, f.key)
			}
		}
	}
	switch {
	case s.usage.seen:
		setRaw("usage", s.usage.appendJSON(make([]byte, 0, 256), s.iterations))
	case got.usage.Exists() && got.usage.Type != gjson.Null && err == nil:
		// A usage whose counts are no counts: none, as the stream of the
		// same answer sends no usage chunk for it.
		body, err = sjson.DeleteBytes(body, "usage")
	}
	for i, k := range sideTexts {
		if len(s.shownSide[i]) == 0 {
			continue
		}
		if cur := got.side[i]; cur.Type == gjson.String || cur.Type == gjson.Null {
			v := append(s.shownSide[i][:len(s.shownSide[i]):len(s.shownSide[i])], cur.Str...)
			setRaw("choices.0.message."+k, appendJSONString(nil, v))
		}
	}
	if len(s.shown) > 0 {
		// The message's annotations point into this round's text, which
		// now follows what earlier rounds showed (as the stream moves them).
		if a := gjson.GetBytes(body, "choices.0.message.annotations"); a.IsArray() && len(a.Raw) > 2 {
			setRaw("choices.0.message.annotations", wire.ShiftAnnotations([]byte(a.Raw), wire.Characters(s.shown)))
		}
	}
	if f.setText {
		if len(f.text) == 0 {
			setRaw("choices.0.message.content", []byte("null"))
		} else {
			setRaw("choices.0.message.content", appendJSONString(nil, f.text))
		}
	}
	if f.setCalls {
		if len(f.calls) == 0 {
			if err == nil {
				body, err = sjson.DeleteBytes(body, "choices.0.message.tool_calls")
			}
		} else {
			setRaw("choices.0.message.tool_calls", appendToolCalls(nil, f.calls, false))
		}
	}
	if f.logprobs != nil {
		setRaw("choices.0.logprobs", f.logprobs)
	}
	if f.finish != "" && (got.finish.Type != gjson.String || got.finish.Str != f.finish) {
		set("choices.0.finish_reason", f.finish)
	}
	if tr := s.traceJSON(); tr != nil {
		setRaw("x_gateway", tr)
	}
	if err != nil {
		return nil, pipeline.Errorf(http.StatusBadGateway, pipeline.TypeServer, pipeline.CodeBadUpstream, "the upstream answer could not be rewritten")
	}
	return &pipeline.Response{Body: body}, nil
}

// onlyChoiceZero returns body with its choices reduced to the one whose
// index is 0, first, when it has others or that one is not first. The loop
// runs only for n <= 1 and follows that choice, which is all the stream
// relays: a choice the client did not ask for leaves the JSON answer too,
// and the edits of choices.0 are that choice's.
func onlyChoiceZero(body []byte) ([]byte, error) {
	ch := gjson.GetBytes(body, "choices")
	zero, _ := choiceZero(ch)
	if !zero.Exists() || ch.Get("#").Int() == 1 { // none to follow, or it is the only one
		return body, nil
	}
	return sjson.SetRawBytes(body, "choices", append(append([]byte{'['}, zero.Raw...), ']'))
}

func failReason(ctx context.Context) string {
	if ctx.Err() != nil {
		return "canceled"
	}
	return "error"
}
