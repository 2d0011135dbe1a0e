package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Two gctrace lines as Go 1.26 writes them, with an access-log line of
// the gateway between them.
const gcTraceSample = `gc 9 @4.276s 2%: 0.16+34+0.004 ms clock, 0.32+21/18/0+0.009 ms cpu, 71->71->35 MB, 75 MB goal, 4 MB stacks, 0 MB globals, 2 P
{"level":"info","message":"request","status":200}
gc 10 @5.476s 2%: 0.39+30+0.005 ms clock, 0.79+16/15/0+0.010 ms cpu, 72->72->35 MB, 74 MB goal, 4 MB stacks, 0 MB globals, 2 P
`

func TestParseGCTrace(t *testing.T) {
	t.Parallel()
	got := parseGCTrace([]byte(gcTraceSample))
	want := []gcCycle{{n: 9, markMS: 34, startMB: 71, liveMB: 35}, {n: 10, markMS: 30, startMB: 72, liveMB: 35}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestGCLogSpans: each call reads the collections logged since the last
// one; a line another write cut in two is still counted by the numbers of
// the next, and a line not yet ended waits for the next call.
func TestGCLogSpans(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "child.log")
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	g := &gcLog{path: path}
	write(gcTraceSample)
	if s := g.next(); s.cycles != 10 || s.read != 2 || s.allocMB != 71+72-35 || s.liveMB != 35+35 {
		t.Fatalf("first span %+v: want collections 1 to 10 (two lines read), 108 MB allocated", s)
	}
	// gc 11 cut by another write, gc 12 whole, gc 13 not ended yet.
	write("gc 11 @6.7s 2%: 1.2+{\"level\":\"info\"}\n26+0.11 ms clock, 2.4+18/13/0+0.22 ms cpu, 73->74->35 MB, 75 MB goal, 2 P\n" +
		"gc 12 @7.9s 1%: 0.41+27+0.006 ms clock, 0.83+12/15/0+0.012 ms cpu, 74->74->36 MB, 75 MB goal, 4 MB stacks, 0 MB globals, 2 P\n" +
		"gc 13 @9.2s 1%: 0.17+25+0.074 ms clock")
	if s := g.next(); s.cycles != 2 || s.read != 1 || s.markMS != 27 || s.allocMB != 74-35 {
		t.Fatalf("second span %+v: want 2 cycles (11 lost, 12 read), mark 27 ms, 39 MB", s)
	}
	write(", 0.34+13/11/2.1+0.14 ms cpu, 73->73->34 MB, 75 MB goal, 2 P\n")
	if s := g.next(); s.cycles != 1 || s.read != 1 || s.markMS != 25 || s.allocMB != 73-36 {
		t.Fatalf("third span %+v: want gc 13 once its line ended", s)
	}
	// Past a megabyte of access-log lines (several reads), and one line
	// longer than a read.
	write(strings.Repeat(`{"level":"info","message":"request","status":200}`+"\n", 30000) + strings.Repeat("x", 1<<20+10) + "\n" +
		"gc 14 @10.4s 1%: 0.089+34+0.007 ms clock, 0.17+15/18/0+0.015 ms cpu, 72->72->34 MB, 74 MB goal, 2 P\n")
	if s := g.next(); s.cycles != 1 || s.read != 1 || s.markMS != 34 || s.allocMB != 72-34 {
		t.Fatalf("span after a long log %+v: want gc 14", s)
	}
	if s := (*gcLog)(nil).next(); s != (gcSpan{}) {
		t.Fatalf("nil log: %+v", s)
	}
}

func TestWithGCTrace(t *testing.T) {
	t.Parallel()
	got := withGCTrace([]string{"A=1", "GODEBUG=madvdontneed=1"})
	if !slices.Equal(got, []string{"A=1", "GODEBUG=madvdontneed=1,gctrace=1"}) {
		t.Fatalf("kept GODEBUG: %q", got)
	}
	if got := withGCTrace([]string{"A=1"}); !slices.Equal(got, []string{"A=1", "GODEBUG=gctrace=1"}) {
		t.Fatalf("no GODEBUG: %q", got)
	}
}

// TestGCSaturationSentence: with the collections of the sweep's first step
// over the bar, the saturation sentence gives them, the floor's beside
// them; without, it keeps the general explanation.
func TestGCSaturationSentence(t *testing.T) {
	t.Parallel()
	pass := &scenarioResult{Name: "passthrough", Status: "ok", Legs: []*leg{{Target: "gateway", ThroughputRPS: 17844}}}
	pass.fig("gateway/floor CPU per request", 2.2, "×")
	sweep := &scenarioResult{Name: "sweep", Status: "ok"}
	sweep.fig("gateway/floor saturation rate", 0.5, "×")
	res := &results{Scenarios: []*scenarioResult{pass, sweep}}
	res.Targets = checkTargets(res)
	if got := strings.Join(shortfalls(res), "\n"); !strings.Contains(got, "garbage collection's mark work") {
		t.Fatalf("without GC figures: %s", got)
	}
	at := " at the gateway's first step over the bar"
	sweep.fig("gateway's first step over the bar", 13738, "rps")
	gcFigures(sweep, &leg{Target: "gateway", Seconds: 6, GCCycles: 5, GCMarkMS: 30.5, GCLiveMB: 35, AllocKBPerReq: 2.5},
		&leg{Target: "floor", Seconds: 6, GCCycles: 1, GCMarkMS: 6, GCLiveMB: 11, AllocKBPerReq: 0.2}, at)
	got := strings.Join(shortfalls(res), "\n")
	for _, want := range []string{"its first step over the bar, 13738 rps, is 0.77× the 17844 rps it serves under the closed model; the tail that ends it comes with its garbage collections.",
		"At 13738 rps, its first step over the bar, it ran 0.83 collections per second, each marking for 30.5 ms on average over a live heap of 35 MB",
		"2.5 KiB of heap per request", "the floor proxy, at the same rate, ran 0.17 per second, marking for 6 ms over 11 MB, and allocated 0.2 KiB per request"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

func FuzzParseGCTrace(f *testing.F) {
	f.Add([]byte(gcTraceSample))
	f.Add([]byte("gc 1 @0.1s 0%: 0+0+0 ms clock, x, 99999999999999999999->1->2 MB"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range parseGCTrace(b) {
			if c.n < 0 || c.startMB < 0 || c.liveMB < 0 {
				t.Fatalf("negative in %+v", c)
			}
		}
	})
}
