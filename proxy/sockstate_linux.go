//go:build linux

package proxy

import (
	"crypto/tls"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerClosed reports whether the upstream has closed (or reset) c, without
// reading from it and without waiting: poll with POLLRDHUP sees the peer's
// FIN even behind unread bytes (a TLS close_notify, a 408 a server sent
// before closing).
func peerClosed(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			closed = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return closed
}

// sendQueued returns the bytes c has sent or queued that the peer has not
// acknowledged yet (SIOCOUTQ), and whether it could tell.
func sendQueued(c *net.TCPConn) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	n, qerr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) { n, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil || qerr != nil {
		return 0, false
	}
	return n, true
}

// writeNow writes what of bufs conn's socket takes now, without waiting;
// done when that was all of it. A socket with no room is not an error; a
// deadline of an earlier wait that has passed is (os.ErrDeadlineExceeded).
func (w *connWriter) writeNow(conn *net.TCPConn, bufs *net.Buffers) (done bool, err error) {
	if w.conn != conn {
		rc, err := conn.SyscallConn()
		if err != nil {
			return false, nil // the waiting write reports it
		}
		w.conn, w.rc, w.try = conn, rc, w.writev
	}
	w.bufs = bufs
	err = w.rc.Write(w.try)
	w.bufs = nil
	if err == nil {
		err, w.err = w.err, nil
	}
	return err == nil && len(*bufs) == 0, err
}

// writev is writeNow's callback: it writes until the socket is full and
// never asks rc.Write to wait.
func (w *connWriter) writev(fd uintptr) bool {
	for len(*w.bufs) > 0 {
		n, err := unix.Writev(int(fd), *w.bufs)
		if n > 0 {
			consume(w.bufs, n)
		}
		if err == nil || err == unix.EINTR {
			continue
		}
		if err != unix.EAGAIN { // a full socket is the waiting write's
			w.err = os.NewSyscallError("writev", err)
		}
		return true
	}
	return true
}
