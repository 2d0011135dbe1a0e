package pipeline

import "sync"

// Lookahead tells the writer of a streamed answer whether the upstream's
// next event is already buffered, so that the writer can hold its flush
// and send a burst of events in one write: it is how the layers between
// the upstream client and the client's connection (which wrap the stream
// and need not know) are skipped. The proxy puts one on a streamed request
// (Request.Lookahead, shared by its clones); the upstream stream being read
// sets itself while it is open. The zero value reports nothing buffered.
// Safe for concurrent use.
type Lookahead struct {
	mu  sync.Mutex
	src Buffered
}

// Buffered is a stream that can tell, without blocking, whether its next
// event is already in memory.
type Buffered interface {
	Buffered() bool
}

// Set makes b the stream whose read-ahead l reports.
func (l *Lookahead) Set(b Buffered) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.src = b
	l.mu.Unlock()
}

// Unset forgets b, if it is still the stream l reports on (a later stream
// may have replaced it).
func (l *Lookahead) Unset(b Buffered) {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.src == b {
		l.src = nil
	}
	l.mu.Unlock()
}

// Buffered reports whether the current upstream stream's next event is
// already buffered; false when there is none.
func (l *Lookahead) Buffered() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src != nil && l.src.Buffered()
}
