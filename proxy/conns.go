package proxy

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// connTable remembers the upstream connections a provider client dialed, by
// local address, and the calls in flight, by token. fasthttp offers no
// per-request handle on the connection a call uses, neither while Do blocks
// nor afterwards, and Do takes no context. With the connection in hand a
// cancelled call expires its deadlines (Do, or a body read, returns at
// once), a stream clears fasthttp's first-byte deadline and applies its own
// idle deadline per event. Safe for concurrent use.
type connTable struct {
	m sync.Map // local address → *trackedConn

	mu    sync.Mutex
	calls map[uint64]*call // token → call, while the call runs
}

// callHeader carries a call's token to the connection that writes the
// request: fasthttp writes the request line and headers in one Write, in
// which the tracked connection finds it. The token is random, so request
// bodies cannot name another call's.
const callHeader = "X-Gateway-Call"

var callLine = []byte("\r\n" + callHeader + ": ")

const hexDigits = "0123456789abcdef"

// call is one upstream request, from before Do until its body was read (or,
// for a stream, until Do returned). Its context's cancellation expires the
// deadlines of the connection that carries it.
type call struct {
	table     *connTable
	token     uint64
	conn      atomic.Pointer[trackedConn] // set by the connection's first Write
	cancelled atomic.Bool
	stop      func() bool // stops the context.AfterFunc
}

// startCall registers a call for ctx and adds its token to h. The caller
// must call end once the call no longer needs its connection.
func (t *connTable) startCall(ctx context.Context, h *fasthttp.RequestHeader) *call {
	c := &call{table: t}
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
	t.mu.Unlock()
	var v [16]byte
	h.SetBytesV(callHeader, strconv.AppendUint(v[:0], c.token, 16)) // copies v
	c.stop = context.AfterFunc(ctx, c.interrupt)                    // no goroutine until ctx ends
	return c
}

// end detaches the call from its connection and reports whether the
// connection may be reused: false once the context was cancelled, since
// its expired deadline may land on the connection at any moment.
func (c *call) end() (reusable bool) {
	stopped := c.stop()
	if tc := c.conn.Load(); tc != nil {
		tc.call.CompareAndSwap(c, nil)
	}
	c.table.mu.Lock()
	delete(c.table.calls, c.token)
	c.table.mu.Unlock()
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

type trackedConn struct {
	net.Conn
	table *connTable
	key   string
	once  sync.Once

	call atomic.Pointer[call] // the call whose request this connection carries
	mu   sync.Mutex           // orders a cancelled call's expired deadline against fasthttp's own
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.table.m.Delete(c.key) })
	return c.Conn.Close()
}

// Write finds the token of the call whose request starts here.
func (c *trackedConn) Write(p []byte) (int, error) {
	if c.call.Load() == nil {
		c.table.claim(c, p)
	}
	return c.Conn.Write(p)
}

// SetDeadline, SetReadDeadline and SetWriteDeadline keep a cancelled call's
// deadline expired: fasthttp sets its own read deadline after writing the
// request, which may be after the cancel.
func (c *trackedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetDeadline(c.deadline(t))
}

func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetReadDeadline(c.deadline(t))
}

func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetWriteDeadline(c.deadline(t))
}

func (c *trackedConn) deadline(t time.Time) time.Time {
	if cl := c.call.Load(); cl != nil && cl.cancelled.Load() {
		return past
	}
	return t
}

// expire makes pending and later reads and writes fail at once.
func (c *trackedConn) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.Conn.SetDeadline(past)
}

// Handshake is there for fasthttp, which takes a connection with one for
// TLS already (dial did the handshake) and would otherwise wrap it again.
func (c *trackedConn) Handshake() error {
	if h, ok := c.Conn.(interface{ Handshake() error }); ok {
		return h.Handshake()
	}
	return nil
}

// wrap registers c and returns the tracked connection.
func (t *connTable) wrap(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, table: t, key: c.LocalAddr().String()}
	t.m.Store(tc.key, tc)
	return tc
}

// lookup returns the connection whose local address is addr, or nil.
func (t *connTable) lookup(addr net.Addr) *trackedConn {
	if addr == nil {
		return nil
	}
	v, ok := t.m.Load(addr.String())
	if !ok {
		return nil
	}
	return v.(*trackedConn)
}

// past is a deadline that has expired: setting it unblocks a pending read.
var past = time.Unix(1, 0)
