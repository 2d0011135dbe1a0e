package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// The tests are not parallel: GOGC is the process's. The test binary runs
// without GOGC in its environment unless a test sets it.

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		growth     int64
		heap, base uint64
		want       int
	}{
		{0, 5 * mib, 6 * mib, 100},            // off
		{32 * mib, 0, 0, 100},                 // nothing collected yet
		{32 * mib, 5 * mib, 6 * mib, 534},     // 6 MiB * 5.34 = 32 MiB of growth
		{32 * mib, 200 * mib, 240 * mib, 100}, // a big heap grows by more on its own
		// A tiny heap: 3200% would scale Go's 4 MiB minimum goal to 128 MiB,
		// past heap + growth (33 MiB): the percent stops where it fits.
		{32 * mib, 1 * mib, 1 * mib, 825},
		{1 << 40, 1, 1, maxPercent},
	} {
		if got := percentFor(c.growth, c.heap, c.base); got != c.want {
			t.Errorf("percentFor(%d, %d, %d) = %d, want %d", c.growth, c.heap, c.base, got, c.want)
		}
	}
}

// collections is how many collections allocating n bytes of garbage in
// small objects takes.
func collections(n int) uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.NumGC
	var sink []byte
	for i := 0; i < n/1024; i++ {
		sink = make([]byte, 1024)
	}
	_ = sink
	runtime.ReadMemStats(&ms)
	return ms.NumGC - before
}

// startFloor starts a floor of growth bytes with GOGC unset and Go's
// default percent in place; the floor stops when the test ends.
func startFloor(t *testing.T, growth int64) *Floor {
	t.Helper()
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	debug.SetGCPercent(basePercent)
	f := Start(growth)
	if f == nil {
		t.Fatal("Start returned nil without GOGC set")
	}
	t.Cleanup(f.Stop)
	return f
}

// liveHeap returns mib MiB in 1 KiB objects, for the caller to keep live.
func liveHeap(mib int) [][]byte {
	live := make([][]byte, 0, mib<<10)
	for range mib << 10 {
		live = append(live, make([]byte, 1024))
	}
	return live
}

// waitPercent waits until f has set a GOGC that ok accepts.
func waitPercent(t *testing.T, f *Floor, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(f.Percent()) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC stayed %d", f.Percent())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	return f.Percent()
}

// TestFloorSpacesCollections: on this test's small heap, 48 MiB of garbage
// takes many collections at Go's default pacing and at most two with a
// 64 MiB floor; Stop puts the default back.
func TestFloorSpacesCollections(t *testing.T) {
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	debug.SetGCPercent(basePercent)
	runtime.GC()
	without := collections(48 << 20)

	f := startFloor(t, 64<<20)
	p := waitPercent(t, f, func(p int) bool { return p > basePercent })
	runtime.GC()
	with := collections(48 << 20)
	t.Logf("GOGC %d; collections for 48 MiB of garbage: %d at the default, %d with the floor", p, without, with)
	if without < 4 {
		t.Fatalf("only %d collections at the default pacing: the heap is not small enough for this test", without)
	}
	if with > 2 {
		t.Errorf("%d collections with a 64 MiB floor, want at most 2", with)
	}

	f.Stop()
	if got := debug.SetGCPercent(basePercent); got != basePercent {
		t.Errorf("GOGC after Stop = %d, want %d", got, basePercent)
	}
}

// TestFloorLeavesBigHeapAlone: a live heap whose default growth already
// exceeds the floor keeps GOGC at the base.
func TestFloorLeavesBigHeapAlone(t *testing.T) {
	live := liveHeap(64)
	f := startFloor(t, 16<<20)
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := f.Percent(); p != basePercent {
		t.Errorf("GOGC %d under a 64 MiB live heap with a 16 MiB floor, want %d", p, basePercent)
	}
	runtime.KeepAlive(live)
}

// TestFloorFollowsTheLiveHeap: the floor tunes after every collection, not
// only at Start: GOGC comes down to the base while a large live heap is
// held, and goes up again once it is dropped.
func TestFloorFollowsTheLiveHeap(t *testing.T) {
	f := startFloor(t, 16<<20)
	waitPercent(t, f, func(p int) bool { return p > basePercent })
	live := liveHeap(64)
	waitPercent(t, f, func(p int) bool { return p == basePercent })
	runtime.KeepAlive(live) // garbage from here on
	waitPercent(t, f, func(p int) bool { return p > basePercent })
}

// TestFloorDefersToGOGC: an operator's GOGC wins, whatever its value; an
// empty one is Go's default and does not count.
func TestFloorDefersToGOGC(t *testing.T) {
	for _, v := range []string{"150", "100", "off"} {
		t.Setenv("GOGC", v)
		if f := Start(64 << 20); f != nil {
			f.Stop()
			t.Fatalf("Start ran a floor with GOGC=%s", v)
		}
	}
	t.Setenv("GOGC", "")
	f := Start(64 << 20)
	if f == nil {
		t.Fatal("an empty GOGC turned the floor off")
	}
	f.Stop()
}

// TestFloorSetMin: a minimum of 0 (a reload that turns the floor off) puts
// GOGC back to the base at the next collection.
func TestFloorSetMin(t *testing.T) {
	f := startFloor(t, 64<<20)
	waitPercent(t, f, func(p int) bool { return p > basePercent })
	f.SetMin(0)
	waitPercent(t, f, func(p int) bool { return p == basePercent })
}
