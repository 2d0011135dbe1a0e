package limits

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

const (
	recordEvery      = 50 * time.Millisecond
	maxPending       = 100_000 // additions queued before new ones are dropped (and counted)
	recordWriteLimit = 2 * time.Second
	minGap           = 2 * time.Millisecond // between writes asked for at once
)

// recorder queues usage, spend and token corrections and writes them in
// batches, merged by counter, off the requests' path: a Redis round trip per
// batch instead of per call. A finished call asks for a write at once, so
// spend reaches the shared counter about one round trip after the call;
// under load, calls that end during a write share the next one. Safe for
// concurrent use.
type recorder struct {
	store Store
	log   zerolog.Logger

	mu      sync.Mutex
	pending []addition
	write   sync.Mutex // one batch written at a time
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	closed  atomic.Bool
}

func newRecorder(store Store, log zerolog.Logger) *recorder {
	r := &recorder{store: store, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

func (r *recorder) run() {
	defer close(r.done)
	t := time.NewTicker(recordEvery)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-t.C:
			r.flush()
		case <-r.kick:
			// Under load, calls that end within minGap of the last write
			// share the next one: one store write per gap, not per call.
			if d := time.Since(last); d < minGap {
				select {
				case <-time.After(minGap - d):
				case <-r.stop:
					r.flush()
					return
				}
			}
			r.flush()
			last = time.Now()
		case <-r.stop:
			r.flush()
			return
		}
	}
}

func (r *recorder) add(adds []addition) {
	if r.closed.Load() {
		// After Close (a reload while streams still run): write directly,
		// so that a stream's slot release is never lost.
		ctx, cancel := context.WithTimeout(context.Background(), recordWriteLimit)
		defer cancel()
		_ = r.store.Add(ctx, time.Now(), adds)
		return
	}
	r.mu.Lock()
	if len(r.pending)+len(adds) > maxPending && adds[0].kind != kindRelease { // releases are never dropped
		r.mu.Unlock()
		recordsDropped.Add(float64(len(adds)))
		return
	}
	r.pending = append(r.pending, adds...)
	r.mu.Unlock()
}

// soon asks for a write as soon as the writer is free (spend should reach
// the shared counter before the client's next request); it never blocks.
func (r *recorder) soon() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// flush writes everything queued so far.
func (r *recorder) flush() {
	r.write.Lock()
	defer r.write.Unlock()
	r.mu.Lock()
	batch := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	type id struct {
		key, field string
		kind       kind
	}
	merged := make(map[id]int, len(batch))
	out := batch[:0]
	for _, a := range batch {
		k := id{a.key, a.field, a.kind}
		if i, ok := merged[k]; ok {
			out[i].n += a.n
			for j, n := range a.row {
				out[i].row[j] += n
			}
			if a.until.After(out[i].until) {
				out[i].until = a.until
			}
			continue
		}
		merged[k] = len(out)
		out = append(out, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordWriteLimit)
	defer cancel()
	if err := r.store.Add(ctx, time.Now(), out); err != nil {
		storeErrors.Inc()
		// Releases are kept for the next write (removing a slot twice is
		// harmless): a lost one would hold its concurrency slot for slotTTL
		// after a short outage. Counts are dropped, never written twice. A
		// long outage keeps at most maxPending of them.
		var kept []addition
		for _, a := range out {
			if a.kind == kindRelease && len(kept) < maxPending {
				kept = append(kept, a)
			}
		}
		if len(kept) > 0 {
			r.mu.Lock()
			r.pending = append(kept, r.pending...)
			r.mu.Unlock()
		}
		recordsDropped.Add(float64(len(out) - len(kept)))
		r.log.Warn().Err(err).Int("counters", len(out)-len(kept)).Int("releases_kept", len(kept)).Msg("limits: usage not recorded")
	}
}

func (r *recorder) close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	r.closed.Store(true)
	r.flush() // anything added while the last write ran
}
