//go:build linux

package proxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// peerWatcher notices clients that close or reset their connection while
// their request is being answered, and cancels the request. fasthttp only
// notices a vanished client when a write fails, which for a request waiting
// on a slow upstream can be minutes later. One goroutine and one epoll
// instance serve every watched connection of a server (the runtime's poller
// cannot be asked about hang-ups), so watching costs no goroutine. The
// goroutine waits for that epoll instance in the runtime's poller, like a
// socket read, not in a blocking epoll_wait, which keeps a thread (and for
// a while its P) in a system call: measured in BenchmarkPassthroughFloor,
// the blocking wait cost about 2.5 µs of CPU per request, far more than
// the watch's own code. A watch
// is armed (registered with epoll) only once it has lasted a grace period
// (cancelGrace): the goroutine arms the watches of the previous period every
// period while any wait, so a request that ends within the grace costs a
// map entry and no system call, and a longer one two epoll_ctl calls. The
// zero value is ready; it starts at the first watch. Safe for concurrent
// use.
type peerWatcher struct {
	once    sync.Once
	epfd    int           // -1 when epoll is unavailable
	ep      *os.File      // epfd, registered with the runtime's poller
	wakefd  int           // an eventfd that wakes the loop (a first pending watch, or close)
	grace   time.Duration // 0: cancelGrace
	mu      sync.Mutex
	watches map[int32]watchEntry // by fd
	pending []peerWatch          // not yet armed, oldest first (some since unwatched)
	ripe    int                  // pending[:ripe] are due at the next pass
	asleep  bool                 // the loop waits without a timeout: a watch must wake it
	gen     int32
	closed  bool
	done    chan struct{}
	armed   int // watches registered with epoll so far, for tests

	fds sync.Map // net.Conn → its file descriptor (int), until forget
}

type watchEntry struct {
	gen   int32
	armed bool // registered with epoll
	gone  func()
}

// peerWatch is one registration; the zero value is none.
type peerWatch struct{ fd, gen int32 }

func (w *peerWatcher) start() {
	w.epfd, w.wakefd = -1, -1
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd), Pad: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(wakefd)
		return
	}
	// Non-blocking, the epoll descriptor is registered with the runtime's
	// poller by os.NewFile, which reports it readable when it has events.
	if unix.SetNonblock(epfd, true) != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(wakefd)
		return
	}
	w.ep = os.NewFile(uintptr(epfd), "peer-epoll")
	rc, err := w.ep.SyscallConn()
	if err == nil {
		err = w.ep.SetReadDeadline(time.Time{}) // fails when the poller did not take it
	}
	if err != nil {
		_ = w.ep.Close()
		_ = unix.Close(wakefd)
		return
	}
	w.epfd, w.wakefd = epfd, wakefd
	if w.grace <= 0 {
		w.grace = cancelGrace
	}
	w.watches = make(map[int32]watchEntry)
	w.done = make(chan struct{})
	go w.run(rc)
}

// watch calls gone (at most once, from the watcher's goroutine) when the
// client at the other end of conn leaves, once the watch has lasted the
// grace period. A client that sends another (pipelined) request before
// closing is not seen as gone. The caller must unwatch before the
// connection can be closed: the registration names a file descriptor,
// which the kernel reuses.
func (w *peerWatcher) watch(conn net.Conn, gone func()) peerWatch {
	w.once.Do(w.start)
	if w.epfd < 0 {
		return peerWatch{}
	}
	fd := w.fd(conn)
	if fd < 0 {
		return peerWatch{}
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return peerWatch{}
	}
	w.gen++
	if w.gen <= 0 {
		w.gen = 1 // 0 means none, -1 the wake fd
	}
	p := peerWatch{fd: int32(fd), gen: w.gen}
	w.watches[p.fd] = watchEntry{gen: p.gen, gone: gone}
	w.pending = append(w.pending, p)
	wake := w.asleep
	w.asleep = false
	w.mu.Unlock()
	if wake {
		_, _ = unix.Write(w.wakefd, wakeOne)
	}
	return p
}

var wakeOne = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// arm registers the watches that were pending at the previous pass (they
// have waited at least a grace period) and makes the rest due at the next.
// It runs on the loop's goroutine.
func (w *peerWatcher) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pending[:w.ripe] {
		e, ok := w.watches[p.fd]
		if !ok || e.gen != p.gen || e.armed {
			continue // unwatched meanwhile
		}
		// One-shot: the first hang-up (or error) disarms the registration.
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: p.fd, Pad: p.gen}
		if unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(p.fd), &ev) != nil {
			delete(w.watches, p.fd) // not watchable: as if never watched
			continue
		}
		e.armed = true
		w.watches[p.fd] = e
		w.armed++
	}
	n := copy(w.pending, w.pending[w.ripe:])
	clear(w.pending[n:])
	w.pending = w.pending[:n]
	w.ripe = n
}

// fd returns conn's file descriptor, or -1 when it is not a socket
// (in-memory listeners in tests). It is looked up once per connection (the
// lookup allocates) and kept until forget.
func (w *peerWatcher) fd(conn net.Conn) int {
	if v, ok := w.fds.Load(conn); ok {
		return v.(int)
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil || fd < 0 {
		return -1
	}
	w.fds.Store(conn, fd)
	return fd
}

// forget drops what fd kept of conn; call it when conn closes.
func (w *peerWatcher) forget(conn net.Conn) { w.fds.Delete(conn) }

// unwatch ends p. After it returns gone is not called for p (unless a call
// had already begun) and the connection may be closed.
func (w *peerWatcher) unwatch(p peerWatch) {
	if p.gen == 0 {
		return
	}
	w.mu.Lock()
	e, ok := w.watches[p.fd]
	if ok && e.gen == p.gen {
		delete(w.watches, p.fd)
		if e.armed && !w.closed {
			_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(p.fd), nil)
		}
	}
	w.mu.Unlock()
}

// close ends the watcher's goroutine and releases its descriptors.
func (w *peerWatcher) close() {
	w.once.Do(func() { w.epfd = -1 }) // never started: nothing to close
	if w.epfd < 0 {
		return
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	clear(w.watches)
	w.mu.Unlock()
	_, _ = unix.Write(w.wakefd, wakeOne)
	<-w.done
}

func (w *peerWatcher) run(rc syscall.RawConn) {
	defer close(w.done)
	defer func() {
		_ = w.ep.Close()
		_ = unix.Close(w.wakefd)
	}()
	events := make([]unix.EpollEvent, 64)
	var drain [8]byte
	pass := time.Now()
	for {
		// With watches pending, wake for the next pass; else sleep until a
		// watch (or close) writes the eventfd.
		var deadline time.Time // none
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		if len(w.pending) > 0 {
			deadline = pass.Add(w.grace)
		} else {
			w.asleep = true
		}
		w.mu.Unlock()
		if w.ep.SetReadDeadline(deadline) != nil {
			return
		}
		n := 0
		var werr error
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, werr = unix.EpollWait(int(fd), events, 0) // never blocks: the poller waits
				if werr != unix.EINTR {
					return n > 0 || werr != nil // false: wait until it is readable
				}
			}
		})
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			n = 0 // time for the next pass
		case err != nil || werr != nil:
			return
		}
		for _, ev := range events[:n] {
			if ev.Pad == -1 {
				_, _ = unix.Read(w.wakefd, drain[:]) // a close is seen at the top
				continue
			}
			if gone := w.check(ev.Fd, ev.Pad); gone != nil {
				gone()
			}
		}
		if time.Since(pass) >= w.grace {
			w.arm()
			pass = time.Now()
		}
	}
}

// check confirms a hang-up on fd with a peek, which consumes nothing: no
// bytes means an orderly close, an error a reset; bytes are a pipelined
// request, not a close. It runs under the lock so that the fd cannot be
// closed (unwatch first takes the lock) and reused meanwhile.
func (w *peerWatcher) check(fd, gen int32) (gone func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.watches[fd]
	if !ok || e.gen != gen {
		return nil
	}
	var b [1]byte
	for {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			// Nothing to read and no hang-up after all: watch again.
			ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: fd, Pad: gen}
			_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
			return nil
		case err != nil || n == 0:
			return e.gone // the registration stays, disarmed, until unwatch
		default:
			return nil // a pipelined request
		}
	}
}
