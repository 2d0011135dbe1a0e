//go:build !linux

package proxy

import "net"

// watchPeer is a no-op where MSG_PEEK polling is not wired up: a vanished
// client is then noticed at the next failed write.
func watchPeer(net.Conn, func()) (stop func()) { return func() {} }
