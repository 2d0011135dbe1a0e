package proxy

import (
	"bufio"
	"io"
	"reflect"
	"sync"
	"unsafe"
)

// bufferedWriterOf returns the connection's buffered writer that w, the
// writer fasthttp hands a response body's WriteTo, writes through, or nil.
// fasthttp writes a body's end (a chunked body's last chunk) after WriteTo
// returns and flushes it after the body's Close, and tells the body nothing
// of that write: a client gone by then would be logged as served whole.
// The sink flushes the end itself in Close, through this writer, to see
// the write fail. fasthttp's body writers (chunkedBodyWriter,
// fixedSizeBodyWriter) are unexported; the writer is their field "w" of
// type *bufio.Writer, found by name and type once per writer type. Should a
// fasthttp version lay them out otherwise, this returns nil and the sink
// finishes in WriteTo, as before (TestCompleteStreamEndWriteFails fails
// then).
func bufferedWriterOf(w io.Writer) *bufio.Writer {
	if w == nil {
		return nil
	}
	t := reflect.TypeOf(w)
	idx, ok := writerFields.Load(t)
	if !ok {
		_, i, found := namedField(t, "w", bufioWriterType)
		if !found {
			i = -1
		}
		idx, _ = writerFields.LoadOrStore(t, i)
	}
	i := idx.(int)
	v := reflect.ValueOf(w)
	if i < 0 || v.IsNil() {
		return nil
	}
	return *(**bufio.Writer)(unsafe.Pointer(v.Elem().Field(i).UnsafeAddr()))
}

// writerFields maps a body writer's type to the index of its buffered
// writer field, -1 for a type without one.
var writerFields sync.Map

var bufioWriterType = reflect.TypeFor[*bufio.Writer]()
