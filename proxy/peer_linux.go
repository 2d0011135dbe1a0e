//go:build linux

package proxy

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// watchPeer calls gone once when the client at the other end of conn closes
// or resets the connection while a response is being produced. fasthttp only
// notices a vanished client when a write fails, which for a stream waiting on
// a slow upstream can be much later; this waits in the runtime's poller and
// peeks (MSG_PEEK) so that no byte of a pipelined next request is consumed.
// The returned stop must be called before the handler's writer returns.
func watchPeer(conn net.Conn, gone func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		for {
			closed := false
			err := rc.Read(func(fd uintptr) bool {
				for {
					n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
					switch {
					case err == syscall.EINTR:
						continue
					case err == syscall.EAGAIN:
						return false // nothing yet: wait for readiness
					case err != nil || n == 0:
						closed = true // reset, or an orderly close by the peer
					}
					return true // closed, or a pipelined request is waiting: stop
				}
			})
			switch {
			case closed:
				gone()
				return
			case err == nil:
				return
			case stopping.Load() || !errors.Is(err, os.ErrDeadlineExceeded):
				return // stopping, or the connection is gone for another reason
			}
			// A read deadline the server set for itself expired: keep watching.
			_ = conn.SetReadDeadline(time.Time{})
			if stopping.Load() { // stop may have set its deadline just before we cleared it
				return
			}
		}
	}()
	return func() {
		stopping.Store(true)
		_ = conn.SetReadDeadline(past)
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}
