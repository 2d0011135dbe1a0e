package limits

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

const (
	recordEvery = 50 * time.Millisecond
	maxPending  = 100_000 // additions queued before new ones are dropped (and counted)
	// maxBacklog bounds the counter rows (spend and usage,
	// merged by counter) kept for a later write after a failed one: about
	// 1.5 MB. Past it a failed batch's rows are dropped and counted.
	maxBacklog = 10_000
	// maxChunk bounds the additions of one store write: one script on
	// Redis, which blocks the server while it runs.
	maxChunk         = 1000
	recordWriteLimit = 2 * time.Second
	minGap           = 2 * time.Millisecond // between writes asked for at once
	warnEvery        = 10 * time.Second
	// maxRetryGap bounds the back-off of the background writer's retries
	// of a failed write: recordEvery, doubled per failure.
	maxRetryGap = time.Second
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
	// seqKey names the store counter of the last batch this recorder
	// wrote (kindSeq): a batch sent again after an error whose outcome is
	// unknown is skipped when it was applied, never counted twice.
	seqKey string

	mu             sync.Mutex
	pending        []addition
	write          sync.Mutex // one batch written at a time; guards what follows
	seq            int64
	backlog        []batch       // batches not written yet (a failed write's stay), oldest first
	backlogN       int           // additions in backlog
	maxBacklog     int           // maxBacklog; tests lower it
	lastWarn       time.Time     // of a failed write: an outage logs once per warnEvery, not per retry
	lastDropWarn   time.Time     // of counters dropped past maxBacklog, likewise
	lastRefuseWarn time.Time     // of a batch the store refused, likewise
	retryGap       time.Duration // back-off after a failed write; 0 when the last write succeeded
	retryAt        time.Time     // the background writer retries the backlog from then on
	// behind is set while the backlog holds a failed write's batches (set
	// and cleared under write): a request's flush does not wait on them.
	behind atomic.Bool
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	closed atomic.Bool
}

// batch is one store write: its additions and its sequence number.
type batch struct {
	seq  int64
	adds []addition // adds[0] is the kindSeq marker
	sent bool       // a write of it was attempted: it may have been applied, so it is never merged into
}

func newRecorder(store Store, log zerolog.Logger, seqKey string) *recorder {
	r := &recorder{store: store, log: log, seqKey: seqKey, maxBacklog: maxBacklog,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
			r.flushAs(flushTick)
		case <-r.kick:
			if r.behind.Load() {
				continue // the ticker retries, after its back-off
			}
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
			r.flushAs(flushTick)
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

// How a flush treats a backlog left by failed writes.
type flushMode int

const (
	flushNow     flushMode = iota // retry it now (Flush, Close)
	flushTick                     // the background writer: retry it once its back-off is over
	flushRequest                  // on a request's path: never wait on it; write only what is new
)

// flush writes everything queued so far, after what earlier writes failed
// to, at once.
func (r *recorder) flush() { r.flushAs(flushNow) }

// flushNew writes what was queued so far when no earlier write failed; it
// never waits on retries of failed writes (those are the background
// writer's), so a request that asks for it is not held up by a failing
// store. It waits on a write in progress of new rows: one round trip on a
// healthy store.
func (r *recorder) flushNew() { r.flushAs(flushRequest) }

// flushAs writes everything queued so far, after what earlier writes failed
// to: the backlog goes first, oldest first, and a write that fails stops
// the flush, so that batches reach the store in the order of their
// sequence numbers (the store skips one at or below the last it applied).
// While the backlog waits (mode says not to retry it now), new rows are
// added to it, and nothing is written.
func (r *recorder) flushAs(mode flushMode) {
	if mode == flushRequest && r.behind.Load() {
		return
	}
	r.write.Lock()
	defer r.write.Unlock()
	if mode == flushRequest && len(r.backlog) > 0 {
		return // a write failed while this one waited for it
	}
	r.mu.Lock()
	pending := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(pending) > 0 {
		r.queue(merge(pending))
	}
	if mode == flushTick && len(r.backlog) > 0 && r.retryGap > 0 && time.Now().Before(r.retryAt) {
		r.trim()
		return
	}
	for len(r.backlog) > 0 {
		r.backlog[0].sent = true
		b := r.backlog[0]
		ctx, cancel := context.WithTimeout(context.Background(), recordWriteLimit)
		err := r.store.Add(ctx, time.Now(), b.adds)
		cancel()
		if err != nil && refused(err) {
			// Sent again, it would be refused again (and whatever
			// the script did before its error done again): dropped.
			storeErrors.Inc()
			recordsDropped.Add(float64(len(b.adds) - 1))
			if now := time.Now(); now.Sub(r.lastRefuseWarn) >= warnEvery {
				r.lastRefuseWarn = now
				r.log.Error().Err(err).Int("counters", len(b.adds)-1).Msg("limits: store refused a usage batch; dropped")
			}
		} else if err != nil {
			storeErrors.Inc()
			r.behind.Store(true)
			r.retryGap = min(max(2*r.retryGap, recordEvery), maxRetryGap)
			r.retryAt = time.Now().Add(r.retryGap)
			r.dropRates()
			r.trim()
			if now := time.Now(); now.Sub(r.lastWarn) >= warnEvery {
				r.lastWarn = now
				r.log.Warn().Err(err).Int("batches", len(r.backlog)).Int("counters", r.backlogN).Msg("limits: usage not recorded yet; kept for the next write")
			}
			break
		}
		r.backlog[0] = batch{}
		r.backlog = r.backlog[1:]
		r.backlogN -= len(b.adds) - 1
		backlogGauge.Sub(float64(len(b.adds) - 1))
	}
	if len(r.backlog) == 0 {
		r.backlog = nil // let a long outage's array go
		r.retryGap = 0
		r.behind.Store(false)
	}
}

// queue appends adds to the backlog as batches of at most maxChunk, each
// with the next sequence number. While the backlog holds a failed write's
// batches, new rows are merged into its last batch when no write of that
// batch was attempted yet (a batch that was sent may have been applied, so
// it is only ever sent again as it is): an outage's backlog grows by new
// counters, not by one batch per flush.
func (r *recorder) queue(adds []addition) {
	if n := len(r.backlog); n > 0 && !r.backlog[n-1].sent && len(r.backlog[n-1].adds) <= maxChunk {
		last := r.backlog[n-1].adds[1:]
		r.backlog[n-1] = batch{}
		r.backlog = r.backlog[:n-1]
		r.backlogN -= len(last)
		backlogGauge.Sub(float64(len(last)))
		both := make([]addition, 0, len(last)+len(adds))
		adds = merge(append(append(both, last...), adds...))
	}
	for len(adds) > 0 {
		n := min(len(adds), maxChunk)
		r.seq++
		b := batch{seq: r.seq, adds: make([]addition, 0, n+1)}
		b.adds = append(b.adds, addition{key: r.seqKey, kind: kindSeq, n: r.seq})
		b.adds = append(b.adds, adds[:n]...)
		r.backlog = append(r.backlog, b)
		r.backlogN += n
		backlogGauge.Add(float64(n))
		adds = adds[n:]
	}
}

// trim bounds what a failed write leaves: past maxBacklog, the newest
// batches lose their counts (dropped and counted), the oldest are kept.
// Their releases are kept while the backlog holds fewer than maxPending:
// removing a slot twice is harmless, and a lost release would hold its
// concurrency slot for slotTTL. A batch left with nothing but its number
// is dropped (the store skips a batch at or below the last number it
// applied, so a gap is harmless), and what a batch keeps is copied, so
// that the array of what it dropped goes.
func (r *recorder) trim() {
	dropped := 0
	for i := len(r.backlog) - 1; i >= 0 && r.backlogN > r.maxBacklog; i-- {
		b := &r.backlog[i]
		releases := 0
		for _, a := range b.adds[1:] {
			if a.kind == kindRelease && r.backlogN < maxPending {
				releases++
			}
		}
		if releases == len(b.adds)-1 {
			continue
		}
		kept := make([]addition, 1, 1+releases)
		kept[0] = b.adds[0] // the kindSeq marker
		for _, a := range b.adds[1:] {
			if a.kind == kindRelease && len(kept) <= releases {
				kept = append(kept, a)
			}
		}
		n := len(b.adds) - len(kept)
		dropped += n
		r.backlogN -= n
		b.adds = kept
	}
	if dropped == 0 {
		return
	}
	r.compact()
	recordsDropped.Add(float64(dropped))
	backlogGauge.Sub(float64(dropped))
	if now := time.Now(); now.Sub(r.lastDropWarn) >= warnEvery {
		r.lastDropWarn = now
		r.log.Warn().Int("counters", dropped).Int("backlog", r.backlogN).Msg("limits: usage backlog full; counters dropped")
	}
}

// transientReplies are the Redis error replies that refuse a script before
// it changed anything and may pass later: the server is loading, busy with
// another script, a replica after a failover (read-only), out of memory
// (refused at a script's first write only), or its cluster is not ready.
var transientReplies = []string{"LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
	"OOM", "MISCONF", "NOREPLICAS", "MOVED", "ASK", "NOSCRIPT"}

// refused reports whether err is Redis's error reply to a batch (a key of
// the wrong type, a script error) rather than a network error or a
// timeout: the same batch would fail the same way for ever, and block every
// batch after it. Redis does not undo what a script did before its error,
// so such a batch may also have been applied in part.
func refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if redis.IsAuthError(err) || redis.IsPermissionError(err) || strings.Contains(msg, "DB index is out of range") {
		// The gateway's credentials or their rights, refused (a password
		// or an ACL changed on the server before the gateway's config),
		// or its [redis] db beyond the server's databases (the SELECT of
		// every new connection fails): the batch, its slot releases
		// included, waits for the fix instead of being dropped.
		return false
	}
	for _, code := range transientReplies {
		if strings.HasPrefix(msg, code+" ") || strings.Contains(msg, ": "+code+" ") {
			return false
		}
	}
	return true
}

// dropRates drops the token-rate corrections (kindRate) of the backlog
// after a failed write, counted as dropped. A rate counter is a minute's
// window: corrections written after an outage would move a tenant's tokens
// counter minutes ahead of now, and refuse it for what it used while the
// store could not count it (fail open), not for what it uses now. Spend,
// usage and slot releases are kept.
func (r *recorder) dropRates() {
	dropped := 0
	for i := range r.backlog {
		b := &r.backlog[i]
		kept := b.adds[:1]
		for _, a := range b.adds[1:] {
			if a.kind == kindRate {
				dropped++
			} else {
				kept = append(kept, a)
			}
		}
		clear(b.adds[len(kept):])
		b.adds = kept
	}
	if dropped > 0 {
		r.backlogN -= dropped
		recordsDropped.Add(float64(dropped))
		backlogGauge.Sub(float64(dropped))
		r.compact()
	}
}

// compact drops the batches of the backlog left with nothing but their
// number: the store skips a batch at or below the last number it applied,
// so a gap is harmless.
func (r *recorder) compact() {
	out := r.backlog[:0]
	for _, b := range r.backlog {
		if len(b.adds) > 1 {
			out = append(out, b)
		}
	}
	clear(r.backlog[len(out):])
	r.backlog = out
}

// merge merges the additions of one counter (the same key, field and
// kind) into one, in place.
func merge(batch []addition) []addition {
	type id struct {
		key, field string
		kind       kind
	}
	merged := make(map[id]int, len(batch))
	out := batch[:0]
	for _, a := range batch {
		k := id{a.key, a.field, a.kind}
		if i, ok := merged[k]; ok {
			out[i].n = addSat(out[i].n, a.n)
			for j, n := range a.row {
				out[i].row[j] = addSat(out[i].row[j], n)
			}
			if a.until.After(out[i].until) {
				out[i].until = a.until
			}
			continue
		}
		merged[k] = len(out)
		out = append(out, a)
	}
	return out
}

func (r *recorder) close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	r.closed.Store(true)
	r.flush() // anything added while the last write ran
	r.write.Lock()
	defer r.write.Unlock()
	if r.backlogN > 0 {
		// Nothing will write them now: a reload's new limiter has a
		// recorder of its own.
		recordsDropped.Add(float64(r.backlogN))
		r.log.Warn().Int("counters", r.backlogN).Msg("limits: usage not recorded at close")
		backlogGauge.Sub(float64(r.backlogN))
		r.backlog, r.backlogN = nil, 0
	}
}
