package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
)

// A chat stream runs on a goroutine of its own, on the client connection
// taken from fasthttp (Hijack); the connection goes back to serving
// requests (fasthttp's ServeConn) when the stream ends.
//
// Why: a stream waits most of its life, and a waiting goroutine holds its
// stack and whatever its frames hold. Run by fasthttp's worker, a stream
// waits under the whole request path, whose deepest steps need an 8 KiB
// stack, and it holds the request context and the connection's read and
// write buffers. On a goroutine of its own it waits in a 4 KiB stack and
// holds none of those: at 10,000 open streams, about 70 MB less. The
// goroutine is a kept one (Server.goStream), whose stack the collector
// shrinks while it waits.
//
// The bytes are the ones fasthttp would write for the same stream: the
// head fasthttp serialises, the events as HTTP/1.1 chunks (a burst in one
// write), the last chunk; for an HTTP/1.0 client, which knows no chunks,
// the events as they are, ended by closing the connection. The connection is kept for the next request
// unless the client asked to close it, spoke HTTP/1.0, or the server is
// shutting down. Request bytes the client pipelined behind the stream's
// request, which fasthttp had read ahead, are served first.

// hijackStream hands sk's stream to a goroutine of its own on ctx's
// connection and reports whether it did (if not, the caller writes the
// stream through fasthttp).
func (s *Server) hijackStream(ctx *fasthttp.RequestCtx, sk *sink) bool {
	conn := ctx.Conn()
	tcp, ok := tcpOf(conn)
	if !ok {
		return false
	}
	keep := ctx.Request.Header.IsHTTP11() && !ctx.Request.Header.ConnectionClose() && !s.stopping.Load() && !s.draining.Load()
	if !keep {
		ctx.Response.SetConnectionClose()
	}
	if ctx.Request.Header.IsHTTP11() {
		ctx.Response.Header.SetContentLength(-1) // chunked
	} else {
		// HTTP/1.0 has no chunked framing: the body ends when the
		// connection does (keep is false).
		ctx.Response.Header.SetContentLength(-2)
		sk.identity = true
	}
	sk.head = ctx.Response.Header.AppendBytes(nil)
	// Until fasthttp hands the connection over, a connection it closes
	// instead (a failure between the handler and the hijack) ends the
	// stream (connState).
	s.awaiting.Store(conn, sk)
	s.connsMu.Lock()
	s.streaming[conn] = struct{}{} // closed by Shutdown at its deadline
	s.connsMu.Unlock()
	// The first events were read already, to choose the upstream: they
	// leave at once, with the head, in one write that does not wait for
	// the network (a write error means the client left, which the stream's
	// goroutine then finds). On the connection's first request, fasthttp
	// holds no earlier response unflushed, so they leave from here, before
	// the hand-over; otherwise from the hand-over, once fasthttp has
	// flushed a response it held back for a request pipelined behind it.
	// (A connection a stream gave back is served anew: its first request
	// is its first again.)
	early := ctx.ConnRequestNum() == 1
	if early && s.writeFirst(conn, tcp, sk) != nil {
		// It panicked: recoverStream ended the stream and closed conn.
		s.awaiting.CompareAndDelete(conn, sk)
		ctx.SetConnectionClose()
		return true
	}
	s.handovers.Add(1)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		s.awaiting.CompareAndDelete(conn, sk)
		if s.handingOver != nil {
			s.handingOver()
		}
		if !early && s.writeFirst(conn, tcp, sk) != nil {
			return
		}
		// fasthttp keeps the request context, and the read buffer c reads
		// through, until this function returns: take what c holds and run
		// the stream elsewhere.
		ahead, err := readAhead(c, conn)
		s.goStream(func() {
			defer func() {
				if r := recover(); r != nil {
					// A panic outside the stream's own recovery (serving the
					// connection after it): the connection ends with it.
					s.connsMu.Lock()
					delete(s.streaming, conn)
					s.connsMu.Unlock()
					s.closeKept(conn)
					panic(r) // the pool's handler counts and logs it
				}
			}()
			s.serveStream(conn, tcp, sk, ahead, keep && err == nil)
		})
	})
	return true
}

// handOver is an answer written on a hijacked connection (a chat stream,
// a pass-through answer to an HTTP/1.0 client) until fasthttp hands the
// connection over.
type handOver interface {
	// abandon ends the answer when fasthttp closed the connection instead.
	abandon()
}

// abandon ends a stream whose connection was never handed over.
func (k *sink) abandon() {
	k.gone()
	k.finish()
}

// tcpOf returns the TCP connection under c: c itself, or the one a
// keptConn serves again.
func tcpOf(c net.Conn) (*net.TCPConn, bool) {
	switch v := c.(type) {
	case *net.TCPConn:
		return v, true
	case *keptConn:
		return v.TCPConn, true
	}
	return nil, false
}

// readAhead returns the bytes fasthttp had read from conn past the
// stream's request (a pipelined request), which only the hijacked c
// holds: it reads c with conn's read deadline in the past, so that only
// buffered bytes come, never the socket's.
func readAhead(c, conn net.Conn) ([]byte, error) {
	if err := conn.SetReadDeadline(time.Unix(1, 0)); err != nil {
		return nil, err
	}
	var ahead []byte
	var buf [512]byte
	for {
		n, err := c.Read(buf[:])
		ahead = append(ahead, buf[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = conn.SetReadDeadline(time.Time{})
			}
			return ahead, err
		}
		if n == 0 {
			return ahead, io.ErrNoProgress
		}
	}
}

// serveStream writes sk's stream on conn, then serves conn's next requests
// (ahead first), or closes it.
func (s *Server) serveStream(conn net.Conn, tcp *net.TCPConn, sk *sink, ahead []byte, keep bool) {
	err := s.serveRecovered(conn, tcp, sk)
	if err == errPanicked {
		return
	}
	if err == nil && sk.writeTimeout > 0 {
		// The connection's next requests are fasthttp's again, whose
		// writes set no deadline of their own.
		err = tcp.SetWriteDeadline(time.Time{})
	}
	s.connsMu.Lock()
	delete(s.streaming, conn)
	s.connsMu.Unlock()
	if err != nil || !keep {
		s.closeKept(conn)
		return
	}
	kc, ok := conn.(*keptConn)
	if !ok {
		kc = &keptConn{TCPConn: tcp}
	}
	kc.ahead = ahead
	kc.drop() // read by fasthttp before the stream, and by readAhead
	if len(kc.ahead) == 0 && !s.awaitRequest(kc) {
		s.closeKept(kc)
		return
	}
	// ServeConn closes kc when the connection ends, unless a later stream
	// takes it again (its own goroutine then owns it). It counts kc among
	// the open connections until then (connState).
	s.connsMu.Lock()
	s.open[kc] = struct{}{}
	s.connsMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			// A panic in fasthttp's serving (a request's own panics are
			// recovered by handle): kc ends with it, and is forgotten.
			s.closeKept(kc)
			panic(r)
		}
	}()
	if err := s.srv.ServeConn(kc); errors.Is(err, fasthttp.ErrConcurrencyLimit) || errors.Is(err, fasthttp.ErrPerIPConnLimit) {
		// Refused: fasthttp closed kc (or not, for the per-IP limit)
		// without a state change.
		s.closeKept(kc)
	}
}

// writeFirst is the hand-over's first sk.writeNext; errPanicked when it
// panicked (recoverStream ended the stream).
func (s *Server) writeFirst(conn net.Conn, tcp *net.TCPConn, sk *sink) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.recoverStream(conn, sk, r)
			err = errPanicked
		}
	}()
	_ = sk.writeNext(tcp)
	return nil
}

// errPanicked reports a stream that panicked: recoverStream ended it.
var errPanicked = errors.New("proxy: the stream panicked")

// serveRecovered is sk.serve, with a panic (a bug) ending the stream and
// its connection instead of the process.
func (s *Server) serveRecovered(conn net.Conn, tcp *net.TCPConn, sk *sink) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.recoverStream(conn, sk, r)
			err = errPanicked
		}
	}()
	return sk.serve(tcp)
}

// closeKept closes conn, a connection whose stream ended, and forgets it.
func (s *Server) closeKept(conn net.Conn) {
	_ = conn.Close()
	s.connsMu.Lock()
	delete(s.open, conn)
	s.connsMu.Unlock()
}

// awaitRequest waits, as fasthttp does on a keep-alive connection, for
// kc's next request, at most the idle timeout, and keeps the bytes of its
// first read (up to 4 KiB, in a buffer from aheadBufs) in kc.ahead; false
// when the connection ended, timed out or shutdown closed it. ServeConn
// would treat kc as a new connection: its first request under the read
// timeout, answered 408 when none comes, and never idle for shutdown.
func (s *Server) awaitRequest(kc *keptConn) bool {
	s.connsMu.Lock()
	if s.stopping.Load() {
		s.connsMu.Unlock()
		return false
	}
	s.idle[kc] = struct{}{} // Shutdown closes it
	s.connsMu.Unlock()
	defer func() {
		s.connsMu.Lock()
		delete(s.idle, kc)
		s.connsMu.Unlock()
	}()
	idle := s.srv.IdleTimeout
	if idle == 0 {
		idle = s.srv.ReadTimeout
	}
	if idle > 0 {
		if err := kc.TCPConn.SetReadDeadline(time.Now().Add(idle)); err != nil {
			return false
		}
	}
	n, err := kc.readNext()
	if err != nil || n <= 0 || kc.TCPConn.SetReadDeadline(time.Time{}) != nil {
		kc.drop()
		return false
	}
	kc.ahead = (*kc.held)[:n]
	return true
}

// keptConn is a client connection served again after a stream: the TCP
// connection fasthttp accepted, with any request bytes read ahead of the
// stream's end. One per connection, however many streams it carries.
type keptConn struct {
	*net.TCPConn
	ahead []byte
	held  *[]byte // ahead's buffer, from aheadBufs, until ahead is read

	// readNext's, set up once where the socket is read directly
	// (rawread_unix.go): the raw handle, the callback, what it read.
	rc  syscall.RawConn
	try func(fd uintptr) bool
	n   int
	err error
}

// aheadBufs holds the buffers a kept connection's next request is read
// into (awaitRequest), given back once fasthttp has read them. One read
// then takes what fasthttp would read first, instead of one byte to wait
// on and another read for the rest.
var aheadBufs = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

func (k *keptConn) Read(p []byte) (int, error) {
	if len(k.ahead) > 0 {
		n := copy(p, k.ahead)
		k.ahead = k.ahead[n:]
		if len(k.ahead) == 0 {
			k.ahead = nil
			k.drop()
		}
		return n, nil
	}
	return k.TCPConn.Read(p)
}

// drop gives ahead's buffer back to aheadBufs, once ahead is read or
// forgotten.
func (k *keptConn) drop() {
	if k.held != nil {
		aheadBufs.Put(k.held)
		k.held = nil
	}
}

// serve writes the response head and every event to conn: one write for
// each event, or for each burst of events that were already buffered
// upstream together, as an HTTP/1.1 chunk; the first write carries the
// head, the one of the last event the final chunk. It ends the request
// and returns the write error that ended the stream (the client left).
func (k *sink) serve(conn *net.TCPConn) error {
	var err error
	for !k.ended && err == nil {
		err = k.writeNext(conn)
	}
	if err != nil {
		k.finish()
		return err
	}
	if !k.closed && !errors.Is(k.failure, pipeline.ErrClientGone) {
		// The stream ended with nothing more to say: the head, if not
		// sent yet, and the final chunk.
		err = k.writeChunk(conn, k.head, nil, true)
		k.head = nil
	}
	k.finish()
	if err == nil && errors.Is(k.failure, pipeline.ErrClientGone) {
		err = io.ErrClosedPipe // the client left: never reuse the connection
	}
	return err
}

// writeNext writes the next event, or the next burst of events that were
// already buffered upstream together, with the head if it was not sent
// and the final chunk after the last event. A write error means the client
// left.
func (k *sink) writeNext(conn *net.TCPConn) error {
	b := k.burst()
	if len(b) == 0 {
		return nil // ended with nothing more to write
	}
	if err := k.writeChunk(conn, k.head, b, k.ended); err != nil {
		k.gone()
		return err
	}
	k.head, k.closed = nil, k.ended
	k.wrote(len(b))
	k.drop() // all written; the next event takes a buffer again
	return nil
}

// writeChunk writes head (if any), b as one chunk (if not empty) and, when
// last, the final chunk, in one system call (b as it is, for an HTTP/1.0
// client).
func (k *sink) writeChunk(conn *net.TCPConn, head, b []byte, last bool) error {
	v := k.vec[:0]
	if len(head) > 0 {
		v = append(v, head)
	}
	switch {
	case k.identity:
		if len(b) > 0 {
			v = append(v, b)
		}
		last = false
	case len(b) > 0:
		k.size = strconv.AppendInt(k.sizeArr[:0], int64(len(b)), 16)
		k.size = append(k.size, '\r', '\n')
		v = append(v, k.size, b, crlf)
	}
	if last {
		v = append(v, lastChunk)
	}
	k.bufs = v
	err := k.w.write(conn, &k.bufs, k.writeTimeout)
	clear(k.vec[:])
	k.bufs = nil
	return err
}

var (
	crlf      = []byte("\r\n")
	lastChunk = []byte("0\r\n\r\n")
)
