// Package lazyctx is a cancelable context, optionally ended by a deadline,
// that costs one allocation until something waits on it.
//
// Most requests through the gateway end in well under a millisecond, and
// nothing waits on their contexts: the code on their way only asks Err.
// context.WithCancel registers every such context with its parent (a map
// entry under the parent's lock, the parent's done channel) and a deadline
// adds a timer; together they were a fifth of the bytes a pass-through
// request allocated. A Ctx does all of that only when Done is asked for
// (directly, or by a child context or context.AfterFunc), which a stream
// does and a request that lasts long enough to be watched does.
package lazyctx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Ctx is a context under a parent that ends when Cancel is called, when the
// parent ends, or, if it has a deadline, when the deadline passes before
// Stop. It behaves as context.WithCancel of the parent with a time.AfterFunc
// of the cancel at the deadline would, except that it is made of those only
// once something waits on it.
//
// The deadline is not reported by Deadline: it ends with Stop, so it must
// not bound what outlives it (the upstream client would bound a whole
// stream by a context deadline).
//
// One difference: when c ended on its own (Cancel, or its deadline) and its
// parent ended too, all before anything made c real, Err and context.Cause
// report the parent's error and cause, whichever came first. A real
// context reports the first.
type Ctx struct {
	context.Context           // the parent
	at              time.Time // the deadline; zero: none
	state           atomic.Int32
	mu              sync.Mutex // serialises making it real with Stop and Cancel

	// Once isReal is set (after them), the context that c is made of: a
	// cancel context of the parent and, while the deadline applies, the
	// timer that cancels it. inner and cancel never change after; timer is
	// read and dropped (by Stop) under mu.
	isReal atomic.Bool
	inner  context.Context
	cancel context.CancelFunc
	timer  *time.Timer
}

// The states of a Ctx. They only move forward.
const (
	live    int32 = iota // the deadline, if any, applies
	stopped              // Stop came before the deadline: it no longer applies
	ended                // cancelled: Cancel, or the deadline passed
)

// New returns a context under parent, ended by Cancel or, unless at is zero
// or Stop comes first, at at.
func New(parent context.Context, at time.Time) *Ctx {
	return &Ctx{Context: parent, at: at}
}

// Done makes c real and returns its channel.
func (c *Ctx) Done() <-chan struct{} { return c.materialize().Done() }

// Err is the parent's error, or context.Canceled once c was cancelled or its
// deadline passed while it applied.
func (c *Ctx) Err() error {
	if c.isReal.Load() {
		return c.inner.Err()
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.over() {
		return c.materialize().Err()
	}
	return nil
}

// Value is the parent's, or once c is real, the real context's (so that a
// child registers with it, and context.Cause reads its cause). The context
// package asks for its own cancel context with a key of type *int: before
// answering one, c becomes real if it has already ended, so that
// context.Cause agrees with Err.
func (c *Ctx) Value(key any) any {
	if _, own := key.(*int); own && !c.isReal.Load() && c.over() {
		c.materialize()
	}
	if c.isReal.Load() {
		return c.inner.Value(key)
	}
	return c.Context.Value(key)
}

// over reports whether c has ended on its own account (not its parent's).
func (c *Ctx) over() bool {
	switch c.state.Load() {
	case ended:
		return true
	case live:
		return !c.at.IsZero() && !time.Now().Before(c.at)
	}
	return false
}

func (c *Ctx) String() string { return "lazyctx.Ctx" }

// materialize makes c real once and returns the context it is made of: a
// cancel context of the parent, cancelled at once if c has ended, else
// cancelled by a timer at the deadline while it applies.
func (c *Ctx) materialize() context.Context {
	if c.isReal.Load() {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isReal.Load() {
		return c.inner
	}
	c.inner, c.cancel = context.WithCancel(c.Context)
	switch c.state.Load() {
	case ended:
		c.cancel()
	case live:
		if c.at.IsZero() {
			break
		}
		if d := time.Until(c.at); d > 0 {
			c.timer = time.AfterFunc(d, c.cancel)
		} else {
			c.state.Store(ended)
			c.cancel()
		}
	}
	c.isReal.Store(true)
	return c.inner
}

// Stop ends the deadline's hold: it no longer applies. It reports false
// when the deadline had already passed or c was cancelled (c has ended),
// as time.Timer.Stop does for a timer that fired; a second Stop reports
// what the first did.
func (c *Ctx) Stop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state.Load() {
	case ended:
		return false
	case stopped:
		return true
	}
	if c.isReal.Load() {
		if c.timer != nil && !c.timer.Stop() {
			c.state.Store(ended) // the timer fired: inner is cancelled
			return false
		}
		c.timer = nil // stopped for good: a stream outlives it by far
	} else if c.over() {
		c.state.Store(ended) // making it real cancels it
		return false
	}
	c.state.Store(stopped)
	return true
}

// Cancel cancels c, releasing what a real c holds. It is idempotent and
// safe to call from any goroutine.
func (c *Ctx) Cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Store(ended)
	if c.isReal.Load() {
		if c.timer != nil {
			c.timer.Stop()
		}
		c.cancel() // runs no code of a child's synchronously (AfterFunc runs f in a goroutine)
	}
}
