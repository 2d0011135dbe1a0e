package pipeline

import (
	"sync"
	"sync/atomic"
	"testing"
)

// fixedBuffered reports a fixed answer and counts the questions.
type fixedBuffered struct {
	answer bool
	asked  atomic.Int64
}

func (f *fixedBuffered) Buffered() bool { f.asked.Add(1); return f.answer }

func TestLookahead(t *testing.T) {
	t.Parallel()
	var nilLook *Lookahead
	nilLook.Set(&fixedBuffered{answer: true})
	if nilLook.Buffered() {
		t.Fatal("a nil Lookahead reports a buffered event")
	}
	var l Lookahead
	if l.Buffered() {
		t.Fatal("the zero Lookahead reports a buffered event")
	}
	a, b := &fixedBuffered{answer: true}, &fixedBuffered{answer: false}
	l.Set(a)
	if !l.Buffered() || a.asked.Load() != 1 {
		t.Fatal("Set: the stream is not asked")
	}
	l.Set(b) // a later stream replaces a
	l.Unset(a)
	if l.Buffered() || b.asked.Load() != 1 {
		t.Fatal("Unset of a replaced stream forgot its successor")
	}
	l.Set(a)
	l.Unset(a)
	if l.Buffered() || a.asked.Load() != 1 {
		t.Fatal("Unset: the stream is still asked")
	}
}

// TestLookaheadConcurrent: streams set and unset themselves while a writer
// asks, as an upstream stream closed from another goroutine does (run
// with -race).
func TestLookaheadConcurrent(t *testing.T) {
	t.Parallel()
	var l Lookahead
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				l.Buffered()
			}
		}
	})
	for range 1000 {
		s := &fixedBuffered{answer: true}
		l.Set(s)
		l.Unset(s)
	}
	close(stop)
	wg.Wait()
	if l.Buffered() {
		t.Fatal("every stream was unset")
	}
}

func BenchmarkLookaheadBuffered(b *testing.B) {
	var l Lookahead
	l.Set(&fixedBuffered{answer: true})
	b.ReportAllocs()
	for b.Loop() {
		l.Buffered()
	}
}

// TestLookaheadQueue: queued chunks report buffered whatever the stream
// says, until they are taken off; a nil Lookahead ignores Queue.
func TestLookaheadQueue(t *testing.T) {
	t.Parallel()
	var nilLook *Lookahead
	nilLook.Queue(1)
	var l Lookahead
	l.Set(&fixedBuffered{answer: false})
	l.Queue(2)
	if !l.Buffered() {
		t.Fatal("two queued chunks: not buffered")
	}
	l.Queue(-1)
	if !l.Buffered() {
		t.Fatal("one queued chunk: not buffered")
	}
	l.Queue(-1)
	if l.Buffered() {
		t.Fatal("none queued and the stream has nothing: buffered")
	}
}
