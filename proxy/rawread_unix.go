//go:build unix

package proxy

// The socket reads made directly on the raw socket: a kept client
// connection's next request (keptConn.readNext) and an upstream
// connection's read ahead of fasthttp's reader (trackedConn.readNow).

import (
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// readsAhead is whether a plain-TCP upstream connection can read ahead of
// fasthttp's reader (trackedConn.ahead).
const readsAhead = true

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
	n, err := readFD(fd, *b)
	if err == unix.EAGAIN {
		aheadBufs.Put(b)
		return false // not readable yet: wait
	}
	k.held, k.n, k.err = b, n, err
	return true
}

// nowRead is what readNow needs to read a socket: its raw handle, the
// callback (made once) and what one call read.
type nowRead struct {
	rc  syscall.RawConn
	try func(fd uintptr) bool
	p   []byte
	n   int
	err error
}

// setReadNow sets c.readNow up for a plain TCP connection; false for any
// other (a TLS connection's socket bytes are not the body's).
func (c *trackedConn) setReadNow() bool {
	tc, ok := c.Conn.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	c.now.rc, c.now.try = rc, c.readOnce
	c.readNow = c.readSocketNow
	return true
}

// readSocketNow is readNow on the socket: one read, never a wait.
func (c *trackedConn) readSocketNow(p []byte) (int, error) {
	c.now.p, c.now.n, c.now.err = p, 0, nil
	err := c.now.rc.Read(c.now.try)
	c.now.p = nil
	if err != nil {
		return 0, nil // an expired deadline: nothing now, the next Read reports it
	}
	return c.now.n, c.now.err
}

// readOnce is readSocketNow's callback, which RawConn.Read calls once: it
// never asks to wait.
func (c *trackedConn) readOnce(fd uintptr) bool {
	n, err := readFD(fd, c.now.p)
	switch {
	case n > 0:
		c.now.n = n
	case err == unix.EAGAIN:
	case err == nil:
		c.now.err = io.EOF
	default:
		c.now.err = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	}
	return true
}

// readFD reads the socket fd into p once, again if a signal interrupted
// the read.
func readFD(fd uintptr, p []byte) (int, error) {
	n, err := unix.Read(int(fd), p)
	for err == unix.EINTR {
		n, err = unix.Read(int(fd), p)
	}
	return n, err
}
