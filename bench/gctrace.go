package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strconv"
	"sync"
)

// Every child runs with GODEBUG=gctrace=1 (programs other than Go ignore
// it), so that each garbage collection of the measured processes leaves a
// line in the child's log, and a leg can say how many collections ran while
// it measured, how long each one marked and how many bytes the process
// allocated per request. A collection's mark phase takes CPU from the
// requests in flight (its own workers, and assists by the goroutines that
// allocate), which on cores shared with the load generator and the mock
// slows every request in flight while it lasts: the tail that the sweep's
// p99 bar meets.

// gcCycle is one collection, as its gctrace line reports it.
type gcCycle struct {
	n       int     // the collection's number, counted from 1 by the process
	markMS  float64 // the concurrent mark phase, wall clock
	startMB int     // the heap when the collection started
	liveMB  int     // the live heap it found
}

// gcLine matches a gctrace line (runtime package documentation, "gctrace"):
// gc N @Ts P%: sweep-term+mark+mark-term ms clock, ... S->E->L MB, ...
var gcLine = regexp.MustCompile(`gc (\d+) @[0-9.]+s \d+%: [0-9.]+\+([0-9.]+)\+[0-9.]+ ms clock, [^,]*, (\d+)->\d+->(\d+) MB`)

// parseGCTrace returns the collections of the gctrace lines in b. Lines of
// other writers to the same file (the gateway's access log: tens of MB in a
// leg) are passed over by a search for a gctrace line's "ms clock", not by
// the regular expression; a gctrace line that another write cut in two is
// missed (the numbers of the next ones still count it).
func parseGCTrace(b []byte) []gcCycle {
	var out []gcCycle
	for {
		i := bytes.Index(b, clockMark)
		if i < 0 {
			return out
		}
		start := bytes.LastIndexByte(b[:i], '\n') + 1
		end := bytes.IndexByte(b[i:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += i
		}
		if c, ok := parseGCLine(b[start:end]); ok {
			out = append(out, c)
		}
		if end == len(b) {
			return out
		}
		b = b[end+1:]
	}
}

var clockMark = []byte(" ms clock, ")

func parseGCLine(line []byte) (gcCycle, bool) {
	m := gcLine.FindSubmatch(line)
	if m == nil {
		return gcCycle{}, false
	}
	n, err1 := strconv.Atoi(string(m[1]))
	mark, err2 := strconv.ParseFloat(string(m[2]), 64)
	start, err3 := strconv.Atoi(string(m[3]))
	live, err4 := strconv.Atoi(string(m[4]))
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return gcCycle{}, false
	}
	return gcCycle{n: n, markMS: mark, startMB: start, liveMB: live}, true
}

// gcLog reads the collections a child appends to its log file.
type gcLog struct {
	path string

	mu       sync.Mutex
	off      int64 // read up to here (the end of the last whole line)
	lastN    int   // the last collection's number seen
	lastLive int   // and its live heap, MB
}

// gcSpan is what the collections of one measured stretch add up to.
type gcSpan struct {
	cycles  int     // collections that ran (by their numbers)
	markMS  float64 // the mark phases of those whose line was read
	read    int     // how many lines were read
	allocMB int     // bytes allocated, MB: each collection's start heap less the live heap of the one before
	liveMB  int     // the live heaps the read collections found, summed
}

func (s *gcSpan) add(o gcSpan) {
	s.cycles += o.cycles
	s.markMS += o.markMS
	s.read += o.read
	s.allocMB += o.allocMB
	s.liveMB += o.liveMB
}

// next returns the collections logged since the last call.
func (g *gcLog) next() gcSpan {
	if g == nil {
		return gcSpan{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	f, err := os.Open(g.path)
	if err != nil {
		return gcSpan{}
	}
	defer f.Close()
	var s gcSpan
	buf := make([]byte, 1<<20)
	for {
		n, err := f.ReadAt(buf, g.off)
		end := bytes.LastIndexByte(buf[:n], '\n') + 1 // whole lines only
		if end == 0 {
			if n == len(buf) { // a line longer than buf: not a gctrace line
				g.off += int64(n)
				continue
			}
			return s
		}
		g.off += int64(end)
		for _, c := range parseGCTrace(buf[:end]) {
			if c.n <= g.lastN {
				continue
			}
			// Numbers start at 1 on an empty heap: 0 and 0 are the
			// baseline before the first collection.
			s.cycles += c.n - g.lastN
			s.allocMB += max(c.startMB-g.lastLive, 0)
			s.markMS += c.markMS
			s.liveMB += c.liveMB
			s.read++
			g.lastN, g.lastLive = c.n, c.liveMB
		}
		if err != nil && err != io.EOF || n < len(buf) {
			return s
		}
	}
}
