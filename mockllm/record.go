package mockllm

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// Recorded is a copy of one received request. It owns its Body and Header.
// Header keys are in canonical form ("Authorization", "Content-Type").
type Recorded struct {
	Model  string // "" outside chat completions or when the body had none
	Body   []byte
	Header map[string]string
	Path   string
}

// recorder holds the counters and the bounded request log.
type recorder struct {
	total    atomic.Int64
	perModel sync.Map // model → *atomic.Int64

	mu   sync.Mutex
	max  int // <0: no log
	reqs []Recorded

	cancelled  atomic.Int64
	cancelOnce sync.Once
	cancelCh   chan struct{}
}

func (r *recorder) init(maxRecorded int) {
	switch {
	case maxRecorded == 0:
		r.max = 10000
	case maxRecorded < 0:
		r.max = -1
	default:
		r.max = maxRecorded
	}
	r.cancelCh = make(chan struct{})
}

// count notes one chat completion request for model and returns its 1-based
// number for that model ("" counts only in the total).
func (r *recorder) count(model string) int {
	r.total.Add(1)
	if model == "" {
		return 0
	}
	v, ok := r.perModel.Load(model)
	if !ok {
		v, _ = r.perModel.LoadOrStore(model, new(atomic.Int64))
	}
	return int(v.(*atomic.Int64).Add(1))
}

// record copies the request into the log (when enabled).
func (s *Server) record(ctx *fasthttp.RequestCtx, model string) {
	r := &s.rec
	if r.max < 0 {
		return
	}
	rec := Recorded{
		Model:  model,
		Body:   append([]byte(nil), ctx.PostBody()...),
		Header: make(map[string]string, ctx.Request.Header.Len()),
		Path:   string(ctx.Path()),
	}
	for k, v := range ctx.Request.Header.All() {
		rec.Header[string(k)] = string(v)
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, rec)
	if len(r.reqs) >= 2*r.max {
		n := copy(r.reqs, r.reqs[len(r.reqs)-r.max:])
		clear(r.reqs[n:])
		r.reqs = r.reqs[:n]
	}
	r.mu.Unlock()
}

// noteCancelled counts one stream whose client went away.
func (s *Server) noteCancelled() {
	s.rec.cancelled.Add(1)
	s.rec.cancelOnce.Do(func() { close(s.rec.cancelCh) })
}

// Calls returns how many chat completion requests named model, including
// those refused by validation or the context window.
func (s *Server) Calls(model string) int {
	v, ok := s.rec.perModel.Load(model)
	if !ok {
		return 0
	}
	return int(v.(*atomic.Int64).Load())
}

// TotalCalls returns how many chat completion requests arrived, malformed
// ones included.
func (s *Server) TotalCalls() int { return int(s.rec.total.Load()) }

// Requests returns copies of the recorded requests (every route), oldest
// first, at most Options.MaxRecorded of the most recent ones.
func (s *Server) Requests() []Recorded {
	r := &s.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.reqs
	if r.max > 0 && len(reqs) > r.max {
		reqs = reqs[len(reqs)-r.max:]
	}
	out := make([]Recorded, len(reqs))
	for i, q := range reqs {
		h := make(map[string]string, len(q.Header))
		for k, v := range q.Header {
			h[k] = v
		}
		out[i] = Recorded{Model: q.Model, Body: append([]byte(nil), q.Body...), Header: h, Path: q.Path}
	}
	return out
}

// ResetRecords forgets the recorded requests and zeroes every counter except
// Cancelled.
func (s *Server) ResetRecords() {
	r := &s.rec
	r.mu.Lock()
	clear(r.reqs)
	r.reqs = r.reqs[:0]
	r.mu.Unlock()
	r.total.Store(0)
	r.perModel.Range(func(k, _ any) bool {
		r.perModel.Delete(k)
		return true
	})
}

// Cancelled returns how many streams lost their client before completion: a
// failed write or flush, or a failed socket write of bytes the stream had
// already handed to fasthttp.
func (s *Server) Cancelled() int { return int(s.rec.cancelled.Load()) }

// WaitCancelled blocks until at least one stream was cancelled or ctx ends.
func (s *Server) WaitCancelled(ctx context.Context) error {
	select {
	case <-s.rec.cancelCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// trackingListener wraps accepted connections in trackedConn.
type trackingListener struct{ net.Listener }

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c}, nil
}

// trackedConn notices a failed socket write while a stream is the current
// response on the connection: fasthttp copies stream bytes through a pipe,
// so the stream goroutine can finish before the socket write fails.
type trackedConn struct {
	net.Conn
	stream atomic.Pointer[stream]
}

func (c *trackedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		if st := c.stream.Load(); st != nil {
			st.cancel()
		}
	}
	return n, err
}
