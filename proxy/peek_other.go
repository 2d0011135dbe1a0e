//go:build !linux

package proxy

import "net"

// socketPeek is a no-op where MSG_PEEK is not used: a burst larger than
// the connection's read buffer is then written by a stream goroutine.
type socketPeek struct{}

func (sp *socketPeek) init(net.Conn) {}

func (sp *socketPeek) peek([]byte) int { return 0 }
