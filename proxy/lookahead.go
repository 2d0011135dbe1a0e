package proxy

import (
	"bufio"
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

// Buffered reports whether the stream's next Next will return a chunk
// without reading the network, so that the writer may hold its flush: the
// first event buffered (in the SSE reader or in the connection's reader)
// must be a JSON data event. A comment (": keep-alive"), an empty data
// line or [DONE] says false: Next would pass over it and block, with the
// held bytes unsent. An Anthropic stream says false (its decoder passes over
// ping and block-stop events), and so does a stream busy in Next or Close:
// it never blocks. Layers that may take chunks without writing anything
// (the tool loop, prompted tool calls, response guardrails) give their own
// upstream calls no Lookahead.
func (s *upstreamStream) Buffered() bool {
	if s.msgs != nil || !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	if s.closed || s.done {
		return false
	}
	ahead := s.rd.Buffered()
	if len(ahead) > 0 && !sse.StartsData(ahead) {
		// The reader's own bytes come first.
		return sse.FirstIsData(ahead)
	}
	if s.br == nil {
		return false
	}
	n := s.br.Buffered()
	if n == 0 {
		return false
	}
	raw, _ := s.br.Peek(n) // n bytes are buffered: no read
	if len(ahead) > 0 {
		// A chat chunk begun in the reader's buffer (a burst larger than
		// it): Next reads the rest without the network when the
		// connection's buffer holds the event's end.
		return sse.HasEvent(raw)
	}
	return sse.FirstIsData(raw)
}
