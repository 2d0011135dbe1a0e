package pipeline

// Response is the result of a chat call: either a whole body or a Stream.
//
// Body is a chat.completion JSON document owned by the receiver. When Stream
// is set, Body is nil and the receiver must Close the stream. A Response is
// used by one goroutine at a time.
type Response struct {
	Body   []byte
	Stream Stream

	usage usageMemo // what Usage found in Body, for the layers after the first reader
}

// Stream yields chat.completion.chunk JSON documents, one per SSE data
// event, in order.
//
// Next returns the next chunk; the slice is valid until the next call to Next
// or Close. It returns io.EOF after the last chunk (the upstream's [DONE]),
// and any other error for an abnormal end. A chunk whose first byte is ':' is
// an SSE comment (a keep-alive) and is written as is. Next is called by one
// goroutine at a time; Close may be called from any goroutine, more than
// once, and unblocks a pending Next.
type Stream interface {
	Next() ([]byte, error)
	Close()
}

// CloseStream closes s, and tells a stream that asks (CloseFor: the
// request's span, which records the status the access line shows) why it
// ends before its end: err is the failure the client's stream ended with
// (pipeline.ErrClientGone for a client that left), nil for none.
func CloseStream(s Stream, err error) {
	if c, ok := s.(interface{ CloseFor(error) }); ok {
		c.CloseFor(err)
		return
	}
	s.Close()
}

// KeepAlive is the comment chunk a stream yields to keep idle connections open.
var KeepAlive = []byte(": keep-alive")

// StreamFunc adapts a pair of functions to Stream.
type StreamFunc struct {
	NextFunc  func() ([]byte, error)
	CloseFunc func()
}

// Next calls NextFunc.
func (s *StreamFunc) Next() ([]byte, error) { return s.NextFunc() }

// Close calls CloseFunc when set.
func (s *StreamFunc) Close() {
	if s.CloseFunc != nil {
		s.CloseFunc()
	}
}
