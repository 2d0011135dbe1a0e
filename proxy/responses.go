package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
	"github.com/llmgw/gateway/wire"
)

// servesResponses reports whether POST /v1/responses for model runs through
// the pipeline here (translated to chat) rather than passing through: the
// model is configured and its provider does not serve the Responses API
// natively.
func (rt *Runtime) servesResponses(model string) bool {
	if rt.Responses == nil {
		return false
	}
	route := rt.Routes[model]
	return route != nil && !rt.NativeResponses[model]
}

// handleResponses is POST /v1/responses for a model the pipeline serves:
// body has passed the tenant policy as a Responses request (passTarget).
// It continues the previous response when asked, translates the request
// to chat, runs it like a chat call and writes the Responses form.
func (s *Server) handleResponses(ctx *fasthttp.RequestCtx, x *exchange, t *pipeline.Tenant, body []byte) {
	rt := x.rt
	st := rt.Responses
	tenant := tenantName(t)
	rq, err := s.translateResponses(st, tenant, body)
	if err != nil {
		s.writeError(ctx, x, err)
		s.refused(ctx, x, true)
		return
	}
	// Random, not the request id: in an open gateway every caller shares one
	// tenant, and a stored response must not be found by counting.
	var rnd [16]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand)
	id := "resp_" + hex.EncodeToString(rnd[:])
	h := wire.ResponsesHeader{ID: id, Created: x.start.Unix(), Model: rq.Model, Echo: rq.Echo, Summary: rq.Summary, Logprobs: rq.Logprobs}
	form := &responsesForm{s: s, store: st, tenant: tenant, rq: rq, h: h, max: s.responsesMax}
	if rq.Logprobs {
		// A token's logprobs (with top_logprobs, twenty alternatives) are
		// ten to a hundred times its text: four times the bound keeps a
		// 24k-token answer at top_logprobs 20 (the bound counts them).
		form.max *= 4
	}
	if rq.Stream {
		form.enc = wire.NewResponsesStream(h)
	} else {
		form.enc = wire.NewResponsesJSON(h)
	}
	x.model = rq.Model
	req := s.chatRequest(ctx, x, rq.Chat, rq.Model, rt.Routes[rq.Model], rq.Stream, rq.Stream, arrayIn(rq.Chat, gjson.GetBytes(rq.Chat, "tools")))
	req.OnServerCall = form.serverCall
	if rq.Store {
		req.OnSettled = form.settle
	}
	req.MaxToolCalls, req.LimitToolCalls = rq.MaxToolCalls, rq.LimitToolCalls
	// The chat messages are the translation of instructions, input and a
	// stored history: an upstream error naming one by index names nothing
	// the client sent, so it names the input.
	req.Messages = pipeline.MessageMap{Rewritten: true, Input: true}
	s.runChat(ctx, x, req, form)
}

// translateResponses translates a Responses request body of tenant into
// its chat request, after the history of the previous response it
// continues (an id tenant has not stored is a 404, as OpenAI answers).
func (s *Server) translateResponses(st *responses.Store, tenant string, body []byte) (*responses.Request, error) {
	_, prevID, err := responses.Head(body)
	if err != nil {
		return nil, err
	}
	if err := topKeysOnce(body); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	var prior []byte
	if prevID != "" {
		rec, ok, err := st.Load(lctx, tenant, prevID)
		if err != nil {
			return nil, responses.StoreUnavailable(err)
		}
		if !ok {
			e := pipeline.NotFound(pipeline.CodeResponseNotFound, "Previous response with id '%s' not found.", truncate(prevID, 128))
			e.Param = "previous_response_id"
			return nil, e
		}
		prior = []byte(rec.History.Raw)
	}
	return responses.Translate(body, prior, st.Resolver(lctx, tenant))
}

// responsesForm writes a chat call's result as the Responses API: the
// chat chunks (or completion) decoded into events and encoded by
// wire.Responses, and the finished response stored when the request asked.
type responsesForm struct {
	s      *Server
	store  *responses.Store
	tenant string
	rq     *responses.Request
	h      wire.ResponsesHeader
	enc    *wire.Responses
	dec    wire.ChunkDecoder
	dst    []byte // scratch of the event callback
	kept   int    // bytes of text, logprobs and call arguments the encoder keeps for the response object
	max    int    // bound on kept (Server.responsesMax)

	mu      sync.Mutex
	pending []serverCall      // server calls the loop ran since the last chunk
	settled map[string]string // what the model was shown for each decided call, by its id (OnSettled)
}

// settle is the request's OnSettled: the stored history keeps what the
// model was shown in place of each decision.
func (f *responsesForm) settle(id string, content []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settled == nil {
		f.settled = map[string]string{}
	}
	f.settled[id] = string(content)
}

// serverCall is a server call's mcp_call event and, for a JSON answer,
// where among the answer's texts it ran (pipeline.ServerCall.At).
type serverCall struct {
	e     wire.Event
	at    pipeline.TextsAt
	hasAt bool
	after bool // ran after the answer's client calls were handed out (pipeline.ServerCall.AfterClientCalls)
}

// serverCall is the request's OnServerCall: the run becomes an mcp_call
// item before whatever the stream carries next.
func (f *responsesForm) serverCall(c *pipeline.ServerCall) {
	e := wire.Event{Kind: wire.ServerCall, Name: c.Name, Key: c.Source, ID: c.ApprovalID,
		Text: append([]byte(nil), c.Arguments...), Raw: append([]byte(nil), c.Output...)}
	if c.IsError {
		e.Finish, e.Raw = string(c.Output), nil
		if e.Finish == "" {
			e.Finish = "the tool failed"
		}
	}
	sc := serverCall{e: e, after: c.AfterClientCalls}
	if c.At != nil {
		sc.at, sc.hasAt = *c.At, true
	}
	f.mu.Lock()
	f.pending = append(f.pending, sc)
	f.mu.Unlock()
}

// takeCalls returns the server calls reported so far.
func (f *responsesForm) takeCalls() []serverCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	pending := f.pending
	f.pending = nil
	return pending
}

// flush encodes the server calls reported so far.
func (f *responsesForm) flush(dst []byte) []byte {
	pending := f.takeCalls()
	for i := range pending {
		dst = f.enc.Encode(dst, &pending[i].e)
	}
	return dst
}

// body is the Responses object for a whole chat completion. The tool
// loop's server calls go where a stream of the same request carries them:
// each after the part of every text that the rounds before it produced
// (a call that does not say, before all of them), and a mixed turn's last
// ones after the client calls it hands back.
func (f *responsesForm) body(completion []byte) []byte {
	var out []byte
	calls, after := splitAfter(f.takeCalls())
	var texts []wire.Event // held until the calls are placed among them
	wire.DecodeCompletion(completion, func(e *wire.Event) {
		markApproval(e)
		switch {
		case calls == nil || e.Kind == wire.Role:
		case e.Kind == wire.Text:
			texts = append(texts, *e) // its Text is its own (DecodeCompletion)
			return
		default: // the texts are over
			out = f.placeCalls(out, calls, texts)
			calls = nil
		}
		if after != nil && (e.Kind == wire.Finish || e.Kind == wire.End) {
			for i := range after {
				out = f.enc.Encode(out, &after[i].e)
			}
			after = nil
		}
		out = f.enc.Encode(out, e)
	})
	f.save(out)
	return out
}

// splitAfter parts calls into those placed among the answer's texts and
// those that follow its client calls; each nil when empty.
func splitAfter(calls []serverCall) (among, after []serverCall) {
	for _, c := range calls {
		if c.after {
			after = append(after, c)
		} else {
			among = append(among, c)
		}
	}
	return among, after
}

// placeCalls encodes texts with calls among them, in the order the stream
// of the same request has them.
func (f *responsesForm) placeCalls(dst []byte, calls []serverCall, texts []wire.Event) []byte {
	var done pipeline.TextsAt // how much of each text is encoded
	tokens := 0               // bytes of the model's content whose logprobs are placed
	// part encodes t up to upTo; before a call (c set), the content's
	// tokens up to the call go with it.
	part := func(t *wire.Event, upTo int, c *serverCall) {
		n := done.Of(t.Key)
		if n == nil {
			return
		}
		// A layer after the loop may have changed the text (a redacting
		// guardrail): never cut inside a character.
		upTo = min(upTo, len(t.Text))
		for upTo > *n && upTo < len(t.Text) && !utf8.RuneStart(t.Text[upTo]) {
			upTo--
		}
		e := *t
		if c != nil && t.Key == "content" {
			// The part's tokens go with it, the rest with the text after
			// the call: the message items the stream had, each with the
			// logprobs of its round. They are cut where the text reached
			// the call (a layer that rewrites the text rewrites its
			// logprobs with it, pipeline.TextsAt). Tokens before the call
			// with no text of their own left have no item to go in (nor
			// in a stream).
			cut := c.at.Content
			e.Logprobs, t.Logprobs = wire.CutLogprobs(t.Logprobs, cut-tokens)
			tokens = max(tokens, cut)
		}
		if upTo <= *n {
			return
		}
		e.Text = t.Text[*n:upTo]
		*n = upTo
		dst = f.enc.Encode(dst, &e)
	}
	for i := range calls {
		c := &calls[i]
		for j := range texts {
			if at := c.at.Of(texts[j].Key); c.hasAt && at != nil {
				part(&texts[j], *at, c)
			}
		}
		dst = f.enc.Encode(dst, &c.e)
	}
	for j := range texts {
		part(&texts[j], len(texts[j].Text), nil)
	}
	return dst
}

// pulse writes the server calls the loop reported since the last chunk:
// at a keep-alive, each as soon as its tool ran, not with the next round.
func (f *responsesForm) pulse(dst []byte) []byte { return f.flush(dst) }

func (f *responsesForm) chunk(dst, chunk []byte) []byte {
	f.dst = f.flush(dst)
	f.dec.Decode(chunk, f.emit)
	return f.dst
}

func (f *responsesForm) emit(e *wire.Event) {
	markApproval(e)
	f.kept += len(e.Text) + len(e.Logprobs) + len(e.Raw)
	f.dst = f.enc.Encode(f.dst, e)
}

// maxResponsesOutput bounds the output a streamed Responses answer keeps:
// unlike a chat stream, which keeps nothing of what it passes on, the
// encoder keeps every text, logprob and argument for response.completed,
// and an upstream that streams without end would grow it without limit.
// What the answer keeps is held several times over until it ends (the
// encoder's output, the tool loop's round, the stored record, the final
// event and its encoding): at 32 MiB, five such streams took a resource
// probe's gateway to 1.4 GB. 8 MiB is eight times the longest answer a
// model writes today (128k output tokens, about 1 MB of text); an answer
// with logprobs, which count too, gets four times as much (handleResponses).
const maxResponsesOutput = 8 << 20

// wrap bounds stream by what the form keeps: once over max, the next
// chunk is not read and the stream ends with upstream_response_too_large
// (response.failed), as a tool loop's round over its bound does.
func (f *responsesForm) wrap(stream pipeline.Stream) pipeline.Stream {
	if f.max <= 0 {
		return stream
	}
	return &boundedForm{Stream: stream, f: f}
}

type boundedForm struct {
	pipeline.Stream
	f *responsesForm
}

func (b *boundedForm) Next() ([]byte, error) {
	if b.f.kept > b.f.max {
		return nil, pipeline.Errorf(http.StatusBadGateway, pipeline.TypeServer, pipeline.CodeUpstreamResponseTooLarge,
			"upstream response exceeds the gateway's size limit")
	}
	return b.Stream.Next()
}

// markApproval marks the call the tool loop handed out for a person's
// approval, which the Responses form shows as an mcp_approval_request.
func markApproval(e *wire.Event) {
	if e.Kind == wire.CallHeader && strings.HasPrefix(e.ID, pipeline.ApprovalIDPrefix) {
		e.Approval = true
	}
}

func (f *responsesForm) end(dst []byte) []byte {
	dst = f.flush(dst)
	e := wire.Event{Kind: wire.End}
	dst = f.enc.Encode(dst, &e)
	if f.rq.Store {
		f.save(f.enc.Object(nil))
	}
	return dst
}

// fail ends the stream with response.failed, after the server calls the
// loop ran since the last chunk: a tool that ran is reported even when the
// round after it failed.
func (f *responsesForm) fail(dst []byte, err error) []byte {
	dst = f.flush(dst)
	env := gjson.GetBytes(mapError(err).body, "error")
	code := "server_error"
	if c := env.Get("code").String(); c == pipeline.CodeRateLimitExceeded {
		code = c
	}
	dst = f.enc.Fail(dst, code, env.Get("message").String())
	if f.rq.Store {
		// Its id was announced (response.created): a GET finds it failed,
		// with its error and what it output before, as OpenAI keeps one.
		f.save(f.enc.Object(nil))
	}
	return dst
}

// left stores, when the request asked, the response of a stream whose
// client left: cancelled, with what it output until then (the calls the
// gateway ran included), so that the id response.created announced is
// found by a GET and continues as a previous_response_id (a chat UI's
// stop button), as a failed one is.
func (f *responsesForm) left() {
	if !f.rq.Store {
		return
	}
	f.flush(nil)
	if f.enc.Cancel() { // one that ended (and was stored) as its last write failed stays as it was
		f.save(f.enc.Object(nil))
	}
}

// endWaits reports whether the stream's end stores the response (save),
// which may wait on the network: runChat marks the request's Lookahead,
// and the sink then writes the events before the end first.
func (f *responsesForm) endWaits() bool { return f.rq.Store }

// save stores the finished or failed response (object) when the request
// asked, with the conversation its output continues.
func (f *responsesForm) save(object []byte) {
	if !f.rq.Store {
		return
	}
	// Not cancelled by a shutdown, which is what fails a stream while it
	// drains: its failed response is stored all the same, within the bound
	// (a second then, so that the stream's last event still goes out in
	// the time a shutdown gives the last writes).
	bound := 5 * time.Second
	if f.s.base.Err() != nil {
		bound = time.Second
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(f.s.base), bound)
	defer cancel()
	f.mu.Lock()
	history := responses.Settle(f.rq.History, f.settled)
	f.mu.Unlock()
	fits, err := f.store.Save(ctx, f.tenant, f.h.ID, object, f.rq.Input, history, responses.AnswerMessages(object))
	switch {
	case err != nil:
		f.s.log.Warn().Str("response_id", f.h.ID).AnErr("cause", err).Msg("could not store the response")
	case !fits:
		f.s.log.Warn().Str("response_id", f.h.ID).Msg("response too large to store")
	}
}

// handleStoredResponse serves GET and DELETE /v1/responses/{id}, GET
// /v1/responses/{id}/input_items and POST /v1/responses/{id}/cancel from
// the tenant's stored responses.
func (s *Server) handleStoredResponse(ctx *fasthttp.RequestCtx, x *exchange, path string) {
	rt := x.rt
	t, ok := s.tenant(ctx, x)
	if !ok {
		return
	}
	if rt.Policy != nil && !rt.Policy.AllowsPath(t, responsesRoute) {
		s.writeError(ctx, x, pathNotAllowed(responsesRoute))
		return
	}
	rest := strings.TrimPrefix(path, responsesRoute+"/")
	id, sub, _ := strings.Cut(rest, "/")
	if sub != "" && sub != "input_items" && sub != "cancel" {
		s.writeError(ctx, x, unknownURL(path))
		return
	}
	switch {
	case sub == "cancel" && ctx.IsPost():
	case sub == "cancel":
		s.methodNotAllowed(ctx, x, fasthttp.MethodPost)
		return
	case ctx.IsGet():
	case ctx.IsDelete() && sub == "":
	default:
		allow := fasthttp.MethodGet
		if sub == "" {
			allow += ", " + fasthttp.MethodDelete
		}
		s.methodNotAllowed(ctx, x, allow)
		return
	}
	lctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	tenant := tenantName(t)
	var rec responses.Record
	var found, loaded bool
	var loadErr error
	if len(rt.NativeResponses) > 0 {
		// Some provider serves the Responses API itself: an id not stored
		// here is the provider's (its pass-through passes the limits).
		// What was read serves the GET below, read once.
		rec, found, loadErr = rt.Responses.Load(lctx, tenant, id)
		if loadErr == nil && !found {
			s.handlePassthrough(ctx, x, path)
			return
		}
		loaded = true
	}
	if rt.Policy != nil {
		// A request to the tenant's limits, as a pass-through request that
		// names no model is (admitOpaque): each one reads the store. Not a
		// model call: the path, not /v1/responses, is its endpoint.
		req := &pipeline.Request{ID: x.id, Start: x.start, Endpoint: path, Tenant: t, Meta: &x.meta}
		var err error
		if x.call, err = rt.Policy.Limit(req); err != nil {
			s.passError(ctx, x, err)
			return
		}
		setMetaHeaders(ctx, &x.meta)
	}
	notFound := pipeline.NotFound(pipeline.CodeResponseNotFound, "Response with id '%s' not found.", truncate(id, 128))
	if ctx.IsDelete() {
		ok, err := rt.Responses.Delete(lctx, tenant, id)
		switch {
		case err != nil:
			s.writeError(ctx, x, responses.StoreUnavailable(err))
		case !ok:
			s.writeError(ctx, x, notFound)
		default:
			ctx.SetContentType("application/json")
			b := jsonstring.Append([]byte(`{"id":`), id)
			ctx.SetBody(append(b, `,"object":"response","deleted":true}`...))
		}
		return
	}
	if !loaded {
		rec, found, loadErr = rt.Responses.Load(lctx, tenant, id)
	}
	switch {
	case loadErr != nil:
		s.writeError(ctx, x, responses.StoreUnavailable(loadErr))
		return
	case !found:
		s.writeError(ctx, x, notFound)
		return
	}
	if sub == "cancel" {
		// Every response here ran to its end (or its client left) before it
		// was stored: none runs in the background.
		s.writeError(ctx, x, pipeline.BadRequest("", "Only responses created with background set to true can be cancelled; this response has already finished."))
		return
	}
	if sub == "input_items" {
		page, err := inputPage(ctx.QueryArgs())
		if err != nil {
			s.writeError(ctx, x, err)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(responses.InputList(id, rec.Input, page))
		return
	}
	if string(ctx.QueryArgs().Peek("stream")) == "true" || asksStream(&ctx.Request) {
		// A stored response streams again only while it runs in the
		// background, and nothing here does: say so, rather than answer
		// JSON to a client that reads events (and finds none). The Node
		// SDK asks in the query, openai-go in a JSON body.
		s.writeError(ctx, x, pipeline.BadRequest("stream", "Only responses created with background set to true can be streamed again; this response has already finished: retrieve it without stream."))
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(rec.Response.Raw)
}

// asksStream reports whether a GET's body is a small JSON object asking
// for a stream ({"stream":true}, openai-go's form). Nothing else of a
// GET's body is read: one that is larger, or of unknown length, is not
// read at all (the server streams request bodies, and this route has no
// body limit of its own).
func asksStream(r *fasthttp.Request) bool {
	const maxGetBody = 1 << 10
	if n := r.Header.ContentLength(); n <= 0 || n > maxGetBody {
		return false
	}
	return gjson.GetBytes(r.Body(), "stream").Type == gjson.True
}

// inputPage reads the page of input_items a query asks for: limit (1 to
// 100), order (asc or desc) and after.
func inputPage(args *fasthttp.Args) (responses.InputPage, error) {
	var p responses.InputPage
	if v := args.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 100 {
			return p, pipeline.BadRequest("limit", "limit must be an integer from 1 to 100")
		}
		p.Limit = n
	}
	switch o := string(args.Peek("order")); o {
	case "", "desc":
	case "asc":
		p.Asc = true
	default:
		return p, pipeline.BadRequest("order", "order must be asc or desc")
	}
	p.After = string(args.Peek("after"))
	return p, nil
}

func tenantName(t *pipeline.Tenant) string {
	if t == nil {
		return ""
	}
	return t.Name
}
