//go:build unix

package proxy

import "golang.org/x/sys/unix"

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
