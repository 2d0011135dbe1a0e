package lazyctx

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type key struct{}

// closedWithin reports whether ch closes within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestExpiresUnwatched(t *testing.T) {
	t.Parallel()
	if err := New(t.Context(), time.Now().Add(time.Hour)).Err(); err != nil {
		t.Fatalf("Err before the deadline = %v", err)
	}
	c := New(t.Context(), time.Now().Add(20*time.Millisecond))
	time.Sleep(40 * time.Millisecond)
	// Nothing waited on it: no timer ran, yet it has ended, and every way of
	// asking says so.
	if cause := context.Cause(c); !errors.Is(cause, context.Canceled) {
		t.Fatalf("Cause after an unwatched deadline = %v", cause)
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after the deadline = %v", err)
	}
	if !closedWithin(c.Done(), time.Second) {
		t.Fatal("Done open after the deadline")
	}
	if c.Stop() {
		t.Fatal("Stop after the deadline reported it had not passed")
	}
}

func TestDoneClosesAtDeadline(t *testing.T) {
	t.Parallel()
	c := New(t.Context(), time.Now().Add(30*time.Millisecond))
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	child, cancel := context.WithCancel(c)
	defer cancel()
	if !closedWithin(c.Done(), 2*time.Second) {
		t.Fatal("Done not closed by the deadline")
	}
	if !closedWithin(child.Done(), time.Second) || !closedWithin(ran, time.Second) {
		t.Fatal("a child or an AfterFunc of the context did not end with it")
	}
	if c.Stop() {
		t.Fatal("Stop after the timer fired reported it had not")
	}
}

func TestStopBeforeDeadline(t *testing.T) {
	t.Parallel()
	for _, real := range []bool{false, true} {
		c := New(t.Context(), time.Now().Add(200*time.Millisecond))
		if real {
			_ = c.Done()
		}
		if !c.Stop() {
			t.Fatalf("real=%v: Stop before the deadline reported it passed", real)
		}
		if c.timer != nil {
			// A stream holds its context long after its deadline stopped.
			t.Fatalf("real=%v: a stopped deadline keeps its timer", real)
		}
		if !c.Stop() {
			t.Fatalf("real=%v: a second Stop reported otherwise than the first", real)
		}
		time.Sleep(250 * time.Millisecond)
		if err := c.Err(); err != nil {
			t.Fatalf("real=%v: Err after a stopped deadline = %v", real, err)
		}
		if closedWithin(c.Done(), 20*time.Millisecond) {
			t.Fatalf("real=%v: a stopped deadline closed Done", real)
		}
		c.Cancel()
		if !errors.Is(c.Err(), context.Canceled) || !closedWithin(c.Done(), time.Second) {
			t.Fatalf("real=%v: Cancel did not cancel: %v", real, c.Err())
		}
		if c.Stop() {
			t.Fatalf("real=%v: Stop after Cancel reported a live context", real)
		}
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	for _, real := range []bool{false, true} {
		c := New(t.Context(), time.Now().Add(time.Hour))
		ran := make(chan struct{})
		if real {
			context.AfterFunc(c, func() { close(ran) })
		}
		c.Cancel()
		c.Cancel() // idempotent
		if !errors.Is(c.Err(), context.Canceled) || !closedWithin(c.Done(), time.Second) {
			t.Fatalf("real=%v: after Cancel Err = %v", real, c.Err())
		}
		if real && !closedWithin(ran, time.Second) {
			t.Fatal("Cancel did not run an AfterFunc of the context")
		}
	}
}

func TestFollowsParent(t *testing.T) {
	t.Parallel()
	why := errors.New("client left")
	for _, real := range []bool{false, true} {
		parent, cancel := context.WithCancelCause(context.WithValue(t.Context(), key{}, "v"))
		c := New(parent, time.Now().Add(time.Hour))
		if c.Value(key{}) != "v" {
			t.Fatal("a parent's value is not seen")
		}
		if real {
			_ = c.Done()
		}
		cancel(why)
		if !errors.Is(c.Err(), context.Canceled) || context.Cause(c) != why {
			t.Fatalf("real=%v: Err %v Cause %v, want the parent's", real, c.Err(), context.Cause(c))
		}
		if !closedWithin(c.Done(), time.Second) {
			t.Fatalf("real=%v: Done open after the parent ended", real)
		}
		if c.Value(key{}) != "v" {
			t.Fatal("a parent's value is not seen once real")
		}
	}
}

func TestNoDeadline(t *testing.T) {
	t.Parallel()
	c := New(t.Context(), time.Time{})
	time.Sleep(10 * time.Millisecond)
	if c.Err() != nil || closedWithin(c.Done(), 20*time.Millisecond) {
		t.Fatalf("a context without a deadline ended on its own: %v", c.Err())
	}
	if !c.Stop() {
		t.Fatal("Stop without a deadline reported it had passed")
	}
	c.Cancel()
	if !errors.Is(c.Err(), context.Canceled) || !closedWithin(c.Done(), time.Second) {
		t.Fatalf("after Cancel Err = %v", c.Err())
	}
}

// TestConcurrent runs every method at once (for -race), and checks that
// each answer agrees with the others: an end Stop or Err reports stays, and
// Done closes.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	for i := range 50 {
		c := New(t.Context(), time.Now().Add(time.Duration(i%4)*time.Millisecond))
		errs := make(chan string, 8)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				switch w {
				case 0:
					if !closedWithin(c.Done(), 5*time.Second) {
						errs <- "Done never closed"
					}
				case 1:
					for range 200 {
						if c.Err() != nil {
							if c.Err() == nil {
								errs <- "Err went back to nil"
							}
							return
						}
						time.Sleep(50 * time.Microsecond)
					}
				case 2:
					if !c.Stop() && c.Err() == nil {
						errs <- "Stop reported an end that Err does not show"
					}
				case 3:
					_ = context.Cause(c)
				}
			})
		}
		time.AfterFunc(time.Duration(i%3)*time.Millisecond, c.Cancel) // ends a stopped one too
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
		if c.Err() == nil || context.Cause(c) == nil {
			t.Fatal("no error after Done closed")
		}
	}
}

// TestNested is the gateway's shape: a model call's context with a
// deadline under a request's context under the server's, and the upstream
// call's context.AfterFunc under a value context of it. Each of the three
// ends reaches the AfterFunc, and registering starts no goroutine.
func TestNested(t *testing.T) {
	t.Parallel()
	ends := map[string]func(base context.CancelFunc, req, call *Ctx){
		"the request is cancelled": func(_ context.CancelFunc, req, _ *Ctx) { req.Cancel() },
		"the server shuts down":    func(base context.CancelFunc, _, _ *Ctx) { base() },
		"the call's deadline":      nil,
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			base, cancel := context.WithCancel(t.Context())
			defer cancel()
			req := New(base, time.Time{})
			at := time.Now().Add(time.Hour)
			if end == nil {
				at = time.Now().Add(30 * time.Millisecond)
			}
			call := New(req, at)
			ran := make(chan struct{})
			context.AfterFunc(context.WithValue(call, key{}, 1), func() { close(ran) })
			if end != nil {
				end(cancel, req, call)
			}
			if !closedWithin(ran, 2*time.Second) {
				t.Fatal("the call's AfterFunc did not run")
			}
			if !errors.Is(call.Err(), context.Canceled) {
				t.Fatalf("the call's Err = %v", call.Err())
			}
			if end == nil && req.Err() != nil {
				t.Fatalf("the call's deadline ended the request: %v", req.Err())
			}
		})
	}
	t.Run("no goroutine per registration", func(t *testing.T) {
		before := runtime.NumGoroutine()
		var calls []*Ctx
		for range 200 {
			call := New(New(context.Background(), time.Time{}), time.Now().Add(time.Hour))
			context.AfterFunc(context.WithValue(call, key{}, 1), func() {})
			calls = append(calls, call)
		}
		// A parent the context package does not recognise costs a goroutine
		// per child; a Ctx is recognised through its real context.
		if d := runtime.NumGoroutine() - before; d > 50 {
			t.Fatalf("%d goroutines for 200 registrations", d)
		}
		for _, c := range calls {
			c.Cancel()
		}
	})
}

// TestAllocs: a call that only asks Err costs the context itself,
// where a cancel context and a timer cost three (and two more, a done
// channel and a children map, for a parent nothing waited on yet).
func TestAllocs(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := testing.AllocsPerRun(200, func() {
		c := New(parent, time.Now().Add(time.Minute))
		_ = c.Err()
		c.Stop()
		c.Cancel()
	})
	if n > 1 {
		t.Fatalf("%v allocations per call, want 1", n)
	}
}

// BenchmarkCallDeadline compares the deadline of a call that is answered
// at once: a cancel context with a timer against Ctx.
func BenchmarkCallDeadline(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("WithCancel+AfterFunc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithCancel(parent)
			t := time.AfterFunc(time.Minute, cancel)
			_ = ctx.Err()
			t.Stop()
			cancel()
		}
	})
	b.Run("Ctx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := New(parent, time.Now().Add(time.Minute))
			_ = c.Err()
			c.Stop()
			c.Cancel()
		}
	})
}

// streamChain is the gateway's shape for a stream: a model call's Ctx with a
// deadline under a request's Ctx under the server's context, value contexts
// between, and the function that interrupts the upstream read registered
// under a value context of the call's.
func streamChain(base context.Context, f func(), register func(context.Context, func()) func() bool) (req, call *Ctx, stop func() bool) {
	req = New(base, time.Time{})
	call = New(context.WithValue(req, key{}, 1), time.Now().Add(time.Hour))
	return req, call, register(context.WithValue(call, key{}, 2), f)
}

// AfterFunc reaches its function from every end of the chain, as
// context.AfterFunc does, and makes no context on the way real.
func TestAfterFuncEnds(t *testing.T) {
	t.Parallel()
	ends := map[string]func(base context.CancelFunc, req, call *Ctx){
		"the request is cancelled": func(_ context.CancelFunc, req, _ *Ctx) { req.Cancel() },
		"the server shuts down":    func(base context.CancelFunc, _, _ *Ctx) { base() },
		"the call is cancelled":    func(_ context.CancelFunc, _, call *Ctx) { call.Cancel() },
		"the call's deadline":      nil,
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			base, cancel := context.WithCancel(t.Context())
			defer cancel()
			ran := make(chan struct{})
			req := New(base, time.Time{})
			at := time.Now().Add(time.Hour)
			if end == nil {
				at = time.Now().Add(30 * time.Millisecond)
			}
			call := New(context.WithValue(req, key{}, 1), at)
			AfterFunc(context.WithValue(call, key{}, 2), func() { close(ran) })
			if req.isReal.Load() || call.isReal.Load() {
				t.Fatal("AfterFunc made a Ctx real")
			}
			if end != nil {
				end(cancel, req, call)
			}
			if !closedWithin(ran, 2*time.Second) {
				t.Fatal("the function did not run")
			}
			if !errors.Is(call.Err(), context.Canceled) {
				t.Fatalf("the call's Err = %v", call.Err())
			}
			if end == nil && req.Err() != nil {
				t.Fatalf("the call's deadline ended the request: %v", req.Err())
			}
			req.mu.Lock()
			left := len(req.funcs)
			req.mu.Unlock()
			if left != 0 && req.Err() == nil {
				t.Fatalf("the ended call is still registered with the live request (%d)", left)
			}
		})
	}
}

// A stopped function never runs and leaves nothing registered; a function
// registered on an ended Ctx runs at once.
func TestAfterFuncStop(t *testing.T) {
	t.Parallel()
	base, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan struct{}, 2)
	req, call, stop := streamChain(base, func() { ran <- struct{}{} }, AfterFunc)
	_, _, stop2 := streamChain(base, func() { ran <- struct{}{} }, AfterFunc)
	if !stop() || stop() {
		t.Fatal("stop reports true once, then false")
	}
	call.mu.Lock()
	n := len(call.funcs)
	call.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d functions left on the call after stop", n)
	}
	call.Cancel()
	req.Cancel()
	if closedWithin(make(chan struct{}), 50*time.Millisecond); len(ran) != 0 {
		t.Fatal("a stopped function ran")
	}
	cancel() // the second chain's end
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("the server's end did not reach the second chain")
	}
	if stop2() {
		t.Fatal("stop after the function ran reported it stopped it")
	}
	late := make(chan struct{})
	AfterFunc(context.WithValue(call, key{}, 3), func() { close(late) })
	if !closedWithin(late, 2*time.Second) {
		t.Fatal("a function registered on an ended Ctx did not run")
	}
}

// Only value contexts are seen through: a context between that ends on its
// own, or one that never ends, is left to context.AfterFunc.
func TestAfterFuncBetween(t *testing.T) {
	t.Parallel()
	call := New(t.Context(), time.Time{})
	between, cancel := context.WithCancel(context.WithValue(call, key{}, 1))
	ran := make(chan struct{})
	AfterFunc(context.WithValue(between, key{}, 2), func() { close(ran) })
	cancel()
	if !closedWithin(ran, 2*time.Second) {
		t.Fatal("the end of a cancel context between did not run the function")
	}
	never := make(chan struct{})
	AfterFunc(context.WithoutCancel(call), func() { close(never) })
	call.Cancel()
	if closedWithin(never, 50*time.Millisecond) {
		t.Fatal("a function under context.WithoutCancel ran at the Ctx's end")
	}
}

// TestAfterFuncConcurrent ends, stops and registers at once (for -race):
// every function runs exactly when it was not stopped first.
func TestAfterFuncConcurrent(t *testing.T) {
	t.Parallel()
	for i := range 100 {
		base, cancel := context.WithCancel(t.Context())
		req := New(base, time.Time{})
		call := New(req, time.Now().Add(time.Duration(i%5)*time.Millisecond))
		const n = 8
		var ran [n]atomic.Int32
		stops := make([]func() bool, n)
		var wg sync.WaitGroup
		for k := range n {
			wg.Go(func() { stops[k] = AfterFunc(call, func() { ran[k].Add(1) }) })
		}
		wg.Wait()
		stopped := make([]bool, n)
		for k := range n {
			wg.Go(func() { stopped[k] = stops[k]() })
		}
		switch i % 3 {
		case 0:
			wg.Go(call.Cancel)
		case 1:
			wg.Go(req.Cancel)
		case 2:
			wg.Go(cancel)
		}
		wg.Wait()
		call.Cancel()
		for k := range n {
			want := int32(1)
			if stopped[k] {
				want = 0
			}
			waitFor := time.Now().Add(2 * time.Second)
			for ran[k].Load() != want && time.Now().Before(waitFor) {
				time.Sleep(time.Millisecond)
			}
			if got := ran[k].Load(); got != want {
				t.Fatalf("round %d function %d ran %d times, stopped %v", i, k, got, stopped[k])
			}
		}
		cancel()
	}
}

// TestAfterFuncHoldsLess: what an open stream's chain holds while it waits,
// with the interrupt registered by AfterFunc against context.AfterFunc
// (which makes both Ctx real: a cancel context each, with its done channel
// and children map).
func TestAfterFuncHoldsLess(t *testing.T) {
	const n = 2000
	held := func(register func(context.Context, func()) func() bool) uint64 {
		base, cancel := context.WithCancel(context.Background())
		defer cancel()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		calls := make([]*Ctx, n)
		for i := range calls {
			_, calls[i], _ = streamChain(base, func() {}, register)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		runtime.KeepAlive(calls)
		return (ms.HeapAlloc - before) / n
	}
	std := held(context.AfterFunc)
	own := held(AfterFunc)
	t.Logf("bytes held per stream: context.AfterFunc %d, AfterFunc %d", std, own)
	if own*10 > std*6 {
		t.Fatalf("AfterFunc's chain holds %d bytes, context.AfterFunc's %d: want at most 0.6x", own, std)
	}
}

// BenchmarkStreamChain is a stream's contexts from start to end: the
// request's and the call's Ctx, the interrupt registered and stopped, the
// call's deadline stopped, both cancelled.
func BenchmarkStreamChain(b *testing.B) {
	for _, bc := range []struct {
		name     string
		register func(context.Context, func()) func() bool
	}{{"context.AfterFunc", context.AfterFunc}, {"AfterFunc", AfterFunc}} {
		b.Run(bc.name, func(b *testing.B) {
			base := New(context.Background(), time.Time{})
			defer base.Cancel()
			b.ReportAllocs()
			for b.Loop() {
				req, call, stop := streamChain(base, func() {}, bc.register)
				call.Stop()
				stop()
				call.Cancel()
				req.Cancel()
			}
		})
	}
}

// The server's base is a Ctx over context.Background: a chain under it makes
// nothing real either, the first one included.
func TestAfterFuncUnderARootCtx(t *testing.T) {
	t.Parallel()
	base := New(context.Background(), time.Time{})
	ran := make(chan struct{})
	req, call, stop := streamChain(base, func() { close(ran) }, AfterFunc)
	defer stop()
	if call.isReal.Load() || req.isReal.Load() || base.isReal.Load() {
		t.Fatalf("made real: call %v, request %v, base %v", call.isReal.Load(), req.isReal.Load(), base.isReal.Load())
	}
	base.Cancel()
	if !closedWithin(ran, 2*time.Second) {
		t.Fatal("the base's end did not reach the function")
	}
}

// On a context that has already ended, the function runs and stop reports
// that it could not keep it from running, as with context.AfterFunc.
func TestAfterFuncOnAnEndedContext(t *testing.T) {
	t.Parallel()
	root, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		ran := make(chan struct{})
		call := New(context.WithValue(root, key{}, 1), time.Time{})
		if AfterFunc(context.WithValue(call, key{}, 2), func() { close(ran) })() {
			t.Fatalf("try %d: stop reported true on an ended context", i)
		}
		if !closedWithin(ran, 2*time.Second) {
			t.Fatalf("try %d: the function did not run", i)
		}
	}
}

// A Stop that reports the deadline passed is followed by an Err that says
// so, also while the timer's own Cancel is still on its way.
func TestStopAfterTheTimerFired(t *testing.T) {
	t.Parallel()
	for i := range 200 {
		c := New(t.Context(), time.Now().Add(time.Duration(i%3)*100*time.Microsecond))
		if i%2 == 0 {
			_ = c.Done()
		} else {
			AfterFunc(c, func() {})
		}
		time.Sleep(200 * time.Microsecond)
		if !c.Stop() && c.Err() == nil {
			t.Fatalf("try %d: Stop reported the deadline passed, Err is nil", i)
		}
		c.Cancel()
	}
}
