package observe

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

var logDropped = Factory.NewCounter(prometheus.CounterOpts{
	Name: "gateway_log_lines_dropped_total", Help: "Log lines dropped because the log sink fell behind.",
})

// logQueue is how many lines may wait for a slow sink before new ones are
// dropped: about a megabyte of typical access lines.
const logQueue = 4096

// NewLogger returns the process logger. JSON lines go through a bounded
// queue drained by one goroutine: a slow or stuck log sink drops lines
// (counted at once in gateway_log_lines_dropped_total) instead of slowing
// requests or growing memory. Console mode writes synchronously, for people
// reading a terminal. Every line passes through Secrets before it reaches
// w (in JSON mode on the queue's goroutine, off the request path). The
// returned close flushes what is queued (waiting at most two seconds for a
// stuck sink).
func NewLogger(level, format string, w io.Writer) (zerolog.Logger, func()) {
	if w == nil {
		w = os.Stderr
	}
	w = Secrets.Writer(w)
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if format == "console" {
		return zerolog.New(zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}).Level(lvl).With().Timestamp().Logger(), func() {}
	}
	q := newQueueWriter(w, logQueue, logLinger)
	return zerolog.New(q).Level(lvl).With().Timestamp().Logger(), q.close
}

// queueWriter hands lines to a goroutine that writes them to out. Write
// never blocks: a full queue drops the line and counts it. Safe for
// concurrent use.
type queueWriter struct {
	mu     sync.RWMutex // Write holds it shared; close exclusively, to close ch
	closed bool
	ch     chan *[]byte // pointers, so that the pool recycles them without boxing
	out    io.Writer
	linger time.Duration // see logLinger
	done   chan struct{}
	bufs   sync.Pool
}

func newQueueWriter(out io.Writer, n int, linger time.Duration) *queueWriter {
	q := &queueWriter{ch: make(chan *[]byte, n), out: out, linger: linger, done: make(chan struct{})}
	go q.run()
	return q
}

// Write copies p (zerolog reuses it) and queues the copy.
func (q *queueWriter) Write(p []byte) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		logDropped.Inc()
		return len(p), nil
	}
	b, _ := q.bufs.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b = append((*b)[:0], p...)
	select {
	case q.ch <- b:
	default:
		logDropped.Inc()
		q.bufs.Put(b)
	}
	return len(p), nil
}

// logLinger is how long the writer lets lines gather after the first of a
// batch when no other is queued yet. Under load a request logs a line every
// few microseconds: without it each line wakes the writer and costs a write
// of its own; with it the writer wakes and writes about once a millisecond.
// A line reaches the sink at most this much later.
const logLinger = time.Millisecond

// run writes queued lines; lines that queued up while the sink was busy, or
// within logLinger of the first, go out in one write (one wake-up and one
// syscall for many lines, not one per line).
func (q *queueWriter) run() {
	defer close(q.done)
	batch := make([]byte, 0, 64<<10)
	for b := range q.ch {
		batch = q.take(batch[:0], b)
		if len(q.ch) == 0 {
			time.Sleep(q.linger) // senders do not wake a sleeping writer
		}
	drain:
		for len(batch) < 64<<10 {
			select {
			case b, ok := <-q.ch:
				if !ok {
					break drain
				}
				batch = q.take(batch, b)
			default:
				break drain
			}
		}
		_, _ = q.out.Write(batch)
	}
}

// take appends a queued line to batch and recycles its buffer.
func (q *queueWriter) take(batch []byte, b *[]byte) []byte {
	batch = append(batch, *b...)
	if cap(*b) <= 4096 {
		q.bufs.Put(b)
	}
	return batch
}

func (q *queueWriter) close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	select {
	case <-q.done:
	case <-time.After(2 * time.Second):
	}
}
