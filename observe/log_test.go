package observe

import (
	"bytes"
	"encoding/json"
	"runtime"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// These tests cover the "Load and memory" lines of
// the peer-gateway pitfalls for the access log: a log sink that
// stops accepting writes must neither block the request path nor make the
// process queue lines without bound, and dropped lines must be counted.

// blockingSink blocks every Write until unblock is called, then keeps the
// lines it receives. Safe for concurrent use.
type blockingSink struct {
	gate    chan struct{}
	entered chan struct{} // closed by the first Write
	enter   sync.Once
	once    sync.Once
	mu      sync.Mutex
	buf     bytes.Buffer
	n       int
}

func newBlockingSink() *blockingSink {
	return &blockingSink{gate: make(chan struct{}), entered: make(chan struct{})}
}

func (s *blockingSink) Write(p []byte) (int, error) {
	s.enter.Do(func() { close(s.entered) })
	<-s.gate
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += bytes.Count(p, []byte("\n")) // the logger may batch several lines in one write
	s.buf.Write(p)
	return len(p), nil
}

func (s *blockingSink) unblock() { s.once.Do(func() { close(s.gate) }) }

func (s *blockingSink) lines() (int, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, append([]byte(nil), s.buf.Bytes()...)
}

func droppedTotal(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := logDropped.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// logLines logs n access-log-like lines from 4 goroutines and reports on
// done when every call has returned.
func logLines(log zl, n int) chan struct{} {
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Go(func() {
				for i := g; i < n; i += 4 {
					log.info(i)
				}
			})
		}
		wg.Wait()
		close(done)
	}()
	return done
}

// Pitfall: latency climbing past a few tens of requests per second because
// logging is synchronous, and memory that only grows because an in-process
// log queue is unbounded when its sink fails. With a sink that blocks, 200k
// log calls must all return (the failure mode is a hang, so the only time
// bound is a generous hang detector), the heap must not grow by more than a
// few MB, and once the sink moves again every line is either written or
// counted in gateway_log_lines_dropped_total. The gateway has no spend
// records; bench/ measures latency under load end to end.
func TestLoggerNeverBlocksAndStaysBounded(t *testing.T) {
	t.Parallel()
	const n = 200_000
	sink := newBlockingSink()
	t.Cleanup(sink.unblock)
	log, closeLog := NewLogger("info", "json", sink)
	dropped0 := droppedTotal(t)
	// The logger's writer goroutine takes a first line and gets stuck in
	// the sink: from now on the sink accepts nothing.
	zl{log}.info(-1)
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first line never reached the sink")
	}
	before := heapAfterGC()

	done := logLines(zl{log}, n)
	select {
	case <-done:
	case <-time.After(60 * time.Second): // a deadlock guard: 200,000 lines take seconds under -race on a loaded machine
		t.Fatal("logging blocked on a sink that does not accept writes")
	}
	after := heapAfterGC()
	if grown := int64(after) - int64(before); grown > 8<<20 {
		t.Fatalf("the heap grew by %d bytes while %d lines were logged to a blocked sink: lines are queued without bound", grown, n)
	} else {
		t.Logf("heap grew by %d bytes for %d lines to a blocked sink", grown, n)
	}

	// Drops should show in the metric while the sink is still stuck: that
	// is when an operator needs to see them. (Only this test makes the
	// logger drop lines, so the global counter's delta is its own.)
	stuckCounted := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if stuckCounted = droppedTotal(t) > dropped0; stuckCounted {
			break
		}
	}

	// The sink moves again: every line is written or counted as dropped.
	sink.unblock()
	closeLog() // flushes the ring
	written, out := sink.lines()
	dropped := droppedTotal(t) - dropped0
	if dropped <= 0 {
		t.Fatalf("%d lines written of %d, none counted as dropped", written, n)
	}
	// Allow 1% for lines still in flight when the sink resumed.
	if total := written + int(dropped); total < n+1-n/100 || total > n+1+n/100 {
		t.Fatalf("%d written + %v dropped = %d, want about %d", written, dropped, total, n)
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) != written || !bytes.Contains(lines[0], []byte(`"seq":-1`)) {
		t.Fatalf("%d lines for %d writes; first %q", len(lines), written, lines[0])
	}
	for i, line := range lines {
		if !json.Valid(line) {
			t.Fatalf("line %d is not JSON: %q", i, line)
		}
	}
	if !stuckCounted {
		t.Fatal("while the sink is stuck, gateway_log_lines_dropped_total stays at 0: drops must be counted when they happen")
	}
}

// A healthy sink gets every line, in JSON, and nothing is counted as dropped.
func TestLoggerDeliversToAHealthySink(t *testing.T) {
	t.Parallel()
	sink := newBlockingSink()
	sink.unblock()
	log, closeLog := NewLogger("info", "json", sink)
	const n = 500
	for i := 0; i < n; i++ {
		zl{log}.info(i)
		if i%50 == 49 {
			time.Sleep(20 * time.Millisecond) // let the 10ms poller drain the ring
		}
	}
	log.Debug().Msg("below the level")
	closeLog()
	written, out := sink.lines()
	if written != n {
		t.Fatalf("%d lines written, want %d", written, n)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var v struct {
			Level   string `json:"level"`
			Message string `json:"message"`
			Seq     int    `json:"seq"`
			Time    string `json:"time"`
		}
		if err := json.Unmarshal(line, &v); err != nil || v.Level != "info" || v.Message != "request" || v.Seq != i || v.Time == "" {
			t.Fatalf("line %d: %q (%v)", i, line, err)
		}
	}
}

// zl logs access-log-like lines.
type zl struct{ log zerolog.Logger }

func (z zl) info(i int) {
	z.log.Info().Str("request_id", "req-0123456789").Str("model", "gpt-x").Int("status", 200).
		Dur("latency", 12*time.Millisecond).Int("seq", i).Msg("request")
}

// countingSink counts the writes that reach it.
type countingSink struct {
	mu     sync.Mutex
	writes int
	lines  int
}

func (c *countingSink) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	c.lines += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

// A line logged soon after another, as requests under load log them, goes
// out in the same write: the writer lingers after the first line of a
// batch instead of waking and writing for every line.
func TestLoggerBatchesLinesOfABurst(t *testing.T) {
	t.Parallel()
	sink := &countingSink{}
	q := newQueueWriter(sink, 16, time.Second) // long enough that a stalled test machine still lingers
	_, _ = q.Write([]byte("{\"n\":1}\n"))
	time.Sleep(20 * time.Millisecond) // a writer that does not linger has written the first line by now
	_, _ = q.Write([]byte("{\"n\":2}\n"))
	q.close()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.lines != 2 || sink.writes != 1 {
		t.Fatalf("%d lines in %d writes, want 2 in 1", sink.lines, sink.writes)
	}
}
