//go:build unix

package proxy

import (
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// readNext reads k's next bytes into k.held, a buffer from aheadBufs, once
// the socket has some, and returns how many came (0 at the connection's
// end). It waits through the socket's RawConn, under its read deadline,
// and holds a buffer only for each attempt to read: a connection waiting
// for its next request holds none.
func (k *keptConn) readNext() (int, error) {
	if k.rc == nil {
		rc, err := k.TCPConn.SyscallConn()
		if err != nil {
			return 0, err
		}
		k.rc, k.try = rc, k.readReady
	}
	k.n, k.err = 0, nil
	if err := k.rc.Read(k.try); err != nil {
		return 0, err
	}
	return k.n, k.err
}

// readReady is readNext's callback, which the runtime calls once, then
// again each time the socket may have bytes (RawConn.Read): it reads into
// a buffer from aheadBufs, and gives the buffer back at once when none
// came.
func (k *keptConn) readReady(fd uintptr) bool {
	b := aheadBufs.Get().(*[]byte)
	n, err := unix.Read(int(fd), *b)
	for err == unix.EINTR {
		n, err = unix.Read(int(fd), *b)
	}
	if err == unix.EAGAIN {
		aheadBufs.Put(b)
		return false // not readable yet: wait
	}
	k.held, k.n, k.err = b, n, err
	return true
}

// readSpill reads what c's socket holds now into spill, without waiting;
// for a connection that is not plain TCP it reads nothing.
func (c *trackedConn) readSpill() {
	if c.try == nil {
		tc, ok := c.Conn.(*net.TCPConn)
		if !ok {
			return
		}
		rc, err := tc.SyscallConn()
		if err != nil {
			return
		}
		c.rc, c.try = rc, c.spillReady
	}
	_ = c.rc.Read(c.try) // an expired deadline: the next Read reports it
}

// spillReady is readSpill's callback: one read, never a wait. Bytes go to
// spill; the end of the connection or an error, to spillErr.
func (c *trackedConn) spillReady(fd uintptr) bool {
	b := spillBufs.Get().(*[]byte)
	n, err := unix.Read(int(fd), *b)
	for err == unix.EINTR {
		n, err = unix.Read(int(fd), *b)
	}
	switch {
	case n > 0:
		c.spill, c.spillBuf = (*b)[:n], b
		c.filled = n == len(*b)
		c.lastUse.Store(int64(time.Since(monoStart)))
		c.writing.Store(false)
		return true
	case err == unix.EAGAIN:
	case err == nil:
		c.spillErr = io.EOF
	default:
		c.spillErr = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	}
	spillBufs.Put(b)
	return true
}
