package proxy

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/internal/lazyctx"
)

// callHeader carries a call's token to the connection that writes the
// request. fasthttp writes the request head through a 4 KiB buffer, and the
// token is the first header after fasthttp's own, so it reaches the tracked
// connection whole in the request's first Write. (Should it not, the call
// is not interruptible while Do blocks; its timeouts still bound it.) The
// token is random, so a request body cannot name another call's.
const callHeader = "X-Gateway-Call"

var callLine = []byte("\r\n" + callHeader + ": ")

const hexDigits = "0123456789abcdef"

// cancelGrace is how young a request is left alone by the machinery that
// notices its end early: its client's connection is watched (peerWatcher),
// and its upstream call made interruptible by its context
// (connTable.sweep), only once the request or call has lasted this long.
// Most requests end sooner and cost neither. A context that ends within
// the grace interrupts its call when the grace ends: at most 2*cancelGrace
// after the call began.
const cancelGrace = 100 * time.Millisecond

// call is one upstream request, from before Do until its body was read (or,
// for a stream, until Do returned). Once it has lasted cancelGrace, its
// context's cancellation expires the deadlines of the connection that
// carries it.
type call struct {
	table     *connTable
	token     uint64
	ctx       context.Context
	gen       uint32                      // the table's sweep generation when the call began
	conn      atomic.Pointer[trackedConn] // set by the connection's first Write
	cancelled atomic.Bool
	stop      func() bool // stops the AfterFunc; nil until a sweep registered it (under table.mu)
}

// startCall registers a call for ctx and adds its token to h. The caller
// must call end once the call no longer needs its connection.
func (t *connTable) startCall(ctx context.Context, h *fasthttp.RequestHeader) *call {
	c := &call{table: t, ctx: ctx}
	t.mu.Lock()
	if t.calls == nil {
		t.calls = make(map[uint64]*call)
	}
	for {
		c.token = rand.Uint64()
		if _, taken := t.calls[c.token]; !taken && c.token != 0 {
			break
		}
	}
	t.calls[c.token] = c
	c.gen = t.gen
	if !t.sweeping {
		t.sweeping = true
		if t.sweeper == nil {
			t.sweeper = time.AfterFunc(t.graceOrDefault(), t.sweep)
		} else {
			t.sweeper.Reset(t.graceOrDefault())
		}
	}
	t.mu.Unlock()
	var v [16]byte
	h.SetBytesV(callHeader, strconv.AppendUint(v[:0], c.token, 16)) // copies v
	return c
}

func (t *connTable) graceOrDefault() time.Duration {
	if t.grace > 0 {
		return t.grace
	}
	return cancelGrace
}

// sweep runs every grace period while calls run: the calls that were
// running at the previous sweep (so have lasted a grace period) are made
// interruptible by their context, the rest at the next sweep.
func (t *connTable) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	waiting := false
	for _, c := range t.calls {
		switch {
		case c.stop != nil:
		case c.gen != t.gen:
			c.stop = lazyctx.AfterFunc(c.ctx, c.interrupt) // at once, in a goroutine, when ctx already ended
		default:
			waiting = true
		}
	}
	t.gen++
	if t.sweeping = waiting; waiting {
		t.sweeper.Reset(t.graceOrDefault())
	}
}

// end detaches the call from its connection and reports whether the
// connection may be reused: false once the context was cancelled, since
// its expired deadline may land on the connection at any moment.
func (c *call) end() (reusable bool) {
	c.table.mu.Lock()
	delete(c.table.calls, c.token)
	stop := c.stop
	c.table.mu.Unlock()
	stopped := true // never registered: nothing can expire the connection
	if stop != nil {
		stopped = stop()
	}
	if tc := c.conn.Load(); tc != nil {
		tc.call.CompareAndSwap(c, nil)
	}
	return stopped && !c.cancelled.Load()
}

// interrupt runs when the call's context ends: a connection writing the
// request or waiting for the answer returns at once.
func (c *call) interrupt() {
	c.cancelled.Store(true)
	if tc := c.conn.Load(); tc != nil {
		tc.expire()
	}
}

// attach records that tc carries c (a retry inside Do may move the call to
// another connection).
func (c *call) attach(tc *trackedConn) {
	if c.conn.Swap(tc) == tc {
		return
	}
	tc.call.Store(c)
	if c.cancelled.Load() { // cancelled before its request was written
		tc.expire()
	}
}

// claim attaches tc to the call whose token p, a write of a request's
// head, carries.
func (t *connTable) claim(tc *trackedConn, p []byte) {
	i := bytes.Index(p, callLine)
	if i < 0 {
		return
	}
	var token uint64
	for _, ch := range p[i+len(callLine):] {
		d := uint64(strings.IndexByte(hexDigits, ch))
		if d > 15 || token>>60 != 0 { // the value ends at \r, or is not ours
			break
		}
		token = token<<4 | d
	}
	t.mu.Lock()
	c := t.calls[token]
	t.mu.Unlock()
	if c != nil {
		c.attach(tc)
	}
}
