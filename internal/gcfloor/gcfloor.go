// Package gcfloor keeps the Go garbage collector from running before the
// heap has grown by a minimum number of bytes since the last collection.
//
// Go's collector runs once the heap has grown by GOGC% of what the last
// collection found live (with the goroutine stacks and globals). A
// gateway's live heap is small, a few MB, while each request allocates a
// few KiB: at a few thousand requests per second it collects several times
// a second, and each mark phase slows the requests in flight, which is most
// of its tail at such rates. A Floor raises GOGC after each collection so
// that the next one comes no sooner than its minimum growth later, and
// leaves GOGC at its base once the live heap is large enough that the base
// gives that growth on its own (many open streams). It costs about the
// minimum growth in heap over Go's default (it retunes right after each
// collection); a memory limit (GOMEMLIMIT), the hard bound, still makes the
// collector run as memory nears it.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// maxPercent bounds the GOGC a Floor sets: a nearly empty heap would
// otherwise ask for an arbitrarily large one.
const maxPercent = 10000

// basePercent is Go's default GOGC, which a Floor never goes below.
const basePercent = 100

// Floor is a running floor under the collector's growth. Its methods are
// safe for concurrent use.
type Floor struct {
	min     atomic.Int64 // bytes; 0: Go's default pacing
	percent atomic.Int64 // the GOGC it set last
	stopped atomic.Bool

	mu      sync.Mutex // one tune at a time (the cleanup goroutines, Stop)
	samples []metrics.Sample
}

// Start runs a floor of growth bytes of heap growth between collections; 0
// leaves the collector as Go paces it. It returns nil, and changes
// nothing, when the GOGC environment variable is set (not empty), to any
// value: the operator chose.
func Start(growth int64) *Floor {
	if os.Getenv("GOGC") != "" { // empty is Go's default, as for the runtime
		return nil
	}
	f := &Floor{samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
	f.percent.Store(basePercent)
	f.min.Store(max(growth, 0))
	f.tune()
	f.arm()
	return f
}

// SetMin changes the minimum growth (a reloaded config); it takes effect
// from the next collection.
func (f *Floor) SetMin(growth int64) {
	if f != nil {
		f.min.Store(max(growth, 0))
	}
}

// Percent is the GOGC the floor set last; 0 for a nil floor.
func (f *Floor) Percent() int {
	if f == nil {
		return 0
	}
	return int(f.percent.Load())
}

// Stop ends the floor and puts GOGC back to Go's default, 100.
func (f *Floor) Stop() {
	if f == nil || f.stopped.Swap(true) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	debug.SetGCPercent(basePercent)
	f.percent.Store(basePercent)
}

// sentinel is an object nothing refers to: the collection that finds it
// unreachable queues its cleanup, so tune runs once after each collection.
// Cleanups run on goroutines of their own (not behind the process's
// finalizers, which could hold the tune back while the heap grows at the
// raised percent). At 24 bytes it is not a tiny allocation, whose cleanups
// may never run.
type sentinel [3]uintptr

// arm sets up the cleanup that tunes after the next collection.
func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) {
		if f.stopped.Load() {
			return
		}
		f.tune()
		f.arm()
	}, f)
}

// tune sets GOGC so that the next collection comes once the heap has grown
// by the minimum: the percent of what the last one found live (heap,
// stacks, globals) that makes that growth, never below the base.
func (f *Floor) tune() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() {
		return
	}
	metrics.Read(f.samples)
	var v [3]uint64 // live heap, stacks, globals
	for i, s := range f.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	want := percentFor(f.min.Load(), v[0], v[0]+v[1]+v[2])
	if int64(want) != f.percent.Load() {
		debug.SetGCPercent(want)
		f.percent.Store(int64(want))
	}
}

// heapMinimum is Go's smallest heap goal at GOGC 100; the runtime scales it
// by GOGC/100.
const heapMinimum = 4 << 20

// percentFor is the GOGC that lets the heap grow by growth before the next
// collection, after one that found heap bytes live and base bytes to scan
// (heap, stacks, globals): the goal is heap + base*GOGC/100, or the scaled
// heap minimum if that is more, which must stay within heap + growth. At
// least the base, at most maxPercent.
func percentFor(growth int64, heap, base uint64) int {
	if growth <= 0 || base == 0 {
		return basePercent
	}
	g := uint64(growth)
	p := (g*100 + base - 1) / base
	p = min(p, (heap+g)*100/heapMinimum) // the scaled minimum stays within the growth
	return int(max(basePercent, min(p, maxPercent)))
}
