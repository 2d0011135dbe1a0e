//go:build linux

package proxy

import (
	"crypto/tls"
	"net"
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
