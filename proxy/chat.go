package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/internal/lazyctx"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wire"
)

// handleChat is POST /v1/chat/completions: ingress, the request layer, then
// one JSON body or an SSE stream written by the sink.
func (s *Server) handleChat(ctx *fasthttp.RequestCtx, x *exchange) {
	if req := s.chatIn(ctx, x); req != nil {
		s.runChat(ctx, x, req, chatForm{})
	} else {
		s.refused(ctx, x, false)
	}
}

// chatIn reads and checks a chat call and returns its pipeline request, or
// writes the error and returns nil. A function of its own, so that its
// locals are not on the stack while the pipeline runs.
//
//go:noinline
func (s *Server) chatIn(ctx *fasthttp.RequestCtx, x *exchange) *pipeline.Request {
	rt := x.rt
	// The key first: a caller without a valid one gets its 401 before the
	// body is read, as on every other route, and learns nothing of the
	// body's checks (nor of which models exist).
	t, ok := s.tenant(ctx, x)
	if !ok {
		return nil
	}
	body, err := readBody(ctx, rt.Config.Server.MaxBodyBytes)
	if err != nil {
		s.writeError(ctx, x, err)
		return nil
	}
	in, err := parseChat(body)
	if err != nil {
		if ee := encodedBody(&ctx.Request.Header, chatRoute); ee != nil {
			err = ee // a compressed body, not bad JSON (looked at only when the body failed)
		}
		s.writeError(ctx, x, err)
		return nil
	}
	route := rt.Routes[in.model]
	if route == nil {
		s.writeError(ctx, x, modelNotFound(in.model)) // no client-chosen metric labels
		return nil
	}
	x.model = in.model
	req := s.chatRequest(ctx, x, body, in.model, route, in.stream, in.includeUsage, in.tools)
	req.Tenant = t // the policy layer takes it as authenticated
	return req
}

// chatRequest is the pipeline request of one chat call: the body the
// pipeline runs, its model and route, its tools array (a sub-slice of body,
// see arrayIn), and the hints the client's headers give.
func (s *Server) chatRequest(ctx *fasthttp.RequestCtx, x *exchange, body []byte, model string, route *pipeline.Route, stream, includeUsage bool, tools []byte) *pipeline.Request {
	// The request and its Meta live in x: one allocation per exchange.
	req := &x.chatReq
	*req = pipeline.Request{
		ID: x.id, Start: x.start, Body: body, Model: model, Stream: stream, IncludeUsage: includeUsage, Tools: tools,
		Route: route, Credential: bearer(&ctx.Request.Header), Meta: &x.meta,
		Hints: pipeline.Hints{
			Cache:     listHeader(&ctx.Request.Header, "X-Gateway-Cache"),
			ToolTrace: string(ctx.Request.Header.Peek("X-Gateway-Tool-Trace")) == "1",
		},
	}
	if tp := ctx.Request.Header.Peek("Traceparent"); len(tp) > 0 && len(tp) <= 128 {
		req.Hints.TraceParent = string(tp)
		req.Hints.TraceState = string(truncateBytes(ctx.Request.Header.Peek("Tracestate"), 512))
	}
	return req
}

// listHeader returns the value of a list header (a comma-separated one),
// its field lines joined with ", " when the client sent several: HTTP
// reads repeated lines of a list header as that one line (RFC 9110 5.3),
// so a no-store on a second line is not lost.
func listHeader(h *fasthttp.RequestHeader, key string) string {
	vs := h.PeekAll(key)
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return string(vs[0])
	}
	return string(bytes.Join(vs, []byte(", ")))
}

// outputForm writes a chat call's result in the form the client asked
// for: chat completions, or the Responses API (responsesForm).
type outputForm interface {
	// body is the JSON answer for a chat.completion.
	body(completion []byte) []byte
	// chunk appends the SSE event(s) for one chat.completion.chunk.
	chunk(dst, chunk []byte) []byte
	// end appends what follows the last chunk.
	end(dst []byte) []byte
	// fail appends the event that ends a stream with err.
	fail(dst []byte, err error) []byte
}

// leaver is a form that records a stream its client left (a stored
// Responses response is kept as cancelled, with what it output).
type leaver interface {
	left()
}

// pulser is a form that writes what it holds at a keep-alive: the tool
// loop sends one while a round's tools run and the next round is awaited,
// and what the loop reported meanwhile (a server call) goes out then
// rather than with the next round's first chunk.
type pulser interface {
	pulse(dst []byte) []byte
}

// chatForm is the chat completions form: the pipeline's own output.
type chatForm struct{}

func (chatForm) body(completion []byte) []byte  { return completion }
func (chatForm) chunk(dst, chunk []byte) []byte { return sse.AppendData(dst, chunk) }
func (chatForm) end(dst []byte) []byte          { return append(dst, sse.Done...) }
func (chatForm) fail(dst []byte, err error) []byte {
	return sse.AppendError(dst, mapError(err).body)
}

// runChat runs req through the request layer and writes its result in
// form's shape: one JSON body, or an SSE stream written by the sink.
func (s *Server) runChat(ctx *fasthttp.RequestCtx, x *exchange, req *pipeline.Request, form outputForm) {
	rt := x.rt
	x.req = req
	if req.Stream && req.Lookahead == nil {
		req.Lookahead = &x.look // the sink asks it before each flush
	}
	if w, ok := form.(endWaiter); ok && w.endWaits() {
		req.Lookahead.EndWaits() // the form's end (a stored response's save) may wait on the network
	}
	if req.Usage == nil {
		// The calls' usage for the access log when the answer carries none:
		// a stream that did not ask (the meter takes it out), a tool loop
		// that failed after rounds that were charged.
		req.Usage = &x.usageLog
	}
	rctx := lazyctx.New(s.base, time.Time{}) // registers with s.base only once something waits on it
	cancel := rctx.Cancel
	x.chat = true
	s.chats.add()
	// A client that leaves cancels the request, streamed or not, and with it
	// the upstream call (see call.interrupt) and any tool loop.
	watch := s.peers.watch(ctx.Conn(), cancel)
	resp, err := rt.Chat.Chat(rctx, req)
	s.chatOut(ctx, x, req, form, resp, err, cancel, watch)
}

// chatOut writes the result of runChat's pipeline call. A function of its
// own, so that its locals are not on the stack while the pipeline runs.
//
//go:noinline
func (s *Server) chatOut(ctx *fasthttp.RequestCtx, x *exchange, req *pipeline.Request, form outputForm, resp *pipeline.Response, err error,
	cancel context.CancelFunc, watch peerWatch) {
	if err != nil || resp.Stream == nil {
		s.peers.unwatch(watch) // before the connection can be closed
		cancel()
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && s.base.Err() != nil {
			// Keep what a retry needs to know: after a server tool ran,
			// a retry would run it again (x-should-retry: false).
			var se *pipeline.SideEffectsError
			if errors.As(err, &se) {
				err = pipeline.AfterSideEffects(errShuttingDown)
			} else {
				err = errShuttingDown
			}
		}
		setMetaHeaders(ctx, req.Meta)
		s.writeError(ctx, x, err)
		x.usage, x.hasUsage = req.Usage.Total() // what the calls before the failure were charged
		return
	}
	setMetaHeaders(ctx, req.Meta)
	if resp.Stream == nil {
		ctx.SetContentType("application/json")
		body := form.body(resp.Body)
		if len(body) > unreadBytes {
			boundWrite(ctx, x)
		}
		ctx.SetBody(body)
		x.usage, x.hasUsage = resp.ChatUsage() // read once: the meter read it already
		return
	}
	if w, ok := form.(interface {
		wrap(pipeline.Stream) pipeline.Stream
	}); ok {
		resp.Stream = w.wrap(resp.Stream)
	}
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	sk := &sink{s: s, x: x, req: req, stream: resp.Stream, cancel: cancel, watch: watch, form: form,
		writeTimeout: x.rt.Config.Server.WriteTimeout.D()}
	x.stream, x.later = true, true
	activeStreams.Inc()
	defer func() {
		if sk.handed {
			return
		}
		if r := recover(); r != nil {
			// A panic before the stream was handed over: nothing was
			// written, so the request is answered 500 (recoverRequest).
			sk.release()
			sk.cancel()
			x.later = false
			panic(r)
		}
	}()
	switch {
	case sk.prefetch():
		// The whole stream is here (a cache replay): fasthttp writes it,
		// sized for an HTTP/1.0 client, which knows no chunked framing.
		size := -1
		if !ctx.Request.Header.IsHTTP11() {
			size = len(sk.buf)
		}
		if len(sk.buf) > unreadBytes {
			boundWrite(ctx, x)
			sk.conn = ctx.Conn()
		}
		sk.chunked = size < 0
		ctx.SetBodyStream(sk, size)
	case ctx.Request.Header.IsHTTP11() && req.Lookahead.Complete():
		// The rest of the upstream's stream is here too (a short answer
		// sent in one burst): nothing in it waits for the network, so
		// fasthttp writes it, content first, and the stream needs no
		// goroutine of its own (the hand-over would cost more than the
		// whole stream).
		boundWrite(ctx, x)
		sk.conn = ctx.Conn()
		sk.chunked = true
		ctx.SetBodyStream(sk, -1)
	case !s.hijackStream(ctx, sk):
		ctx.SetBodyStream(sk, -1)
	}
	sk.handed = true
}

// unreadBytes is how much of an answer fasthttp may write without a
// deadline: a client's socket buffers take that much whole, whether it
// reads or not, so the write never waits for it.
const unreadBytes = 64 << 10

// boundWrite bounds the time fasthttp may take to write ctx's answer
// (server.write_timeout, as each write of a stream on a connection of its
// own is bounded; a stream's WriteTo moves the deadline before each of its
// writes): a client that stops reading a large answer, but keeps its
// connection, loses the connection instead of holding the request's
// goroutine and buffers for as long as it likes. fasthttp clears a
// deadline the handler set once the answer is written, and flushes the
// answer's end first: it is set (to none) without a write_timeout too, or
// fasthttp would hold a stream's last chunk back while a request the client
// pipelined behind it waits.
func boundWrite(ctx *fasthttp.RequestCtx, x *exchange) {
	var at time.Time
	if wt := x.rt.Config.Server.WriteTimeout.D(); wt > 0 {
		at = time.Now().Add(wt)
	}
	_ = ctx.SetWriteDeadline(at)
}

// setMetaHeaders sets the headers the layers of a request reported in m
// (a chat request's, or a pass-through request's limits: the tenant's own
// x-ratelimit-*) on its answer, error or not.
func setMetaHeaders(ctx *fasthttp.RequestCtx, m *pipeline.Meta) {
	m.Each(func(key, value string) { ctx.Response.Header.Set(key, value) })
}

// bodyReadError is the answer to a request body that could not be read to
// its end: 408 when the client was too slow (server.read_timeout), 413 when
// a chunked body grew over the server's limit, as the same faults of a body
// fasthttp reads whole are answered (readError), else 400.
func bodyReadError(err error, max int) error {
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &timeout) && timeout.Timeout():
		return pipeline.Invalid(fasthttp.StatusRequestTimeout, pipeline.CodeRequestTimeout, "The request body could not be read in time.")
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return tooLarge(max)
	}
	return pipeline.BadRequest("", "could not read the request body")
}

// readBody copies the request body (the pipeline outlives the handler),
// refusing bodies over max with 413.
func readBody(ctx *fasthttp.RequestCtx, max int) ([]byte, error) {
	cl := ctx.Request.Header.ContentLength()
	if cl > max {
		return nil, tooLarge(max) // the handler drops a moderate excess (discardUnread)
	}
	if ctx.Request.IsBodyStream() {
		if cl >= 0 { // known size: one exact allocation
			b := make([]byte, cl)
			if _, err := io.ReadFull(ctx.RequestBodyStream(), b); err != nil {
				return nil, bodyReadError(err, max)
			}
			return b, nil
		}
		b, err := io.ReadAll(io.LimitReader(ctx.RequestBodyStream(), int64(max)+1))
		if err != nil {
			return nil, bodyReadError(err, max)
		}
		if len(b) > max {
			return nil, tooLarge(max)
		}
		return b, nil
	}
	b := ctx.Request.Body()
	if len(b) > max {
		return nil, tooLarge(max)
	}
	return append([]byte(nil), b...), nil
}

func tooLarge(max int) error {
	return pipeline.TooLarge("The request body exceeds the limit of %d bytes.", max)
}

// sink writes a Stream to the client as SSE. It is the response's body
// stream: fasthttp calls WriteTo in the connection's goroutine after the
// handler returned, and frames every Write as one flushed HTTP chunk, with
// no pipe and no extra goroutine. Each event is written as it arrives; the
// Write (the flush) waits only while the upstream's next event is already
// buffered (Request.Lookahead), so a burst leaves in one chunk and spaced
// events each leave at once. The sink uses only its own copies. It holds
// an event buffer (from sinkBufs) only while it has bytes not yet written:
// a stream waiting for its upstream's next event holds none. Close (called
// by fasthttp when the body is done or the connection failed) ends the
// request exactly once.
type sink struct {
	s      *Server
	x      *exchange // finished by finish
	handed bool      // the handler gave the stream to its writer (a panic before is the handler's)
	// writeTimeout bounds each write to the client (server.write_timeout):
	// a client that stops reading ends the stream as one that left.
	writeTimeout time.Duration
	// conn is the client's connection when fasthttp writes the stream
	// whole (WriteTo), for each write's deadline; nil otherwise.
	conn net.Conn
	// out is fasthttp's buffered writer under WriteTo's writer, when
	// found (bufferedWriterOf), from the end of WriteTo until Close: the
	// body's end that fasthttp writes after WriteTo (the last chunk) is
	// flushed there, so that the request's finish sees the write fail.
	// held is the byte count of the bursts written to out but not
	// flushed (the last, and those buffered before it: bufferChunk),
	// counted once that end is out, as a stream on its own connection
	// counts its last write, which carries the last chunk.
	out  *bufio.Writer
	held int
	// chunked is set when fasthttp writes the stream whole as a chunked
	// body: a burst nothing after which waits for the network is then
	// buffered, not flushed (WriteTo).
	chunked bool
	req     *pipeline.Request
	stream  pipeline.Stream
	cancel  context.CancelFunc
	watch   peerWatch // of the client connection, until release
	form    outputForm

	buf      []byte  // the events not yet written; nil while bufp is
	bufp     *[]byte // buf's holder in sinkBufs while held (see hold and drop)
	pending  []byte  // Read's unread part of buf
	ended    bool    // the last event was produced
	finished bool
	written  int
	ttfb     time.Duration
	usage    gjson.Result
	failure  error

	// For a stream on a connection of its own (hijackStream, serve): the
	// response head until the first write, and the vectors of one write.
	head     []byte
	identity bool // an HTTP/1.0 client's: no chunked framing, the body ends with the connection
	closed   bool // the final chunk was written
	vec      [5][]byte
	bufs     net.Buffers
	w        connWriter
	size     []byte
	sizeArr  [18]byte
}

var (
	_ fasthttp.BodyWriterTo = (*sink)(nil)
	_ io.Closer             = (*sink)(nil)
)

// SupportsBodyWriteTo tells fasthttp that WriteTo replaces Read.
func (k *sink) SupportsBodyWriteTo() bool { return true }

// WriteTo writes every event to w: one Write for each event, or for each
// burst of events that were already buffered upstream together. fasthttp
// calls it (a stream it writes whole, chatOut), outside the handler's
// recovery: a layer that panics in it ends the stream here (panicked).
func (k *sink) WriteTo(w io.Writer) (n int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = k.panicked(r)
		}
	}()
	out := bufferedWriterOf(w)
	for {
		b := k.burst()
		if len(b) == 0 {
			break // ended with nothing more to write
		}
		if k.conn != nil && k.writeTimeout > 0 {
			// Each write is bounded, as on a connection of the stream's
			// own; the time the layers take between writes (the end's
			// drain, a cache's store) is not counted against the client.
			_ = k.conn.SetWriteDeadline(time.Now().Add(k.writeTimeout))
		}
		if out != nil && k.chunked && (k.ended || k.req.Lookahead.AllHere()) {
			// Nothing after this burst waits for the network (it ends the
			// stream, or the rest is here and the end's work waits on
			// nothing): it joins fasthttp's buffer unflushed, and leaves
			// with the body's end, which Close flushes (flushEnd).
			if err := k.bufferChunk(out, b); err != nil {
				k.gone()
				return n, err
			}
			n += int64(len(b))
			k.held += len(b) // counted with the body's end (Close)
			k.drop()
			continue
		}
		m, err := w.Write(b)
		n += int64(m)
		if err != nil {
			k.gone()
			return n, err
		}
		if k.ended && out != nil {
			k.held += m // counted with the body's end (Close)
		} else {
			k.wrote(m)
		}
		k.drop() // all written; the next event takes a buffer again
	}
	if out == nil {
		k.finish()
		return n, nil
	}
	// fasthttp writes the body's end (the last chunk) after this returns
	// and flushes it after Close: finishing here would log a client that
	// left before it as served whole. Close flushes it and finishes.
	k.out = out
	return n, nil
}

// bufferChunk writes b to out as one chunk of a chunked body, as fasthttp
// frames a Write of WriteTo's writer, without flushing it (out may still
// write when its buffer fills).
func (k *sink) bufferChunk(out *bufio.Writer, b []byte) error {
	k.size = strconv.AppendInt(k.sizeArr[:0], int64(len(b)), 16)
	k.size = append(k.size, '\r', '\n')
	_, _ = out.Write(k.size)
	_, _ = out.Write(b)
	_, err := out.Write(crlf)
	return err // bufio's error is sticky: the last Write reports any
}

// flushEnd flushes what fasthttp wrote after WriteTo (the body's end),
// under the write deadline of every write, and ends the stream as one
// whose client left when that fails, as a stream on its own connection
// whose last write fails. A flush that fails leaves the error in the
// writer: fasthttp's own flush then fails too and closes the connection.
func (k *sink) flushEnd() {
	out := k.out
	k.out = nil
	if k.conn != nil && k.writeTimeout > 0 {
		_ = k.conn.SetWriteDeadline(time.Now().Add(k.writeTimeout))
	}
	if err := out.Flush(); err != nil {
		k.gone()
		return
	}
	if k.held > 0 {
		k.wrote(k.held)
	}
}

// burst returns the bytes of the next write: the next event, with the
// events after it that were already buffered upstream together (up to
// maxHeldBytes); empty once the stream ended with nothing more to write.
// After the first write, a burst that carries the upstream's whole rest,
// the body's end included, takes the stream's end too ([DONE], after the
// end's work) when none of that work may wait on the network (more): one
// write, not a last one for [DONE] alone. The first write never waits for
// the end, except where nothing waits on the network at all: a burst
// WriteTo buffered (bufferChunk) counts as a write here.
func (k *sink) burst() []byte {
	b := k.buf // events prefetched and not written yet, if any
	for !k.ended && (len(b) == 0 || (len(b) < maxHeldBytes && k.more())) {
		b = k.event() // nothing to write yet, or the next event is already here: one write for both
	}
	return b
}

// more reports whether the stream's next event can be taken without
// waiting for the network (burst): the upstream's next event is here, or,
// after the first write, the whole rest of the stream is and no work at
// its end may wait on the network (Lookahead.AllHere: a layer's, or the
// form's, which runChat marks).
func (k *sink) more() bool {
	return k.req.Lookahead.Buffered() || (k.written > 0 || k.held > 0) && k.req.Lookahead.AllHere()
}

// endWaiter is a form whose end may wait on the network.
type endWaiter interface {
	endWaits() bool
}

// prefetch takes the events that are already here without waiting (the
// first ones, which the fallback layer read to choose the upstream, and
// those buffered behind them, up to maxHeldBytes), and reports whether
// they were the whole stream (a cache replay: an upstream's [DONE] is never
// counted as here): then fasthttp writes it, and the stream needs no
// goroutine of its own.
func (k *sink) prefetch() bool {
	for !k.ended && len(k.buf) < maxHeldBytes && k.req.Lookahead.Buffered() {
		k.event()
	}
	// A client that left meanwhile gets no clean end: its connection is
	// closed after the stream, as on the stream's own goroutine.
	return k.ended && !errors.Is(k.failure, pipeline.ErrClientGone)
}

// Read is the plain io.Reader form of WriteTo, for any caller that reads
// the body instead.
func (k *sink) Read(p []byte) (int, error) {
	if k.pending == nil && len(k.buf) > 0 {
		k.pending = k.buf // prefetched, not read yet
	}
	for len(k.pending) == 0 {
		k.drop() // pending, a view of buf, was all read
		if k.ended {
			k.finish()
			return 0, io.EOF
		}
		k.pending = k.event()
	}
	n := copy(p, k.pending)
	k.pending = k.pending[n:]
	k.wrote(n)
	return n, nil
}

// Close ends the request if WriteTo did not (the connection failed first).
// fasthttp calls it outside any recovery: a layer's Close that panics ends
// the stream here (panicked), never the process.
func (k *sink) Close() error {
	defer func() {
		if r := recover(); r != nil {
			_ = k.panicked(r)
		}
	}()
	if k.out != nil {
		k.flushEnd()
	}
	if !k.ended && k.failure == nil {
		k.gone()
	}
	k.finish()
	return nil
}

func (k *sink) wrote(n int) {
	if k.ttfb == 0 {
		k.ttfb = time.Since(k.req.Start)
	}
	k.written += n
}

// panicked ends a stream fasthttp writes after a layer panicked in it, as
// recoverStream ends one on its own goroutine: the panic is logged and
// counted, the upstream side closed (a Close that panics is not called
// again) and the request finished as a 500. The error it returns makes
// fasthttp close the connection: the client sees the stream cut, never a
// hang.
func (k *sink) panicked(r any) error {
	k.s.logPanic(r, k.x)
	err := pipeline.Internal(fmt.Errorf("proxy: panic: %v", r), "internal error")
	k.failure, k.ended = err, true
	func() {
		defer func() { _ = recover() }() // the layers' Close may be what panicked
		k.release()
	}()
	k.stream = nil // released, or its Close panicked: never called again
	k.cancel()
	k.finish()
	return err
}

// gone records that the client went away.
func (k *sink) gone() {
	k.failure, k.ended = pipeline.ErrClientGone, true
	k.release()
}

// event appends the next SSE event to buf and returns buf (nil for nothing
// to write). After the stream ends it appends [DONE] or the error event and
// sets ended.
func (k *sink) event() []byte {
	chunk, err := k.stream.Next()
	if err == nil {
		return k.chunk(chunk)
	}
	return k.end(err)
}

// chunk appends the event for one chunk. It and end are functions of their
// own, so that their locals are not on the stack while event waits for the
// next chunk: the stream's goroutine keeps its stack as long as the stream
// lasts, and Go's garbage collector halves it only when it is at most a
// quarter used.
//
//go:noinline
func (k *sink) chunk(chunk []byte) []byte {
	k.hold()
	if len(chunk) > 0 && chunk[0] == ':' {
		if p, ok := k.form.(pulser); ok {
			k.buf = p.pulse(k.buf)
		}
		k.buf = sse.AppendComment(k.buf, bytes.TrimPrefix(chunk[1:], []byte(" ")))
		return k.buf
	}
	if u := wire.ChunkUsage(chunk); u.IsObject() {
		u.Raw = strings.Clone(u.Raw) // a view of chunk, which the next Next reuses
		k.usage = u
	}
	k.buf = k.form.chunk(k.buf, chunk)
	return k.buf
}

// end appends what ends the stream after err (io.EOF: the end it had).
//
//go:noinline
func (k *sink) end(err error) []byte {
	k.ended = true
	if err != io.EOF { // an UpstreamError may wrap io.EOF: that is a cut, not an end
		k.failure = err
	}
	k.release()
	if k.failure != nil && errors.Is(k.failure, context.Canceled) && k.s.base.Err() != nil {
		// The shutdown grace period ended: tell the client, never end quietly.
		k.failure = errShuttingDown
	}
	switch {
	case k.failure == nil:
		k.hold()
		k.buf = k.form.end(k.buf)
		return k.buf
	case errors.Is(k.failure, pipeline.ErrClientGone) || errors.Is(k.failure, context.Canceled):
		k.failure = pipeline.ErrClientGone
		return nil
	default:
		k.s.log.Warn().Str("request_id", k.req.ID).AnErr("cause", k.failure).Msg("stream ended with an error")
		k.hold()
		k.buf = k.form.fail(k.buf, k.failure)
		return k.buf
	}
}

// release stops watching the client and closes the upstream side, once:
// Close before cancel, since a cancel fires the upstream stream's
// AfterFunc, which must never touch a connection already back in the pool.
// fasthttp calls every method that releases in the connection's goroutine,
// before it closes the connection, as unwatch requires. A Close that
// panics is never called again (the recovery releases too).
func (k *sink) release() {
	st := k.stream
	if st == nil {
		return
	}
	k.stream = nil
	k.s.peers.unwatch(k.watch)
	pipeline.CloseStream(st, k.failure)
	k.cancel()
}

// finish records the stream's outcome and ends the request (Server.finish),
// once.
func (k *sink) finish() {
	if k.finished {
		return
	}
	k.release() // before finished: a layer's Close that panics leaves the finish to panicked
	k.finished = true
	x := k.x
	x.status = fasthttp.StatusOK
	switch {
	case errors.Is(k.failure, pipeline.ErrClientGone):
		x.status = statusClientClosed
		if l, ok := k.form.(leaver); ok {
			l.left() // nothing is written: no one reads any more
		}
	case k.failure != nil:
		x.status, x.cause = mapError(k.failure).logStatus, k.failure
	}
	x.ttfb, x.bytes = k.ttfb, k.written
	x.usage, x.hasUsage = wire.ParseChatUsage(k.usage)
	if !x.hasUsage {
		x.usage, x.hasUsage = k.req.Usage.Total()
	}
	k.pending = nil
	k.drop()
	k.s.finish(x)
}

// hold gives the sink an event buffer, if it has none, for the bytes it is
// about to append.
func (k *sink) hold() {
	if k.bufp == nil {
		k.bufp = sinkBufs.Get().(*[]byte)
		k.buf = (*k.bufp)[:0]
	}
}

// drop returns the event buffer, whose bytes were all written (or will
// never be), to sinkBufs; one that grew past maxPooledSinkBuf is left to
// the collector.
func (k *sink) drop() {
	if k.bufp == nil {
		return
	}
	if cap(k.buf) <= maxPooledSinkBuf {
		*k.bufp = k.buf[:0]
		sinkBufs.Put(k.bufp)
	}
	k.buf, k.bufp = nil, nil
}

// sinkBufs holds the event buffers of the sinks that have nothing left to
// write, between their events and between streams.
var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledSinkBuf = 64 << 10

// maxHeldBytes bounds what the sink holds for one write: an upstream that
// keeps its next event buffered (a long answer arriving faster than it is
// relayed) still reaches the client in writes of about this size, not at
// its end.
const maxHeldBytes = 16 << 10

func truncateBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// errShuttingDown ends the requests still running when the shutdown grace
// period ends.
var errShuttingDown = pipeline.Unavailable(pipeline.CodeServerShuttingDown, 0, nil, "the gateway is shutting down; retry the request")
