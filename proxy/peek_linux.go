//go:build linux

package proxy

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketPeek reads what the kernel already holds for an upstream
// connection's socket, without taking it and without waiting. An answer
// the upstream sent in one burst but larger than the connection's read
// buffer is partly there: seeing that it ends there too lets its stream be
// written without a goroutine of its own (upstreamStream.Complete).
type socketPeek struct {
	raw syscall.RawConn // nil: not plain TCP (TLS bytes say nothing readable)
	fn  func(fd uintptr) bool
	p   []byte // the current peek's destination, and then its count
	n   int
}

func (sp *socketPeek) init(c net.Conn) {
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	var err error
	if sp.raw, err = tcp.SyscallConn(); err != nil {
		sp.raw = nil
		return
	}
	sp.fn = sp.recv // bound once: a peek allocates nothing
}

// peek copies into p the socket's unread bytes, up to len(p), and returns
// how many; 0 when there are none, on any error, or when the connection
// is not plain TCP. Call it only from the goroutine that reads the
// connection.
func (sp *socketPeek) peek(p []byte) int {
	if sp.raw == nil || len(p) == 0 {
		return 0
	}
	sp.p, sp.n = p, 0
	if sp.raw.Read(sp.fn) != nil {
		sp.n = 0
	}
	sp.p = nil
	return sp.n
}

func (sp *socketPeek) recv(fd uintptr) bool {
	n, _, err := unix.Recvfrom(int(fd), sp.p, unix.MSG_PEEK|unix.MSG_DONTWAIT)
	if err == nil && n > 0 {
		sp.n = n
	}
	return true // never wait for readability
}
