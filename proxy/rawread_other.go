//go:build !unix

package proxy

// Where the socket is not read directly: a kept connection's next request
// is read through the connection, and an upstream connection reads
// nothing ahead of fasthttp's reader.

// readsAhead is whether a plain-TCP upstream connection can read ahead of
// fasthttp's reader (trackedConn.ahead).
const readsAhead = false

// readNext reads k's next bytes into k.held, a buffer from aheadBufs, and
// returns how many came. Where the socket is not read directly, the
// buffer is held while the read waits.
func (k *keptConn) readNext() (int, error) {
	b := aheadBufs.Get().(*[]byte)
	k.held = b
	return k.TCPConn.Read(*b)
}

// nowRead is empty where the socket is not read directly.
type nowRead struct{}

// setReadNow says false where the socket is not read directly.
func (c *trackedConn) setReadNow() bool { return false }
