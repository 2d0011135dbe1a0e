package main

import (
	"errors"
	"math"
	"sort"
	"sync"
	"time"
)

// sample is one measured logical request (which may be several HTTP calls,
// as in a client-driven tool loop). Times count from the intended start, so a
// request that waited for the generator still pays that wait.
type sample struct {
	lat  time.Duration // completion - intended start
	ttfb time.Duration // first body byte - intended start; streams only
	ttft time.Duration // first event with content or a tool call - intended start; streams only
	// ttftPath is ttft less the time the upstream held the request until
	// it wrote that event (the mock's x_mock_held_ns): what the path to and
	// from the upstream took, without the upstream's own delays and timer
	// slack. Zero when the event carried no stamp.
	ttftPath time.Duration
	// toUpstream is the part of ttftPath before the upstream received the
	// request (the mock's x_mock_received_unix_ns, a wall-clock time on
	// the same machine); the rest is the way back.
	toUpstream time.Duration
	gaps       []time.Duration // between SSE events; streams only
	err        error
}

// workload performs one logical request intended to start at start. It is
// called from many goroutines at once and must be safe for that.
type workload func(start time.Time) sample

// errDropped marks a request the open-model generator could not start
// because maxInFlight requests were already outstanding.
var errDropped = errors.New("dropped: too many requests in flight")

// openLoop runs w at a constant arrival rate for dur (open model). Each
// request has a fixed intended start time (start + i/rate) and its latency is
// measured from that time, not from when it was actually sent, so a stalled
// target cannot slow the generator down and hide its own latency
// (coordinated omission). Requests beyond maxInFlight outstanding are
// recorded as errors rather than queued.
func openLoop(rate float64, dur time.Duration, maxInFlight int, w workload) []sample {
	n := int(math.Round(rate * dur.Seconds()))
	if n < 1 {
		n = 1
	}
	interval := time.Duration(float64(time.Second) / rate)
	out := make([]sample, n)
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := 0; i < n; i++ {
		due := begin.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d) // a late wake-up sends the backlog at once; latency still counts from due
		}
		select {
		case sem <- struct{}{}:
		default:
			out[i] = sample{lat: time.Since(due), err: errDropped}
			continue
		}
		wg.Add(1)
		go func(i int, due time.Time) {
			defer wg.Done()
			out[i] = w(due)
			<-sem
		}(i, due)
	}
	wg.Wait()
	return out
}

// closedLoop runs conc workers that each send the next request as soon as
// the previous one completes, for dur (closed model: throughput at a fixed
// concurrency).
func closedLoop(conc int, dur time.Duration, w workload) []sample {
	var wg sync.WaitGroup
	parts := make([][]sample, conc)
	end := time.Now().Add(dur)
	for k := 0; k < conc; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for time.Now().Before(end) {
				parts[k] = append(parts[k], w(time.Now()))
			}
		}(k)
	}
	wg.Wait()
	var out []sample
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// pcts is a latency distribution in microseconds.
type pcts struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_us"`
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p99_9_us"`
	Max  float64 `json:"max_us"`
}

// summarize sorts d in place and returns its percentiles (nearest rank).
func summarize(d []time.Duration) *pcts {
	if len(d) == 0 {
		return nil
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		i = max(0, min(i, len(d)-1))
		return us(d[i])
	}
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return &pcts{
		N: len(d), Mean: us(sum / time.Duration(len(d))),
		P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: us(d[len(d)-1]),
	}
}

// minus is a - b percentile by percentile: the latency a target adds over
// the direct path at the same load. N is a's.
func (a *pcts) minus(b *pcts) *pcts {
	if a == nil || b == nil {
		return nil
	}
	return &pcts{N: a.N, Mean: a.Mean - b.Mean, P50: a.P50 - b.P50, P90: a.P90 - b.P90,
		P99: a.P99 - b.P99, P999: a.P999 - b.P999, Max: a.Max - b.Max}
}

func us(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)*10) / 10 }
