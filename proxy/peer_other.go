//go:build !linux

package proxy

import "net"

// peerWatcher is a no-op where the epoll watcher is not available: a
// vanished client is then noticed at the next failed write.
type peerWatcher struct{}

// peerWatch is one registration; the zero value is none.
type peerWatch struct{}

func (w *peerWatcher) watch(net.Conn, func()) peerWatch { return peerWatch{} }

func (w *peerWatcher) unwatch(peerWatch) {}

func (w *peerWatcher) forget(net.Conn) {}

func (w *peerWatcher) close() {}
