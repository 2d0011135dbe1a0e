package fallback

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/internal/lazyctx"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// Priming limits: a stream that sends this many chunks (or bytes) without
// content is passed on as it is rather than buffered further. The bytes
// bound memory; the chunks are bounded well above what an upstream sends
// before its content (a role chunk, a few empty deltas), so that one whose
// every chunk is empty still falls back when it ends without content.
const (
	maxPrimeChunks = 1024
	maxPrimeBytes  = 64 << 10
)

// prime reads s until its first chunk with content, so that a failure before
// anything reached the client can be retried. The chunks before it (the role
// chunk) are copied and replayed by the returned stream, which then continues
// s. Keep-alive comments read while priming are dropped: the client has not
// seen the response start yet. On failure prime closes s and returns the
// error; io.EOF becomes an UpstreamCut failure wrapping pipeline.ErrNoContent,
// as a 200 JSON answer without choices is (proxy).
// ctx cancellation (the deadline, the client leaving) closes s to unblock Next.
func prime(ctx context.Context, s pipeline.Stream, provider string, look *pipeline.Lookahead) (*replayStream, error) {
	stop := lazyctx.AfterFunc(ctx, s.Close)
	r := &replayStream{up: s}
	buf := r.arr[:0]
	size := 0
	for {
		c, err := s.Next()
		if err != nil {
			stop()
			s.Close()
			if err == io.EOF {
				err = &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: provider, Err: pipeline.ErrNoContent}
			}
			return nil, err
		}
		if len(c) > 0 && c[0] == ':' {
			continue
		}
		if (wire.ChunkHasContent(c) && !callHeads(c)) || len(buf) >= maxPrimeChunks || size >= maxPrimeBytes {
			if !stop() { // ctx ended meanwhile and closed s
				return nil, context.Cause(ctx)
			}
			r.buf, r.first = buf, c
			// The writer may hold its write for these: they come without
			// waiting for the upstream.
			r.look = look
			r.queued.Store(int32(len(buf) + 1))
			look.Queue(len(buf) + 1)
			return r, nil
		}
		buf = append(buf, bytes.Clone(c))
		size += len(c)
	}
}

// callHeads reports whether chunk's only content is the heads of tool calls
// (an id and a name, no arguments yet): the client is shown nothing of a
// call before its arguments come (the sink sends a call whole, or from its
// first arguments on), so a stream cut after its heads can still fall
// back. A call without arguments ends with the finish chunk, which is
// content.
func callHeads(chunk []byte) bool {
	heads := false
	ok := true
	// A string view, as wire.ChunkHasContent reads it: nothing read here
	// outlives the call, and GetBytes would copy the choices.
	gjson.Get(unsafe.String(unsafe.SliceData(chunk), len(chunk)), "choices").ForEach(func(_, c gjson.Result) bool {
		d := c.Get("delta")
		calls := d.Get("tool_calls")
		if wire.FinishReason(c) != "" || !calls.IsArray() {
			ok = !wire.DeltaHasContent(d) && wire.FinishReason(c) == ""
			return ok
		}
		calls.ForEach(func(_, tc gjson.Result) bool {
			heads = true
			ok = tc.Get("function.arguments").Str == ""
			return ok
		})
		if ok {
			rest, err := sjson.Delete(d.Raw, "tool_calls")
			ok = err == nil && !wire.DeltaHasContent(gjson.Parse(rest))
		}
		return ok
	})
	return ok && heads
}

// replayStream yields the chunks buffered while priming, then the first
// content chunk, then the rest of the upstream stream; later errors are
// returned unchanged. Next is for one goroutine; Close may be called from
// any, more than once.
type replayStream struct {
	buf   [][]byte  // owned copies
	arr   [2][]byte // backing for buf: usually just the role chunk
	first []byte    // owned by up; valid until up.Next is called again
	up    pipeline.Stream
	// look counts buf and first as queued (Lookahead.Queue) until they are
	// handed out or the stream closes; nil when the request has none (a
	// layer between this stream and the client's writer may read it
	// without writing: the tool loop).
	look   *pipeline.Lookahead
	queued atomic.Int32 // Close may run on another goroutine than Next

	// onClose runs on every Close (it must be idempotent): it releases the
	// fallback deadline's context. Set before the stream is handed out.
	onClose func()
}

// Next implements pipeline.Stream.
func (r *replayStream) Next() ([]byte, error) {
	if len(r.buf) > 0 {
		c := r.buf[0]
		r.buf[0] = nil // the stream holds no copy it has handed out
		r.buf = r.buf[1:]
		r.dequeue()
		return c, nil
	}
	if r.first != nil {
		c := r.first
		r.first = nil
		r.dequeue()
		return c, nil
	}
	return r.up.Next()
}

// dequeue takes one of r's chunks off its Lookahead's queue, unless Close
// took them all.
func (r *replayStream) dequeue() {
	for {
		q := r.queued.Load()
		if q <= 0 {
			return
		}
		if r.queued.CompareAndSwap(q, q-1) {
			r.look.Queue(-1)
			return
		}
	}
}

// Close implements pipeline.Stream.
func (r *replayStream) Close() {
	r.look.Queue(-int(r.queued.Swap(0)))
	r.up.Close()
	if r.onClose != nil {
		r.onClose()
	}
}
