package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// connWriter writes a stream's chunks to the stream's own connection
// (writev). A write the socket has room for is one system call: it sets
// no deadline and reads no send queue. Only a write that has to wait for
// the client pays for those, and each of its waits is bounded by the
// write timeout, giving up on a client that stopped reading, not on one
// that reads slowly (write).
type connWriter struct {
	conn *net.TCPConn
	rc   syscall.RawConn       // conn's, taken once
	try  func(fd uintptr) bool // writeNow's callback (w.writev), bound once
	bufs *net.Buffers          // what try writes, during a writeNow
	err  error                 // try's error other than a full socket
}

// write writes bufs to conn. With a timeout, each wait for the client is
// bounded by it, but only a client that stopped reading is given up on:
// when the deadline passes and the client acknowledged bytes during it
// (the bytes written less the growth of the socket's unacknowledged
// queue), it reads, however slowly, and the write goes on under a new
// deadline. Linux wakes a write blocked on a full send buffer only once a
// good part of it drained, which at a slow but steady reader can take
// longer than any timeout. Where the queue cannot be read (sendQueued),
// the first deadline ends the write.
func (w *connWriter) write(conn *net.TCPConn, bufs *net.Buffers, timeout time.Duration) error {
	if timeout <= 0 {
		_, err := bufs.WriteTo(conn)
		return err
	}
	done, err := w.writeNow(conn, bufs)
	if done || err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	// The socket is full (or an earlier wait's deadline has passed, which
	// the wait's own deadline below replaces): the rest waits for the client.
	queued, known := sendQueued(conn)
	for {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
		n, err := bufs.WriteTo(conn)
		if err == nil || !known || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		now, ok := sendQueued(conn)
		if !ok || n+int64(queued-now) <= 0 {
			return err // nothing acknowledged in a whole timeout: the client stopped reading
		}
		queued = now
	}
}

// consume drops the first n bytes of v, as a write of them does.
func consume(v *net.Buffers, n int) {
	for len(*v) > 0 && n >= len((*v)[0]) {
		n -= len((*v)[0])
		(*v)[0] = nil
		*v = (*v)[1:]
	}
	if len(*v) > 0 {
		(*v)[0] = (*v)[0][n:]
	}
}
