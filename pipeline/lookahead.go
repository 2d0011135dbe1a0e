package pipeline

import "sync/atomic"

// Lookahead tells the writer of a streamed answer whether the upstream's
// next event is already buffered, so that the writer can hold its flush
// and send a burst of events in one write: it is how the layers between
// the upstream client and the client's connection (which wrap the stream
// and need not know) are skipped. The proxy puts one on a streamed request
// (Request.Lookahead, shared by its clones); the upstream stream being read
// sets itself while it is open. The zero value reports nothing buffered.
// Safe for concurrent use, and lock-free: the writer asks before every
// write.
type Lookahead struct {
	src      atomic.Pointer[Buffered]
	queued   atomic.Int32 // chunks a layer read ahead and hands out next (Queue)
	endWaits atomic.Bool  // a layer's end of the stream may wait on the network (EndWaits)
}

// EndWaits tells l that a layer does work at the stream's end that may
// wait on the network (a response cache's store, a stored Responses
// response): the events before the end then leave before that work, and
// AllHere says false.
func (l *Lookahead) EndWaits() {
	if l != nil {
		l.endWaits.Store(true)
	}
}

// Queue adds n (or, negative, takes them away) to the chunks a layer read
// ahead of the writer and returns before the upstream's next event: the
// fallback layer's first chunks, read to choose the upstream. While any
// are queued, Buffered reports true.
func (l *Lookahead) Queue(n int) {
	if l != nil {
		l.queued.Add(int32(n))
	}
}

// Buffered is a stream that can tell, without blocking, whether its next
// event is already in memory. A Lookahead holds no lock while it asks, so
// Buffered may still be called just after the Unset that removed it has
// returned: it must stay safe then, and say false once its stream is
// closed.
type Buffered interface {
	Buffered() bool
}

// Set makes b the stream whose read-ahead l reports.
func (l *Lookahead) Set(b Buffered) {
	if l == nil {
		return
	}
	l.src.Store(&b)
}

// Unset forgets b, if it is still the stream l reports on (a later stream
// may have replaced it).
func (l *Lookahead) Unset(b Buffered) {
	if l == nil {
		return
	}
	if p := l.src.Load(); p != nil && *p == b {
		l.src.CompareAndSwap(p, nil) // fails only if a later Set replaced b
	}
}

// Buffered reports whether the current upstream stream's next event is
// already buffered; false when there is none.
func (l *Lookahead) Buffered() bool {
	if l == nil {
		return false
	}
	if l.queued.Load() > 0 {
		return true
	}
	p := l.src.Load()
	return p != nil && (*p).Buffered()
}

// Complete reports whether the current upstream stream's every remaining
// event is already in memory, its end included, so that reading it to its
// end never waits for the network (a short answer sent in one burst); false
// when there is none, or when it cannot tell. A Buffered stream tells by
// also having a Complete method.
func (l *Lookahead) Complete() bool {
	c, ok := l.current().(interface{ Complete() bool })
	return ok && c.Complete()
}

// current is the stream l reports on; nil when there is none.
func (l *Lookahead) current() Buffered {
	if l == nil {
		return nil
	}
	if p := l.src.Load(); p != nil {
		return *p
	}
	return nil
}

// AllHere reports whether the rest of the current upstream stream, to the
// end of its body, is already in memory, and no layer's work at its end
// may wait on the network (EndWaits): taking it to its end cannot wait,
// not even for the body's end after [DONE], which Complete does not
// require. The writer uses it to send the last events of a burst with the
// stream's end, in one write. False when there is none, or when it cannot
// tell (a Buffered stream tells by also having an AllHere method).
func (l *Lookahead) AllHere() bool {
	if l == nil || l.endWaits.Load() {
		return false
	}
	c, ok := l.current().(interface{ AllHere() bool })
	return ok && c.AllHere()
}
