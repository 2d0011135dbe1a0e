package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connTable remembers the upstream connections a provider client dialed, by
// local address, and the calls in flight, by token. fasthttp offers no
// per-request handle on the connection a call uses, neither while Do blocks
// nor afterwards, and Do takes no context. With the connection in hand a
// cancelled call expires its deadlines (Do, or a body read, returns at
// once; for a call younger than cancelGrace, once the sweep registers it),
// a stream clears fasthttp's first-byte deadline and applies its own idle
// deadline per event. Safe for concurrent use.
type connTable struct {
	m sync.Map // local address → *trackedConn

	mu       sync.Mutex
	calls    map[uint64]*call // token → call, while the call runs
	gen      uint32           // sweeps so far
	sweeping bool             // sweeper is armed
	sweeper  *time.Timer      // runs sweep; made at the first call
	grace    time.Duration    // 0: cancelGrace
}

type trackedConn struct {
	net.Conn
	table *connTable
	key   string
	once  sync.Once

	call atomic.Pointer[call] // the call whose request this connection carries
	// lastUse is the time of the last Read or Write, since monoStart (0
	// before the first); writing is whether that was a Write, so that the
	// check below runs at a request's first Write only.
	lastUse atomic.Int64
	writing atomic.Bool
	mu      sync.Mutex // orders a cancelled call's expired deadline against fasthttp's own

	// What a stream's lookahead read from the socket ahead of fasthttp's
	// reader (readSpill, under the stream's lock): spill is its unread
	// bytes, which Read returns before reading the socket again, in
	// spillBuf, from spillBufs; spillErr is the error that read met,
	// returned once spill is read. filled is whether the last read from
	// the socket filled the buffer it was given, so that the socket may
	// hold more. Read and readSpill run on the goroutine reading the
	// body, or under its stream's lock.
	spill    []byte
	spillBuf *[]byte
	spillErr error
	filled   bool
	// readNow reads what the socket holds, without waiting: n > 0 bytes;
	// 0 and no error when it holds none; else the connection's end or
	// error. Set up at readSpill's first use (setReadNow); nil where the
	// socket cannot be read so (TLS, other systems).
	readNow func(p []byte) (int, error)
	now     nowRead // readNow's state, where it reads a socket
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.table.m.Delete(c.key) })
	return c.Conn.Close()
}

// Read notes the time of the connection's last use. Bytes a stream's
// lookahead read ahead (spill) come first.
func (c *trackedConn) Read(p []byte) (int, error) {
	if c.spillBuf != nil || c.spillErr != nil {
		return c.readSpilled(p)
	}
	n, err := c.Conn.Read(p)
	c.filled = n == len(p) && n > 0
	c.lastUse.Store(int64(time.Since(monoStart)))
	c.writing.Store(false)
	return n, err
}

// readSpilled is Read while spill holds bytes (never empty while it has
// its buffer), or else the error the read that filled it met, which comes
// after them, as a socket read gives it.
func (c *trackedConn) readSpilled(p []byte) (int, error) {
	if c.spillBuf != nil {
		n := copy(p, c.spill)
		if c.spill = c.spill[n:]; len(c.spill) == 0 {
			c.dropSpill()
		}
		return n, nil
	}
	err := c.spillErr
	c.spillErr = nil
	return 0, err
}

// discardAhead forgets what was read ahead and not read yet (bytes, or
// the error after them), and reports whether there was any.
func (c *trackedConn) discardAhead() bool {
	left := c.spillBuf != nil || c.spillErr != nil
	c.dropSpill()
	c.spillErr = nil
	return left
}

// dropSpill gives spill's buffer back.
func (c *trackedConn) dropSpill() {
	if c.spillBuf != nil {
		spillBufs.Put(c.spillBuf)
		c.spill, c.spillBuf = nil, nil
	}
}

// spillBufs holds the buffers readSpill reads into: as large as the most
// a client write holds (maxHeldBytes), so that one read sees such a burst.
var spillBufs = sync.Pool{New: func() any { b := make([]byte, maxHeldBytes); return &b }}

// ahead returns the bytes read from the socket ahead of fasthttp's reader
// (spill). When there are none and the last read from the socket filled
// its buffer, it first reads what the socket holds now, without waiting
// (plain TCP only: a TLS connection's socket bytes are not the body's).
// So a burst larger than the reader's buffer can be seen whole. A read
// that finds nothing costs one system call; none is made while events
// come one read at a time.
func (c *trackedConn) ahead() []byte {
	if c.spillBuf == nil && c.filled {
		c.filled = false
		c.readSpill()
	}
	return c.spill
}

// readSpill reads what c's socket holds now into spill, without waiting
// (readNow); for a connection whose socket cannot be read so it reads
// nothing. The end of the connection, or an error, goes to spillErr.
func (c *trackedConn) readSpill() {
	if c.readNow == nil && !c.setReadNow() {
		return
	}
	b := spillBufs.Get().(*[]byte)
	n, err := c.readNow(*b)
	switch {
	case n > 0:
		c.spill, c.spillBuf = (*b)[:n], b
		c.filled = n == len(*b)
		c.lastUse.Store(int64(time.Since(monoStart)))
		c.writing.Store(false)
		return
	case err != nil:
		c.spillErr = err
	}
	spillBufs.Put(b)
}

// Write finds the token of the call whose request starts here. At a
// request's first Write on a connection unused for staleAfter (it read or
// wrote nothing since), it first makes sure the upstream has not closed
// it meanwhile (a keep-alive timeout shorter than the pool's): such a
// connection takes no request (errStaleConn), and the call is sent again
// (retryStale).
func (c *trackedConn) Write(p []byte) (int, error) {
	now := int64(time.Since(monoStart))
	if last := c.lastUse.Swap(now); !c.writing.Swap(true) && last != 0 && now-last > int64(staleAfter) && peerClosed(c.Conn) {
		return 0, errStaleConn
	}
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

// staleAfter is how long a connection is unused (no Read, no Write)
// before a request's first Write checks that the upstream has not closed
// it. A connection that goes back to the pool and out again sooner (under
// load, every one) is not checked.
const staleAfter = 100 * time.Millisecond

// monoStart is the origin of trackedConn.lastUse, on the monotonic clock.
var monoStart = time.Now()

// errStaleConn is the error of a Write on a pooled connection the
// upstream closed while it was idle: nothing of the request was written.
var errStaleConn = errors.New("proxy: the upstream closed the idle connection")

// past is a deadline that has expired: setting it unblocks a pending read.
var past = time.Unix(1, 0)
