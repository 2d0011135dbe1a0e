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
//
// A stream holds its contexts for as long as it lasts, so what a watched
// Ctx holds counts too: the gateway's own functions that run at a stream's
// end (its upstream read interrupted) made each Ctx on the way real, and
// those contexts, their children maps and the context.AfterFunc were
// 1.2 KiB of each open stream's heap. This package's AfterFunc registers
// such a function on the list of the nearest Ctx above (seen through value
// contexts), which registers on its parent's the same way, and nothing is
// made real.
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
	timer  *time.Timer // the deadline's, while it applies: set by materialize or watch

	// What AfterFunc registered (under mu): the functions to run when c
	// ends, and c's own registration with its parent, made once (watched).
	funcs      []*afterFunc // each knows its index
	parentStop func() bool
	watched    bool
	fired      bool // the functions were taken to run: later ones run at once
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

// ctxKey is the key a Ctx answers Value with itself for: AfterFunc finds
// the nearest Ctx above a context through value contexts with it.
type ctxKey struct{}

// cancelKey is the key the context package asks a context's Value for its
// own cancel context with (context.Cause does), or nil if it asks none.
var cancelKey = func() any {
	var p keyProbe
	_ = context.Cause(&p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any { p.key = key; return nil }
func (p *keyProbe) Err() error        { return context.Canceled } // Cause asks Value only of an ended context

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
// context.Cause agrees with Err. When nothing above answers that key (the
// parent never ends), c answers it with itself, which the context package
// takes for no cancel context of its own (it asks only once c is real), and
// register for a context that can end.
func (c *Ctx) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return c
	}
	if _, own := key.(*int); own && !c.isReal.Load() && c.over() {
		c.materialize()
	}
	if c.isReal.Load() {
		return c.inner.Value(key)
	}
	v := c.Context.Value(key)
	if v == nil && key == cancelKey && cancelKey != nil {
		return c
	}
	return v
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
		if c.timer != nil {
			break // watch set it
		}
		if d := time.Until(c.at); d > 0 {
			c.timer = time.AfterFunc(d, c.Cancel)
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
	if c.timer != nil {
		if !c.timer.Stop() {
			// The timer fired: its Cancel ends c and runs the list, but
			// Err must say so as soon as Stop has.
			c.state.Store(ended)
			if c.isReal.Load() {
				c.cancel()
			}
			return false
		}
		c.timer = nil // stopped for good: a stream outlives it by far
	} else if !c.isReal.Load() && c.over() {
		// Making it real cancels it. Nothing is on its list: AfterFunc
		// sets the timer, or cancels c when the deadline has passed.
		c.state.Store(ended)
		return false
	}
	c.state.Store(stopped)
	return true
}

// Cancel cancels c, releasing what a real c holds, and runs what AfterFunc
// registered. It is idempotent and safe to call from any goroutine.
func (c *Ctx) Cancel() {
	c.mu.Lock()
	c.state.Store(ended)
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.isReal.Load() {
		c.cancel() // runs no code of a child's synchronously (AfterFunc runs f in a goroutine)
	}
	c.mu.Unlock()
	c.fire()
}

// fire runs the functions AfterFunc registered, once c has ended (by
// Cancel, its deadline or its parent), and ends c's registration with its
// parent.
func (c *Ctx) fire() {
	c.mu.Lock()
	if c.fired {
		c.mu.Unlock()
		return
	}
	c.fired = true
	funcs, stop := c.funcs, c.parentStop
	c.funcs, c.parentStop = nil, nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	for _, a := range funcs {
		a.run()
	}
}

// AfterFunc is context.AfterFunc: f runs in a goroutine of its own once ctx
// ends (at once if it has), unless stop came first. When the nearest
// context above ctx that can end is a Ctx (value contexts between are seen
// through), f goes on its list, and that Ctx registers on its parent's the
// same way: none of them is made real, where context.AfterFunc would make
// each one real, with a cancel context and a children map of its own.
//
// Only the context package's own contexts may sit between ctx and that Ctx:
// a context of another type that ends on its own while passing Value
// through is not seen (nothing tells it apart without asking its Done).
func AfterFunc(ctx context.Context, f func()) (stop func() bool) {
	return register(ctx, f, true)
}

// register arranges for f to run once ctx ends (in a goroutine of its own
// when async).
func register(ctx context.Context, f func(), async bool) (stop func() bool) {
	if ctx.Err() != nil {
		// Ended: f runs now, and stop cannot keep it from running, as
		// with context.AfterFunc (the parent's own registration might
		// otherwise take a goroutine's hop to run it).
		if async {
			go f()
		} else {
			f()
		}
		return func() bool { return false }
	}
	if l, _ := ctx.(*Ctx); l != nil {
		return l.add(f, async)
	}
	if l, _ := ctx.Value(ctxKey{}).(*Ctx); l != nil && cancelKey != nil {
		// Nothing between ctx and l that ends on its own: the first
		// context to answer the context package's key is the one l
		// answers with (a cancel context between would answer itself, a
		// context.WithoutCancel nil).
		if mine := l.Value(cancelKey); mine != nil && ctx.Value(cancelKey) == mine {
			return l.add(f, async)
		}
	}
	return context.AfterFunc(ctx, f)
}

// add puts f on c's list, or runs it at once if c has ended.
func (c *Ctx) add(f func(), async bool) (stop func() bool) {
	a := &afterFunc{c: c, f: f, async: async}
	c.mu.Lock()
	if c.fired {
		c.mu.Unlock()
		a.run()
		return a.stop
	}
	a.i = len(c.funcs)
	c.funcs = append(c.funcs, a)
	c.mu.Unlock()
	c.watch()
	return a.stop
}

// watch makes c learn of its end once something is on its list: the
// deadline's timer (unless materialize set it) and a registration with its
// parent.
func (c *Ctx) watch() {
	c.mu.Lock()
	if c.watched || c.fired {
		c.mu.Unlock()
		return
	}
	c.watched = true
	ended := c.state.Load() == ended
	if c.state.Load() == live && !c.at.IsZero() && c.timer == nil {
		if d := time.Until(c.at); d > 0 {
			c.timer = time.AfterFunc(d, c.Cancel)
		} else {
			ended = true
		}
	}
	c.mu.Unlock()
	if ended {
		c.Cancel()
		return
	}
	// Outside mu: a parent that has ended runs parentEnded at once.
	stop := register(c.Context, c.fire, false)
	c.mu.Lock()
	if !c.fired {
		c.parentStop, stop = stop, nil
	}
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// afterFunc is a function registered to run when its Ctx ends.
type afterFunc struct {
	c     *Ctx
	f     func()
	i     int         // its index in c.funcs while there (under c.mu)
	once  atomic.Bool // set by the first of run and stop
	async bool
}

func (a *afterFunc) run() {
	if !a.once.CompareAndSwap(false, true) {
		return
	}
	if a.async {
		go a.f()
	} else {
		a.f()
	}
}

// stop keeps a from running and takes it off its Ctx's list; it reports
// whether it did keep it from running.
func (a *afterFunc) stop() bool {
	if !a.once.CompareAndSwap(false, true) {
		return false
	}
	c := a.c
	c.mu.Lock()
	if n := len(c.funcs); a.i < n && c.funcs[a.i] == a {
		last := c.funcs[n-1]
		c.funcs[a.i], last.i = last, a.i
		c.funcs[n-1] = nil
		c.funcs = c.funcs[:n-1]
	}
	c.mu.Unlock()
	return true
}
