package mockllm

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// splitPause separates the pieces of a split event so that the reader really
// receives them in separate reads.
const splitPause = 500 * time.Microsecond

var (
	doneEvent      = []byte("data: [DONE]\n\n")
	malformedEvent = []byte("data: {\"id\":\"chatcmpl-mock-malformed\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"oops\n\n")
)

// eventBufs pools the per-stream event buffers.
var eventBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// sink is where a stream writes: fasthttp's stream bufio.Writer, or
// chunkedConn on a hijacked connection. Each Flush reaches the socket as one
// HTTP chunk.
type sink interface {
	Write(p []byte) (int, error)
	Flush() error
}

// stream is one SSE response in flight. It is written by one goroutine;
// cancelled may also be set by the connection wrapper (trackedConn).
type stream struct {
	s          *Server
	a          *answer
	fault      *Fault
	firstDelay time.Duration
	chunkDelay time.Duration
	cancelled  atomic.Bool
	received   time.Time // when the request came, for Options.StampHeld; zero = no stamps
}

// cancel records that the client went away, once per stream.
func (st *stream) cancel() {
	if st.cancelled.CompareAndSwap(false, true) {
		st.s.noteCancelled()
	}
}

// outcome of a stream run.
type outcome int

const (
	outDone    outcome = iota // [DONE] written
	outEnded                  // ended on purpose without [DONE] (malformed, error event)
	outCut                    // the connection must be dropped
	outAborted                // client gone or server closing
)

// run writes the whole stream to w, honouring delays and faults.
func (st *stream) run(w sink) outcome {
	bp := eventBufs.Get().(*[]byte)
	defer eventBufs.Put(bp)
	var ch eventSource = newChunker(st.a)
	if st.a.messages {
		ch = newMessagesChunker(st.a)
	}
	split := st.a.chunking.SplitWrites
	if !st.s.sleep(st.firstDelay) {
		return outAborted
	}
	stalled := false
	for i := 0; ; i++ {
		if i > 0 && !st.s.sleep(st.chunkDelay) {
			return outAborted
		}
		if st.cancelled.Load() {
			return outAborted
		}
		ev, ok := ch.next((*bp)[:0])
		*bp = ev
		if f := st.fault; f != nil {
			// A fault offset past the last event triggers before [DONE].
			due := func(after int) bool { return i == after || (!ok && after > i) }
			if f.Stall > 0 && !stalled && due(f.StallAfter) {
				stalled = true
				if w.Flush() != nil {
					st.cancel()
					return outAborted
				}
				st.s.logFault("stall", st.a.model)
				if !st.s.sleep(f.Stall) {
					return outAborted
				}
			}
			if out, stop := st.faultAt(w, due); stop {
				return out
			}
		}
		if !ok {
			break
		}
		if g := st.a.chunking.Gate; g != nil {
			g(i)
		}
		if err := st.write(w, ev, i, split); err != nil {
			st.cancel()
			return outAborted
		}
	}
	if st.a.messages {
		return outDone // message_stop was the last event
	}
	if err := st.write(w, doneEvent, 0, false); err != nil {
		st.cancel()
		return outAborted
	}
	return outDone
}

// faultAt applies the ending fault due now, if any.
func (st *stream) faultAt(w sink, due func(after int) bool) (outcome, bool) {
	f := st.fault
	switch {
	case f.Cut && due(f.CutAfter):
		if w.Flush() != nil {
			st.cancel()
			return outAborted, true
		}
		st.s.logFault("cut", st.a.model)
		return outCut, true
	case f.Malformed && due(f.MalformedAfter):
		st.s.logFault("malformed", st.a.model)
		if st.write(w, malformedEvent, 0, false) != nil {
			st.cancel()
			return outAborted, true
		}
		return outEnded, true
	case f.ErrorEvent && due(f.ErrorAfter):
		st.s.logFault("error_event", st.a.model)
		b := []byte("event: error\ndata: ")
		if st.a.messages {
			e := messagesFaultError(&Fault{Status: f.Status, Type: f.Type, Message: f.Message}, 529)
			b = appendMessagesError(b, e.typ, e.message)
		} else {
			b = append(b, appendErrorObject(nil, faultError(f, 500))...)
		}
		b = append(b, "\n\n"...)
		if st.write(w, b, 0, false) != nil {
			st.cancel()
			return outAborted, true
		}
		return outEnded, true
	}
	return 0, false
}

// write sends one event, in pieces when split is set.
func (st *stream) write(w sink, ev []byte, k int, split bool) error {
	if split {
		a, b := splitPoints(ev, k)
		for _, piece := range [][]byte{ev[:a], ev[a:b], ev[b:]} {
			if len(piece) == 0 {
				continue
			}
			if _, err := w.Write(piece); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
			time.Sleep(splitPause)
		}
		return nil
	}
	if err := st.writeEvent(w, ev); err != nil {
		return err
	}
	if st.a.chunking.Burst && !bytes.Equal(ev, doneEvent) {
		return nil // flushed with [DONE]
	}
	return w.Flush()
}

// writeEvent writes ev, with the held time and the wall-clock time the
// request came first in a chat chunk's object when the stream stamps them
// (Options.StampHeld).
func (st *stream) writeEvent(w sink, ev []byte) error {
	rest, ok := bytes.CutPrefix(ev, dataObject)
	if st.received.IsZero() || !ok {
		_, err := w.Write(ev)
		return err
	}
	var stamp [96]byte
	b := append(stamp[:0], dataObject...)
	b = append(b, `"x_mock_held_ns":`...)
	b = strconv.AppendInt(b, int64(time.Since(st.received)), 10)
	b = append(b, `,"x_mock_received_unix_ns":`...)
	b = strconv.AppendInt(b, st.received.UnixNano(), 10)
	if len(rest) > 0 && rest[0] != '}' {
		b = append(b, ',')
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	_, err := w.Write(rest)
	return err
}

var dataObject = []byte("data: {")

// splitPoints returns two cut offsets 0 < a <= b < len(ev) for event number
// k. Every event is cut inside its first multi-byte UTF-8 character when it
// has one (else in its middle); the other cut rotates between inside "data:",
// between the two final newlines, and a third of the way in.
func splitPoints(ev []byte, k int) (a, b int) {
	n := len(ev)
	if n < 4 {
		return n / 2, n / 2
	}
	mid := n / 2
	for i, c := range ev {
		if c >= 0xC0 {
			mid = i + 1
			break
		}
	}
	var other int
	switch k % 3 {
	case 0:
		other = 3 // "dat|a: "
	case 1:
		other = n - 1 // "...}\n|\n"
	default:
		other = n / 3
	}
	a, b = min(mid, other), max(mid, other)
	return a, b
}

// chunkedConn writes an HTTP/1.1 chunked response straight to a hijacked
// connection, so that a Cut fault can drop the connection after exactly the
// bytes already flushed. Not safe for concurrent use.
type chunkedConn struct {
	conn    net.Conn
	header  []byte
	started bool
	buf     []byte
}

func (c *chunkedConn) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	return len(p), nil
}

func (c *chunkedConn) Flush() error {
	out := make([]byte, 0, len(c.header)+len(c.buf)+16)
	if !c.started {
		c.started = true
		out = append(out, c.header...)
	}
	if len(c.buf) > 0 {
		out = strconv.AppendInt(out, int64(len(c.buf)), 16)
		out = append(out, "\r\n"...)
		out = append(out, c.buf...)
		out = append(out, "\r\n"...)
		c.buf = c.buf[:0]
	}
	if len(out) == 0 {
		return nil
	}
	_, err := c.conn.Write(out)
	return err
}

// rawStreamHeader is the response head of a hijacked stream.
func rawStreamHeader(reqID string) []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n" +
		"X-Request-Id: " + reqID + "\r\nTransfer-Encoding: chunked\r\n\r\n")
}

// runHijacked writes the stream on the raw connection (used when a Cut fault
// must drop the connection mid-body).
func (st *stream) runHijacked(conn net.Conn, reqID string) {
	w := &chunkedConn{conn: conn, header: rawStreamHeader(reqID)}
	out := st.run(w)
	if out == outDone || out == outEnded {
		// Another ending fault (malformed, error event) came before the cut:
		// end the body properly, as the normal path would.
		_, _ = conn.Write([]byte("0\r\n\r\n"))
	}
}

// bodyStreamWriter adapts run to fasthttp.StreamWriter.
func (st *stream) bodyStreamWriter(w *bufio.Writer) {
	st.run(w)
}
