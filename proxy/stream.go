package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/anthropic"
	"github.com/llmgw/gateway/internal/lazyctx"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wire"
)

var errorKey = []byte(`"error"`)

// sseReaders holds the SSE readers of closed upstream streams, with their
// buffers, for the next streams; one that grew past maxPooledReader (a
// long event) is left to the collector, so that the next stream, which
// holds its reader's buffers while it waits, does not hold that size.
var sseReaders = sync.Pool{New: func() any { return sse.NewReader(nil, maxEventBytes) }}

const maxPooledReader = 8 << 10

// upstreamStream reads an upstream chat stream event by event. Each chunk is
// checked (one JSON object), given the client's model name, and returned in
// a buffer reused by the next call. It owns the fasthttp response and
// releases it in Close.
type upstreamStream struct {
	ctx      context.Context
	pc       *providerClient
	resp     *fasthttp.Response
	conn     *trackedConn        // nil when the connection could not be found
	rd       *sse.Reader         // from sseReaders; back there in Close unless lent
	body     bodyReader          // the connection's reader under rd, for Buffered; zero if unknown
	look     *pipeline.Lookahead // reports Buffered to the client's writer while open; may be nil
	model    string
	deadline time.Time
	idle     time.Duration
	armed    time.Time // the read deadline last set by armDeadline
	buf      []byte
	fix      []byte                   // fillFinish's output (never a view of rd's), reused by the next chunk
	nullFix  []byte                   // nullFinishes' output when it copies, reused by the next chunk
	idFix    []byte                   // sameID's output, reused by the next chunk
	tsFix    []byte                   // sameCreated's output, reused by the next chunk
	head     []byte                   // the last chunk up to the end of its model string (rename); empty when not kept
	headArr  [128]byte                // head's first backing
	at       int                      // where the model string starts in head
	headTS   int64                    // the stream's created when head was kept (sameCreated)
	keep     bool                     // the model in head is the client's already
	msgs     *anthropic.StreamDecoder // kind anthropic: translates Messages events; nil for chat streams
	msgMap   pipeline.MessageMap      // the request's, for an error event's param
	pairs    surrogates               // surrogate pairs split between chunks, put back together
	done     bool                     // [DONE] (or message_stop) seen
	fin      finishes                 // the choices ended so far, for a finish the upstream never sends
	held     []byte                   // a chunk due before the next read; nil if none
	usage    [2][]byte                // copies of usage chunks held back while a choice is open, in turn
	usageAt  int                      // usage[usageAt] is held (hasUsage)
	hasUsage bool
	failed   error // the failure that follows the held usage chunk, returned from then on
	clean    bool  // and the body ended right after it: the connection may be pooled
	dueOut   bool  // ended returned the finishes due made (Buffered)

	mu        sync.Mutex // held by Next while reading; Close takes it to release
	closed    bool
	lent      bool        // Next's last chunk, maybe a view of rd's, may still be read: Close keeps rd from the pool
	released  atomic.Bool // set once Close has started releasing
	stopAfter func() bool
}

// newUpstreamStream reads resp's body, which conn (nil if unknown) carries.
func newUpstreamStream(ctx context.Context, pc *providerClient, resp *fasthttp.Response, conn *trackedConn, model string, deadline time.Time, look *pipeline.Lookahead) *upstreamStream {
	if conn == nil {
		conn = pc.conns.lookup(resp.LocalAddr())
	}
	s := &upstreamStream{
		ctx: ctx, pc: pc, resp: resp, model: model, deadline: deadline,
		idle: pc.cfg.StreamIdleTimeout.D(),
		conn: conn,
		rd:   sseReaders.Get().(*sse.Reader),
	}
	s.rd.Reset(resp.BodyStream())
	s.rd.Watch(s) // any bytes, a keep-alive comment too, restart the idle timeout
	if look != nil {
		s.body, s.look = bodyReaderOf(resp.BodyStream()), look
		look.Set(s)
	}
	if s.conn != nil {
		// fasthttp's first-byte deadline would otherwise end long streams.
		_ = s.conn.SetReadDeadline(time.Time{})
		s.stopAfter = lazyctx.AfterFunc(ctx, func() { _ = s.conn.SetReadDeadline(past) })
	}
	return s
}

// Next returns the next chunk, io.EOF after [DONE], or an
// *pipeline.UpstreamError (Cut, Idle, Malformed, Status for an upstream error
// event) or the context's error. An event whose data is empty ("data:" and
// nothing else) is skipped, as an SSE client skips it: some providers send
// one as a keep-alive. For an anthropic provider, msgs turns each event
// into zero or more chunks, and message_stop ends the stream as [DONE] does.
func (s *upstreamStream) Next() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	chunk, err := s.next()
	s.lent = err == nil
	return chunk, err
}

// next is Next under s.mu.
func (s *upstreamStream) next() ([]byte, error) {
	if s.closed {
		return nil, io.ErrClosedPipe
	}
	if s.held != nil {
		chunk := s.held
		s.held = nil
		return chunk, nil
	}
	if s.failed != nil {
		return nil, s.failed
	}
	if s.done {
		if s.hasUsage {
			s.hasUsage = false
			return s.usage[s.usageAt], nil
		}
		return nil, io.EOF
	}
	chunk, err := s.read()
	if err != nil && err != io.EOF && s.ctx.Err() == nil {
		// buf (rename's) holds nothing unread: the last chunk was returned.
		if s.buf = s.fin.dueBeforeFailure(s.buf[:0], s.model); len(s.buf) > 0 {
			// The finishes the upstream sent go out before its failure (and
			// the usage held after them), as they did when they went out
			// as they came.
			s.failed = err
			if s.hasUsage {
				s.hasUsage, s.held = false, s.usage[s.usageAt]
			}
			return s.buf, nil
		}
	}
	if err != nil && err != io.EOF && s.hasUsage {
		// The usage the upstream sent goes out before its failure, as it
		// did before it was held: the meter charges what it says.
		s.hasUsage, s.failed = false, err
		return s.usage[s.usageAt], nil
	}
	return chunk, err
}

// read is next past what is held: the next chunk the upstream's events
// give, or the stream's end.
func (s *upstreamStream) read() ([]byte, error) {
	for {
		if s.msgs != nil {
			if chunk, ok := s.msgs.Pop(); ok {
				return chunk, nil
			}
			if s.msgs.Done() {
				s.done = true
				s.drain()
				return nil, io.EOF
			}
		}
		if err := s.ctx.Err(); err != nil {
			return nil, err
		}
		s.armDeadline()
		ev, err := s.rd.Next()
		if err != nil {
			if s.msgs != nil && s.ctx.Err() == nil && s.msgs.EndStopped() {
				continue // cut past a stop sequence the gateway applied: the answer ended there
			}
			if err == io.EOF && s.msgs == nil && s.ctx.Err() == nil && s.rd.Stray() == nil && s.fin.complete() {
				// The body ended without [DONE] after the whole answer
				// (every choice finished): an end, as the same answer's
				// JSON is whole, not a cut. A usage chunk alone does not
				// end it (some upstreams send one after every piece).
				// The connection is not pooled: its state is not known.
				s.done = true
				return s.ended()
			}
			return nil, s.readError(err)
		}
		if s.msgs != nil {
			if err := s.msgs.Feed(ev.Data); err != nil {
				return nil, err
			}
			continue
		}
		chunk, skip, err := s.chunk(ev)
		if skip {
			continue
		}
		return chunk, err
	}
}

// choiceless evens out a data event with no choice in it (see saw none,
// or dropStale took out every one): a usage chunk whose choices are
// missing or null gets [] (the npm SDK's stream helper iterates every
// chunk's choices, and a missing or null one throws), an error object not
// under "error" ({"object":"error",...}, an older vLLM form) is the error
// it says, and any other object (a keep-alive {"type":"ping"}) is no chunk
// at all: skipped. So is a chunk of no choice and no usage before the
// first content: Azure's prompt-filter chunk, whose id, object and model
// are "" and created 0 (a client that reads the response's id from the
// first chunk, as the AI SDK does, took that "").
func (s *upstreamStream) choiceless(data []byte) ([]byte, bool, error) {
	usage := wire.ChunkUsage(data).IsObject()
	if gjson.GetBytes(data, "choices").IsArray() {
		// Skipped only before the first content, which no client has had
		// bytes of yet: later, the client's writer may hold its flush for
		// it (Buffered), and a skip would keep those bytes until the
		// upstream's next event.
		return data, !usage && s.fin.seen == 0, nil
	}
	if isErrorObject(unsafe.String(unsafe.SliceData(data), len(data))) { // read only here
		return nil, false, s.pc.errorAnswer(data, errErrorEvent, s.msgMap)
	}
	if !usage {
		return nil, true, nil
	}
	out, err := sjson.SetRawBytes(data, "choices", []byte("[]"))
	if err != nil {
		return nil, true, nil
	}
	return out, false, nil
}

// chunk checks, evens out (fillFinish, flattenParts) and renames one data
// event of an OpenAI stream: skip for an empty one, io.EOF at [DONE]. It is
// a function of its own so that its locals are not on the goroutine's
// stack while next waits for the upstream: a stream's goroutine keeps its
// stack, at its deepest, for the whole stream.
//
//go:noinline
func (s *upstreamStream) chunk(ev sse.Event) (chunk []byte, skip bool, err error) {
	data := ev.Data
	if bytes.IndexByte(data, '\n') >= 0 {
		// Several data lines: JSON allows whitespace between tokens, and
		// the client's SSE framing needs one line.
		for i, c := range data {
			if c == '\n' {
				data[i] = ' '
			}
		}
	}
	if bytes.Contains(data, errorKey) && jsonvalid.Bytes(data) {
		// (Data that is not JSON is refused below: gjson and sjson would
		// read and edit it leniently, into an object that is.)
		e := gjson.GetBytes(data, "error")
		if e.Exists() && e.Type == gjson.Null {
			// "error":null in a normal chunk kills openai-go's stream: drop it.
			data, _ = sjson.DeleteBytes(data, "error")
		} else if e.Exists() {
			return nil, false, s.pc.errorAnswer(data, errErrorEvent, s.msgMap)
		}
	}
	if string(ev.Name) == "error" {
		return nil, false, s.pc.errorAnswer(ev.Data, errErrorEvent, s.msgMap)
	}
	if len(data) == 0 {
		return nil, true, nil
	}
	if sse.IsDone(data) {
		s.done = true
		s.drain()
		chunk, err := s.ended()
		return chunk, false, err
	}
	if data[0] != '{' || !jsonvalid.Bytes(data) {
		return nil, false, s.pc.malformed(errNotChunk)
	}
	if bytes.Contains(data, xGroq) {
		data = groqUsage(data) // before see: a usage chunk's choices are read for it
	}
	ks := keysOf(data)
	none, edit := s.fin.see(data, ks)
	if !none {
		s.fin.nullUsage = bytes.HasSuffix(data, nullUsageTail)
	}
	if len(s.fin.nullAt) > 0 {
		if !edit.odd && edit.finishing&edit.owed == 0 && !s.choiceAhead() {
			// The usual end: a finish chunk of its own, and nothing for any
			// choice in what is already here after it: it goes out as it
			// came, at once. (A choice that comes again after it later is
			// owed its finish again: see.)
			s.fin.owed &^= edit.finishing
		} else {
			// Every finish see followed is owed, and goes out from due.
			var fix []byte
			if data, fix = nullFinishes(s.nullFix, data, s.fin.nullAt); fix != nil {
				s.nullFix = fix
			}
		}
	}
	if ks.empty {
		if fixed, ok := fillFinish(s.fix, data, finishNull); ok {
			s.fix, data = fixed, fixed
		}
	}
	if edit.noRole|edit.dupRole != 0 {
		data = editChoices(data, edit)
	}
	if edit.stale != 0 {
		if s.fin.present&^s.fin.ended == 0 {
			// Every choice has ended: the stale ones go (a chunk left with
			// none is a usage chunk, or one of no choice, relayed as such).
			var empty bool
			if data, empty = dropStale(data, edit.stale); empty {
				none = true
			}
		} else {
			// Another choice goes on: a usage here is not the last, and a
			// chunk of no choice would be taken for it. The finish goes
			// again, after it.
			s.fin.owed |= edit.staleChoices
		}
	}
	if none {
		if data, skip, err = s.choiceless(data); skip || err != nil {
			return nil, skip, err
		}
	}
	data = s.pairs.pair(data)
	data = s.rename(stringArgs(flattenParts(dropNullCalls(data, "delta"), "delta"), "delta"))
	if none && (s.hasUsage || s.fin.open() || s.fin.seen == 0) && wire.ChunkUsage(data).IsObject() {
		// A usage chunk before the first choice or while a choice is open
		// is held to the stream's end, after the content that follows it
		// and the finishes (those the upstream did not send too): the
		// usage chunk is the last, and the clients that keep the last
		// chunk's usage (Python's and Node's helpers) have it. A later one
		// takes its place: the upstream's running total, which the meter
		// keeps too (the buffers take turns, so the one held is never the
		// chunk being written over).
		s.usageAt ^= 1
		s.usage[s.usageAt], s.hasUsage = append(s.usage[s.usageAt][:0], data...), true
		return nil, true, nil
	}
	return data, false, nil
}

// choiceAhead reports whether what the upstream sent after the event just
// read, as far as it is already here (the SSE reader's bytes, then the
// body's the connection's reader holds, up to choiceLook bytes, or to
// [DONE]), holds a choice ("index"), or may: a window that fills before
// [DONE] says yes (a review: a long late chunk whose "index" came last,
// as Azure orders its keys, was past it). Content an upstream sends after
// a finish comes with the finish in one burst, where a finish chunk
// followed by a usage chunk and [DONE], or by nothing yet, is the usual
// end. It never reads the network.
func (s *upstreamStream) choiceAhead() bool {
	var rest [choiceLook]byte
	n := copy(rest[:], s.rd.Buffered())
	if n < len(rest) && s.body.br != nil {
		raw, _ := s.body.br.Peek(s.body.br.Buffered()) // only what is buffered: no read
		s.body.bufferedBody(raw, func(run []byte) bool {
			n += copy(rest[n:], run)
			return n < len(rest)
		})
	}
	ahead := rest[:n]
	if i := bytes.Index(ahead, doneMark); i >= 0 {
		return bytes.Contains(ahead[:i], indexKey)
	}
	return n == len(rest) || bytes.Contains(ahead, indexKey)
}

// choiceLook bounds what choiceAhead looks at: a usage chunk with its
// details, and [DONE].
const choiceLook = 1024

var (
	doneMark = []byte("[DONE]")
	indexKey = []byte(`"index"`)
)

// ended returns what the stream's end gives after its last chunk: the
// finish of every choice the upstream left open (finishes.due), before the
// usage chunk held back for it, then io.EOF.
func (s *upstreamStream) ended() ([]byte, error) {
	// buf (rename's) holds nothing unread: the last chunk was returned.
	if s.buf = s.fin.due(s.buf[:0], s.model); len(s.buf) > 0 {
		s.dueOut = true
		return s.buf, nil // the held usage chunk, then io.EOF, on the next calls
	}
	if s.hasUsage {
		s.hasUsage = false
		return s.usage[s.usageAt], nil
	}
	return nil, io.EOF
}

var (
	xGroq         = []byte(`"x_groq"`)
	nullUsageTail = []byte(`,"usage":null}`) // how OpenAI's chunks end when usage is asked for
)

// errNotChunk is the cause of the failure of a stream event that is not a
// JSON object.
var errNotChunk = errors.New("chunk is not a JSON object")

// errNotStream is the cause of the failure of a stream request answered
// with a body that holds no SSE at all.
var errNotStream = errors.New("proxy: the upstream's stream holds no event, only other text")

// groqUsage gives a chunk whose usage is only in x_groq.usage (Groq's
// streams before stream_options) that usage at the top, where every layer
// reads it: the JSON answer of the same request has it there.
func groqUsage(data []byte) []byte {
	res := gjson.GetManyBytes(data, "usage", "x_groq.usage")
	if res[0].IsObject() || !res[1].IsObject() {
		return data
	}
	if out, err := sjson.SetRawBytes(data, "usage", []byte(res[1].Raw)); err == nil {
		return out
	}
	return data
}

// rename gives data the client's model name, as setModel does, and reuses
// the last chunk's search when data's bytes up to the end of the model
// string are the same: gjson, reading the same bytes, would find the same
// top-level "model" there (modelSpan). Upstreams repeat the id, object,
// created and model at the head of every chunk, so the search runs about
// once per stream.
func (s *upstreamStream) rename(data []byte) []byte {
	if len(s.head) == 0 || s.headTS != s.fin.created || !bytes.HasPrefix(data, s.head) {
		data, idEnd := s.sameID(data)
		data, tsEnd := s.sameCreated(data, idEnd)
		at, end, keep := modelSpan(data, s.model)
		s.at, s.keep = at, keep
		s.head = s.head[:0]
		// Kept only when the value ends with its own delimiter (a string,
		// an object, a list): a number's head ("model":1) is a prefix of
		// another number's ("model":12). An insertion (no model) is not
		// kept either: the next chunk may have one. Nor is a head without
		// the chunk's id in it: the next chunk's id would not be looked at,
		// and one may have to be given to it (a stream without ids pays
		// the search on every chunk).
		// Nor one that does not hold the chunk's created, while the stream
		// has one (a created after the model would not be looked at).
		if end > at && end <= maxModelHead && strings.IndexByte(`"}]`, data[end-1]) >= 0 && idEnd > 0 && idEnd <= at &&
			(s.fin.created <= 0 || tsEnd > 0 && tsEnd <= end) {
			s.head = append(s.headArr[:0], data[:end]...)
			s.headTS = s.fin.created
		}
		if keep {
			return data
		}
		s.buf = spliceModel(s.buf, data, at, end, s.model)
		return s.buf
	}
	if s.keep {
		return data
	}
	s.buf = spliceModel(s.buf, data, s.at, len(s.head), s.model)
	return s.buf
}

// sameID gives data the stream's completion id (the first non-empty one a
// chunk carried, finishes.see) when its own is another, empty or missing:
// OpenAI's chunks all carry the same id, and openai-go's accumulator drops
// every chunk whose id is not the first one's, so an upstream that numbers
// its chunks (Foundry Local), sends a keep-alive chunk of its own id first
// (omlx) or leaves the id out of some chunks gave an empty or partial
// answer; a stream whose first chunk with a choice or usage has none takes
// one of the gateway's.
// idEnd is where the id's value ends in the chunk returned, 0 when it has
// none.
func (s *upstreamStream) sameID(data []byte) (_ []byte, idEnd int) {
	r := gjson.Get(unsafe.String(unsafe.SliceData(data), len(data)), "id") // read only here
	id := s.fin.id()
	if len(id) == 0 && (r.Type != gjson.String || r.Str == "") && (gjson.GetBytes(data, "choices.0").Exists() || wire.ChunkUsage(data).IsObject()) {
		// The first chunk with a choice or usage has no id: the stream
		// takes one of the gateway's, as a tool loop's does, so that every
		// chunk has the same (a later chunk's own is replaced by it). A
		// chunk with neither (Azure's prompt-filter chunk, id "") is left
		// as it is: the id may come with the first choice.
		id = s.fin.setID(wire.GatewayID())
	}
	switch {
	case r.Exists() && r.Index <= 0:
		return data, 0 // not an object
	case len(id) == 0 || r.Type == gjson.String && r.Str == string(id):
		if r.Exists() {
			return data, r.Index + len(r.Raw)
		}
		return data, 0
	case r.Exists():
		s.idFix = append(s.idFix[:0], data[:r.Index]...)
		s.idFix = jsonstring.Append(s.idFix, unsafe.String(unsafe.SliceData(id), len(id))) // read only here
		idEnd = len(s.idFix)
		s.idFix = append(s.idFix, data[r.Index+len(r.Raw):]...)
		return s.idFix, idEnd
	}
	i := firstNonSpace(data)
	if i >= len(data) || data[i] != '{' {
		return data, 0
	}
	s.idFix = append(s.idFix[:0], data[:i+1]...)
	s.idFix = append(s.idFix, `"id":`...)
	s.idFix = jsonstring.Append(s.idFix, unsafe.String(unsafe.SliceData(id), len(id)))
	idEnd = len(s.idFix)
	rest := data[i+1:]
	if j := firstNonSpace(rest); j < len(rest) && rest[j] != '}' {
		s.idFix = append(s.idFix, ',')
	}
	s.idFix = append(s.idFix, rest...)
	return s.idFix, idEnd
}

// sameCreated gives data the stream's created (that of the chunk that gave
// the stream its id, finishes.see) when its own is another or missing, as
// OpenAI's chunks all carry one: an upstream that stamps each chunk with
// its own time (llama.cpp, Ollama), or sends a usage chunk with
// "created":0, had the SDKs keep the last chunk's. Called where rename
// searches (a chunk whose head, which then holds its created, differs from
// the one before), after sameID: idEnd is where the id ends in data (0:
// none), and a missing created goes after it. tsEnd is where the created
// ends in the data returned (0: none).
func (s *upstreamStream) sameCreated(data []byte, idEnd int) (_ []byte, tsEnd int) {
	want := s.fin.created
	if want <= 0 || idEnd <= 0 {
		return data, 0
	}
	r := gjson.Get(unsafe.String(unsafe.SliceData(data), len(data)), "created") // read only here
	var nb [20]byte
	wantRaw := strconv.AppendInt(nb[:0], want, 10)
	if r.Type == gjson.Number && r.Raw == string(wantRaw) {
		return data, r.Index + len(r.Raw)
	}
	at, end := idEnd, idEnd
	if r.Exists() {
		if r.Index <= 0 {
			return data, 0
		}
		at, end = r.Index, r.Index+len(r.Raw)
	}
	s.tsFix = append(s.tsFix[:0], data[:at]...)
	if !r.Exists() {
		s.tsFix = append(s.tsFix, `,"created":`...)
	}
	s.tsFix = append(s.tsFix, wantRaw...)
	tsEnd = len(s.tsFix)
	s.tsFix = append(s.tsFix, data[end:]...)
	return s.tsFix, tsEnd
}

// maxModelHead bounds the head rename keeps: a model that comes after a
// chunk's choices (which differ per chunk) is searched for each time.
const maxModelHead = 512

// armDeadline bounds the next read by the idle timeout and the total
// deadline. It costs a clock read and a poller update, so it is skipped
// when no read will happen: the SSE reader already holds the next data
// event whole (a burst), or the deadline it would set is the one set.
func (s *upstreamStream) armDeadline() {
	if s.conn == nil || sse.FirstHasData(s.rd.Buffered()) {
		return
	}
	s.Active()
}

// Active restarts the idle timeout: the upstream sent bytes (the SSE
// reader calls it, with s.mu held by Next), or a read may block next.
func (s *upstreamStream) Active() {
	if s.conn == nil {
		return
	}
	d := s.deadline
	if s.idle > 0 {
		if t := time.Now().Add(s.idle); t.Before(d) {
			d = t
		}
	}
	if d.Equal(s.armed) || (d.After(s.armed) && d.Sub(s.armed) < s.idle/rearmSlackDiv) {
		// An idle deadline that would move by less than idle/64 stays as
		// set: each move is a poller update, and a burst brings bytes many
		// times a millisecond. The idle timeout may fire that much early.
		return
	}
	s.armed = d
	_ = s.conn.SetReadDeadline(d)
	if s.ctx.Err() != nil {
		// The context's AfterFunc may have set the past deadline just
		// before: keep it, or a cancelled stream waits out the timeout.
		_ = s.conn.SetReadDeadline(past)
	}
}

// rearmSlackDiv sets how far an idle deadline may lag (idle/64: about 1 s
// of a 60 s idle timeout) before Active moves it.
const rearmSlackDiv = 64

func (s *upstreamStream) readError(err error) error {
	if cerr := s.ctx.Err(); cerr != nil {
		return cerr
	}
	if err == io.EOF { // the body ended without [DONE]
		err = io.ErrUnexpectedEOF
	}
	if stray := s.rd.Stray(); stray != nil && err == io.ErrUnexpectedEOF {
		// Not a stream at all, though its content type said so: an error
		// object is the error it says (as a JSON answer's is), anything
		// else (an HTML page) is malformed, not a cut.
		if stray[0] == '{' && jsonvalid.Bytes(stray) && gjson.GetBytes(stray, "error").IsObject() {
			return s.pc.errorAnswer(stray, errErrorAnswer, s.msgMap)
		}
		return s.pc.malformed(errNotStream)
	}
	ue := &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: s.pc.cfg.Name, Err: err}
	var ne net.Error
	switch {
	case errors.Is(err, sse.ErrEventTooLarge):
		// Over a size bound, as a JSON answer over max_response_bytes:
		// upstream_response_too_large, not a malformed answer.
		ue.Kind = pipeline.UpstreamMalformed
	case errors.As(err, &ne) && ne.Timeout():
		ue.Kind = pipeline.UpstreamIdle
		if !time.Now().Add(s.idle / rearmSlackDiv).Before(s.deadline) {
			// Past the total deadline, or as near it as an idle deadline
			// may lag (Active): an idle deadline that stayed a few ms short
			// of the total one fired for it.
			ue.Kind = pipeline.UpstreamTimeout
		}
	}
	return ue
}

// drain reads to the end of the body after [DONE] so the connection can go
// back to the pool; it gives up quickly on a peer that keeps it open.
func (s *upstreamStream) drain() {
	if s.conn != nil {
		_ = s.conn.SetReadDeadline(time.Now().Add(time.Second))
	}
	for {
		if _, err := s.rd.Next(); err != nil {
			s.clean = err == io.EOF
			return
		}
	}
}

// Close releases the upstream request; a stream not read to its end closes
// the connection, which the upstream sees as a cancellation.
func (s *upstreamStream) Close() {
	if s.released.Load() {
		return // the connection may already serve another request
	}
	s.look.Unset(s) // before the reader goes back to the pool
	if s.conn != nil {
		_ = s.conn.SetReadDeadline(past) // unblock a pending Next
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.released.Store(true)
	if !s.lent && s.rd.Retained() <= maxPooledReader {
		// The last Next returned no chunk (the stream's end, an error), so
		// no one reads rd's bytes: a Close from another goroutine (a
		// cancel) right after a chunk leaves rd to the collector instead.
		s.rd.Reset(nil)
		sseReaders.Put(s.rd)
	}
	s.rd = nil
	if s.conn != nil && s.conn.discardAhead() {
		// The upstream sent more than the body (bytes read ahead of the
		// reader are left), or the stream ends before it read them: the
		// connection's state is not known, and it is closed unread.
		s.clean = false
	}
	if s.stopAfter != nil && !s.stopAfter() {
		// The context was cancelled: its AfterFunc ran or is running and may
		// still set an expired deadline. Never pool this connection.
		s.clean = false
	}
	if s.clean {
		if s.conn != nil {
			_ = s.conn.SetReadDeadline(time.Time{})
		}
	} else {
		// A stream that did not end with [DONE] and a clean body end leaves
		// the connection in an unknown state: never pool it.
		s.resp.SetConnectionClose()
	}
	_ = s.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(s.resp)
}
