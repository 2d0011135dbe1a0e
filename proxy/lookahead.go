package proxy

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"strconv"
	"sync"
	"unsafe"

	"github.com/llmgw/gateway/sse"
)

// bodyReader is where a streamed response body comes from: the connection's
// reader, and where the chunked framing stands.
type bodyReader struct {
	br *bufio.Reader
	// left is the body's bytes of the current chunk not read yet (0: the
	// next read starts with a chunk-size line); length is the body's
	// Content-Length, -1 for a chunked body. Both point into fasthttp's
	// body stream, which only the goroutine that reads the body changes.
	left, length *int
}

// bodyReaderOf returns the bodyReader of a fasthttp streamed response body,
// or a zero one. fasthttp hands out the body as an io.Reader that returns
// at most one HTTP chunk per Read, and offers no way to ask whether more
// of the body is already in memory; the stream writer needs exactly that
// to coalesce a burst of events into one flush. The reader and the
// framing's state are found through unexported fields
// (clientStreamBody.reader, then requestStream's reader, chunkLeft and
// contentLength), checked once by name and type: should a fasthttp
// version lay them out otherwise, this returns a zero bodyReader and every
// event is flushed on its own, as before (TestStreamBurstCoalesces fails
// then). Read only from the goroutine that reads the body, while it is
// open.
func bodyReaderOf(body io.Reader) bodyReader {
	if body == nil {
		return bodyReader{}
	}
	bodyFields.once.Do(func() { bodyFields.find(body) })
	f := &bodyFields
	if !f.ok || reflect.TypeOf(body) != f.outer {
		return bodyReader{}
	}
	field := reflect.ValueOf(body).Elem().Field(f.outerIdx)
	rs := *(*io.Reader)(unsafe.Pointer(field.UnsafeAddr()))
	if rs == nil || reflect.TypeOf(rs) != f.inner {
		return bodyReader{}
	}
	v := reflect.ValueOf(rs).Elem()
	return bodyReader{
		br:     *(**bufio.Reader)(unsafe.Pointer(v.Field(f.innerIdx).UnsafeAddr())),
		left:   (*int)(unsafe.Pointer(v.Field(f.leftIdx).UnsafeAddr())),
		length: (*int)(unsafe.Pointer(v.Field(f.lengthIdx).UnsafeAddr())),
	}
}

// bodyFields is where bodyReaderOf finds the reader, learnt from the first
// body.
var bodyFields fieldPath

type fieldPath struct {
	once               sync.Once
	ok                 bool
	outer, inner       reflect.Type
	outerIdx, innerIdx int
	leftIdx, lengthIdx int
}

var (
	readerType      = reflect.TypeFor[io.Reader]()
	bufioReaderType = reflect.TypeFor[*bufio.Reader]()
	intType         = reflect.TypeFor[int]()
)

// find learns the field path from body: a pointer to a struct whose field
// "reader" is an io.Reader holding a pointer to a struct whose field
// "reader" is a *bufio.Reader and whose int fields "chunkLeft" and
// "contentLength" say where its framing stands.
func (f *fieldPath) find(body io.Reader) {
	var ok bool
	if f.outer, f.outerIdx, ok = namedField(reflect.TypeOf(body), "reader", readerType); !ok {
		return
	}
	field := reflect.ValueOf(body).Elem().Field(f.outerIdx)
	rs := *(*io.Reader)(unsafe.Pointer(field.UnsafeAddr()))
	if rs == nil {
		return
	}
	t := reflect.TypeOf(rs)
	var ok1, ok2, ok3 bool
	f.inner, f.innerIdx, ok1 = namedField(t, "reader", bufioReaderType)
	_, f.leftIdx, ok2 = namedField(t, "chunkLeft", intType)
	_, f.lengthIdx, ok3 = namedField(t, "contentLength", intType)
	f.ok = ok1 && ok2 && ok3
}

// namedField returns t and the index of its field name of type want, when
// t is a pointer to a struct that has one.
func namedField(t reflect.Type, name string, want reflect.Type) (reflect.Type, int, bool) {
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, 0, false
	}
	sf, ok := t.Elem().FieldByName(name)
	if !ok || sf.Type != want || len(sf.Index) != 1 {
		return nil, 0, false
	}
	return t, sf.Index[0], true
}

// Buffered reports whether the stream's next Next will return a chunk
// without reading the network, so that the writer may hold its flush: the
// first event buffered (in the SSE reader, then in the body bytes the
// connection's reader holds) must be a JSON data event, whole. A comment
// (": keep-alive"), an empty data line or [DONE] say false: Next would pass
// over it and block, or do the work of the stream's end (a cache's store),
// with the held bytes unsent. (The finish chunk [DONE] makes is the one
// exception: see buffered.) The connection's bytes are read as the body
// reader would read them (bufferedBody): only what it can return without a
// read, framing taken out. An Anthropic stream says false (its decoder
// passes over ping and block-stop events), and so does a stream busy in
// Next or Close: it never blocks. Layers that may take chunks without
// writing anything (the tool loop, prompted tool calls, response
// guardrails) give their own upstream calls no Lookahead.
func (s *upstreamStream) Buffered() bool {
	if s.msgs != nil || !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.done {
		// After the finishes due made at the end, what is left (a usage
		// chunk held, then the end) comes without the network: the
		// finishes, which hold no content, may wait for the end's work
		// and leave with [DONE] in one write.
		return s.dueOut
	}
	ahead := s.rd.Buffered()
	if sse.HasEvent(ahead) || s.body.br == nil {
		return firstIsChunk(ahead) // the reader's own bytes come first
	}
	// The first event is not whole in the reader: it, or its rest, must be
	// in the body the connection's reader holds.
	partial := sse.StartsData(ahead)
	if len(ahead) > 0 && !partial {
		return false
	}
	return s.orAhead(func(raw []byte) bool {
		if partial {
			return s.body.eventEnds(ahead, raw) && s.body.partialIsChunk(ahead, raw)
		}
		return s.body.firstIsData(raw)
	})
}

// orAhead reports whether f says true of the body bytes the connection's
// reader holds (from where the body reader stopped), or else of those
// followed by what the connection read ahead of that reader
// (trackedConn.ahead): a burst larger than the reader's buffer. The join
// is made in a buffer from joinBufs, given back before orAhead returns: a
// stream waiting for its upstream holds none.
func (s *upstreamStream) orAhead(f func(raw []byte) bool) bool {
	raw, _ := s.body.br.Peek(s.body.br.Buffered()) // only what is buffered: no read
	if f(raw) {
		return true
	}
	if s.conn == nil {
		return false
	}
	more := s.conn.ahead()
	if len(more) == 0 {
		return false
	}
	join := joinBufs.Get().(*[]byte)
	*join = append(append((*join)[:0], raw...), more...)
	ok := f(*join)
	putJoin(join)
	return ok
}

// putJoin gives an orAhead buffer back, unless a reader's buffer larger
// than the default made it grow past what the pool keeps.
func putJoin(join *[]byte) {
	if cap(*join) <= maxJoin {
		joinBufs.Put(join)
	}
}

// maxJoin is the largest orAhead buffer joinBufs keeps: a default 4 KiB
// reader's bytes and a full read ahead.
const maxJoin = 4<<10 + maxHeldBytes

// joinBufs holds orAhead's buffers.
var joinBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxJoin); return &b }}

// Complete reports whether the rest of the stream, to its terminator, is
// already in memory, so that its Nexts never wait for the upstream's next
// event: a short answer the upstream sent in one burst. The terminator is
// the [DONE] event, last in what is buffered, or the end of a chunked
// body. (After [DONE] the stream reads the body's end, which an upstream
// may send a moment later, as it does on every stream.) Like Buffered it
// never blocks, and an Anthropic stream or a stream busy in Next or Close
// says false.
func (s *upstreamStream) Complete() bool { return s.inMemory(false) }

// AllHere reports whether the connection's buffered bytes hold the body's
// end (a chunked body's last chunk): the rest of the stream is in memory,
// and no Next waits for the network. Like Buffered it never blocks, and
// an Anthropic stream or a stream busy in Next or Close says false.
func (s *upstreamStream) AllHere() bool { return s.inMemory(true) }

// inMemory is Complete, or with bodyEnd AllHere: whether the rest of the
// stream is in memory to the body's end, or (without bodyEnd) to a [DONE]
// last in what is buffered.
func (s *upstreamStream) inMemory(bodyEnd bool) bool {
	if s.msgs != nil || !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	if s.closed || s.body.br == nil {
		return false
	}
	if s.done {
		return true // read to its end already
	}
	return s.orAhead(func(raw []byte) bool {
		var last tail
		if !bodyEnd {
			last.add(s.rd.Buffered())
		}
		end := s.body.bufferedBody(raw, func(run []byte) bool {
			if !bodyEnd {
				last.add(run)
			}
			return true
		})
		return end || !bodyEnd && sse.EndsWithDone(last.bytes())
	})
}

// tail keeps the last bytes of what is added to it: enough for a [DONE]
// event that runs of a chunked body may split.
type tail struct {
	buf [24]byte
	n   int
}

func (t *tail) add(b []byte) {
	if len(b) >= len(t.buf) {
		t.n = copy(t.buf[:], b[len(b)-len(t.buf):])
		return
	}
	if keep := len(t.buf) - len(b); t.n > keep {
		copy(t.buf[:], t.buf[t.n-keep:t.n])
		t.n = keep
	}
	t.n += copy(t.buf[t.n:], b)
}

func (t *tail) bytes() []byte { return t.buf[:t.n] }

// eventEnds reports whether the body bytes readable from raw without the
// network end the event that tail (the SSE reader's unread bytes) begins.
func (b bodyReader) eventEnds(tail, raw []byte) bool {
	var edge [6]byte // the last bytes before a run, for an end across runs
	carry := edge[:0]
	if len(tail) > 3 {
		tail = tail[len(tail)-3:]
	}
	carry = append(carry, tail...)
	found := false
	b.bufferedBody(raw, func(run []byte) bool {
		n := min(len(run), 3)
		joined := append(carry, run[:n]...)
		if sse.HasEvent(joined) || sse.HasEvent(run) {
			found = true
			return false
		}
		if len(run) >= 3 {
			carry = append(edge[:0], run[len(run)-3:]...)
		} else {
			carry = append(edge[:0], joined[max(0, len(joined)-3):]...)
		}
		return true
	})
	return found
}

// firstIsData reports whether the body bytes readable from raw without
// the network start with a whole data event the stream returns as a chunk
// (firstIsChunk) within one run (an event across chunks says false: a
// write more, never a wait).
func (b bodyReader) firstIsData(raw []byte) bool {
	first := true
	ok := false
	b.bufferedBody(raw, func(run []byte) bool {
		if first {
			first, ok = false, firstIsChunk(run)
		}
		return false
	})
	return ok
}

// firstIsChunk reports whether the first event in b is whole and one the
// stream returns as a chunk: a data line holding a JSON object with
// choices or a usage. Any other object (a keep-alive {"type":"ping"}) is
// passed over (choiceless), and Next would read on, maybe waiting for the
// network while the writer holds its flush. A key on a later data line of
// the event says false: a write more, never a wait.
func firstIsChunk(b []byte) bool {
	v, ok := sse.FirstData(b)
	return ok && chunkLike(v)
}

// chunkLike reports whether v, a data line's value, is a JSON object that
// names choices or a usage.
func chunkLike(v []byte) bool {
	return len(v) > 0 && v[0] == '{' && (bytes.Contains(v, choicesKey) || bytes.Contains(v, usageKey))
}

var (
	choicesKey = []byte(`"choices"`)
	usageKey   = []byte(`"usage"`)
)

// partialIsChunk reports whether the data line that tail (the SSE reader's
// unread bytes, the start of an event) begins names choices or a usage, in
// tail or in the rest of that line readable from raw (a key across the two
// says false: a write more, never a wait).
func (b bodyReader) partialIsChunk(tail, raw []byte) bool {
	if chunkLike(bytes.TrimPrefix(bytes.TrimPrefix(tail, []byte("data:")), []byte(" "))) {
		return true
	}
	found := false
	b.bufferedBody(raw, func(run []byte) bool {
		end := len(run)
		if i := bytes.IndexAny(run, "\r\n"); i >= 0 {
			end = i
		}
		found = bytes.Contains(run[:end], choicesKey) || bytes.Contains(run[:end], usageKey)
		return !found && end == len(run) // on to the next run while the line goes on
	})
	return found
}

// bufferedBody calls run with each run of body bytes that the body reader
// can return from raw (the connection's buffered bytes, from where the
// reader stopped) without reading the network, in order, until run
// returns false. For a chunked body it stops before a chunk whose size
// line, or whose closing CRLF, is not whole in raw: fasthttp reads the
// CRLF in the same read as the chunk's last byte, and would wait for it.
// It reports whether raw holds the body's end, so that reading the body to
// its end never waits for the network: for a chunked body, every chunk
// whole, then the last (empty) chunk and the blank line after it, with no
// trailer; a sized body, or one read to the connection's close, says
// false (how much of it is still to come is not known here).
func (b bodyReader) bufferedBody(raw []byte, run func([]byte) bool) (end bool) {
	if *b.length != -1 { // sized (>= 0) or read to the connection's close (-2): raw is body
		if len(raw) > 0 {
			run(raw)
		}
		return false
	}
	left := *b.left
	for {
		if left > 0 {
			if left > len(raw) { // the chunk goes on past raw: its bytes here only
				if len(raw) > 0 {
					run(raw)
				}
				return false
			}
			if len(raw) < left+2 || raw[left] != '\r' || raw[left+1] != '\n' {
				return false
			}
			if !run(raw[:left]) {
				return false
			}
			raw = raw[left+2:]
		}
		i := bytes.Index(raw, crlf)
		if i <= 0 {
			return false
		}
		size, ok := chunkSize(raw[:i])
		if !ok {
			return false // not a size line
		}
		if size == 0 { // the body's last chunk
			return bytes.HasPrefix(raw[i+2:], crlf)
		}
		raw, left = raw[i+2:], size
	}
}

// chunkSize parses a chunk-size line (hex digits, optional extensions).
// More than 8 digits says false: never looser than fasthttp's parser.
func chunkSize(line []byte) (int, bool) {
	if j := bytes.IndexByte(line, ';'); j >= 0 {
		line = line[:j]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 8 {
		return 0, false
	}
	n, err := strconv.ParseUint(unsafe.String(unsafe.SliceData(line), len(line)), 16, 32)
	return int(n), err == nil
}
