//go:build !linux

package proxy

import "net"

// peerClosed reports false where poll's POLLRDHUP is not available: a
// closed idle connection then fails its call, as any closed connection
// does.
func peerClosed(net.Conn) bool { return false }

// sendQueued cannot tell where SIOCOUTQ is not available.
func sendQueued(*net.TCPConn) (int, bool) { return 0, false }

// writeNow leaves every write to the waiting one where writev on the raw
// socket is not used.
func (w *connWriter) writeNow(*net.TCPConn, *net.Buffers) (bool, error) { return false, nil }
