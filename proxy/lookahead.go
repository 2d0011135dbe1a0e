package proxy

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"sync"
	"unsafe"

	"github.com/llmgw/gateway/sse"
)

// bodyBufio returns the bufio.Reader fasthttp reads a streamed response
// body from (its connection's reader), or nil. fasthttp hands out the body
// as an io.Reader that returns at most one HTTP chunk per Read, and offers
// no way to ask whether more of the body is already in memory; the stream
// writer needs exactly that to coalesce a burst of events into one flush.
// The reader is found through the two unexported fields that hold it
// (clientStreamBody.reader, requestStream.reader), checked once by name and
// type: should a fasthttp version lay them out otherwise, this returns nil
// and every event is flushed on its own, as before
// (TestStreamBurstCoalesces fails then). Read only from the goroutine that
// reads the body, while it is open.
func bodyBufio(body io.Reader) *bufio.Reader {
	if body == nil {
		return nil
	}
	bodyFields.once.Do(func() { bodyFields.find(body) })
	f := &bodyFields
	if !f.ok || reflect.TypeOf(body) != f.outer {
		return nil
	}
	field := reflect.ValueOf(body).Elem().Field(f.outerIdx)
	rs := *(*io.Reader)(unsafe.Pointer(field.UnsafeAddr()))
	if rs == nil || reflect.TypeOf(rs) != f.inner {
		return nil
	}
	br := reflect.ValueOf(rs).Elem().Field(f.innerIdx)
	return *(**bufio.Reader)(unsafe.Pointer(br.UnsafeAddr()))
}

// bodyFields is where bodyBufio finds the reader, learnt from the first
// body.
var bodyFields fieldPath

type fieldPath struct {
	once               sync.Once
	ok                 bool
	outer, inner       reflect.Type
	outerIdx, innerIdx int
}

var (
	readerType      = reflect.TypeFor[io.Reader]()
	bufioReaderType = reflect.TypeFor[*bufio.Reader]()
)

// find learns the field path from body: a pointer to a struct whose field
// "reader" is an io.Reader holding a pointer to a struct whose field
// "reader" is a *bufio.Reader.
func (f *fieldPath) find(body io.Reader) {
	var ok bool
	if f.outer, f.outerIdx, ok = readerField(reflect.TypeOf(body), readerType); !ok {
		return
	}
	field := reflect.ValueOf(body).Elem().Field(f.outerIdx)
	rs := *(*io.Reader)(unsafe.Pointer(field.UnsafeAddr()))
	if rs == nil {
		return
	}
	f.inner, f.innerIdx, f.ok = readerField(reflect.TypeOf(rs), bufioReaderType)
}

// readerField returns t and the index of its field "reader" of type want,
// when t is a pointer to a struct that has one.
func readerField(t, want reflect.Type) (reflect.Type, int, bool) {
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, 0, false
	}
	sf, ok := t.Elem().FieldByName("reader")
	if !ok || sf.Type != want || len(sf.Index) != 1 {
		return nil, 0, false
	}
	return t, sf.Index[0], true
}

// Buffered reports whether the stream's next Next will return without
// reading the network, so that the writer may hold its flush: the first
// event buffered (in the SSE reader or in the connection's reader) must be
// a JSON data event, or [DONE] with the end of the body buffered behind it
// (Next then returns the end at once). A comment (": keep-alive"), an
// empty data line or a [DONE] whose body goes on say false: Next would
// pass over it and block, with the held bytes unsent. An Anthropic stream
// says false (its decoder passes over ping and block-stop events), and so
// does a stream busy in Next or Close: it never blocks. Layers that may
// take chunks without writing anything (the tool loop, prompted tool
// calls, response guardrails) give their own upstream calls no Lookahead.
func (s *upstreamStream) Buffered() bool {
	if s.msgs != nil || !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	if s.closed || s.done {
		return false
	}
	ahead := s.rd.Buffered()
	partial := sse.StartsData(ahead)
	if len(ahead) > 0 && !partial && !sse.FirstIsDone(ahead) {
		return sse.FirstIsData(ahead) // the reader's own bytes come first
	}
	var raw []byte
	if s.br != nil {
		raw, _ = s.br.Peek(s.br.Buffered()) // only what is buffered: no read
	}
	switch {
	case partial:
		// A chat chunk begun in the reader's buffer (a burst larger than
		// it): Next reads the rest without the network when the
		// connection's buffer holds the event's end.
		return sse.HasEvent(raw)
	case len(ahead) > 0: // [DONE], complete in the reader's buffer
		return chunkedEnd(raw)
	case sse.FirstIsDone(raw):
		return chunkedEnd(raw)
	}
	return sse.FirstIsData(raw)
}

// chunkedEnd reports whether raw, the buffered bytes of a chunked body
// from where its reader stopped, hold the body's last chunk (one without
// trailers): after [DONE], the body ends without reading the network. A
// false true costs a held write until the upstream sends more, never a
// lost byte.
func chunkedEnd(raw []byte) bool {
	return bytes.HasPrefix(raw, lastChunk) || bytes.Contains(raw, lfLastChunk)
}

var lfLastChunk = []byte("\n0\r\n\r\n")
