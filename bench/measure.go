package main

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// loadSpec is how one leg loads its target: open model at rate, or closed
// model at conc, for dur after a discarded warm-up.
type loadSpec struct {
	rate      float64 // > 0: open model, requests per second
	conc      int     // > 0: closed model, concurrent clients
	dur, warm time.Duration
}

func (ls loadSpec) String() string {
	if ls.rate > 0 {
		return fmt.Sprintf("open %.0f rps", ls.rate)
	}
	return fmt.Sprintf("closed %d", ls.conc)
}

// job is one target with the workload it gets in a leg.
type job struct {
	t *target
	w workload
}

// leg is the figures of one target under one load.
type leg struct {
	Target     string `json:"target"`
	Step       string `json:"step,omitempty"`
	Superseded bool   `json:"superseded,omitempty"` // a sweep step's first measurement, replaced by a second (sweep.go, confirmed)
	// JudgedP99 is, on the second measurement of a sweep step measured
	// twice, the added p99 the step judged this proxy by (sweep.go, judge).
	JudgedP99     *float64 `json:"judged_added_p99,omitempty"`
	Load          string   `json:"load"`
	OfferedRPS    float64  `json:"offered_rps,omitempty"`
	Concurrency   int      `json:"concurrency,omitempty"`
	Seconds       float64  `json:"seconds"`
	Requests      int      `json:"requests"`
	Errors        int      `json:"errors"`
	ErrorSample   string   `json:"error_sample,omitempty"`
	ThroughputRPS float64  `json:"throughput_rps"`
	Latency       *pcts    `json:"latency"`
	TTFB          *pcts    `json:"ttfb,omitempty"`
	TTFT          *pcts    `json:"ttft,omitempty"` // time to the first event with content or a tool call
	// TTFTPath is TTFT less the time the mock held the request until it
	// wrote that event: the path to and from the upstream alone. Only when
	// every measured stream's event carried the mock's stamp.
	TTFTPath *pcts `json:"ttft_path,omitempty"`
	// ToUpstream and FromUpstream split TTFTPath: the way to the upstream
	// (until it received the request) and the way back (from its write of
	// the first content to the client's read).
	ToUpstream   *pcts `json:"to_upstream,omitempty"`
	FromUpstream *pcts `json:"from_upstream,omitempty"`
	InterChunk   *pcts `json:"inter_chunk,omitempty"`
	// Added* are this target minus direct at the same load, percentile by
	// percentile (empty for direct).
	Added           *pcts `json:"added_latency,omitempty"`
	AddedTTFB       *pcts `json:"added_ttfb,omitempty"`
	AddedTTFT       *pcts `json:"added_ttft,omitempty"`
	AddedTTFTPath   *pcts `json:"added_ttft_path,omitempty"`
	AddedToUp       *pcts `json:"added_to_upstream,omitempty"`
	AddedFromUp     *pcts `json:"added_from_upstream,omitempty"`
	AddedInterChunk *pcts `json:"added_inter_chunk,omitempty"`
	// CPU seconds per 1,000 requests of the measured process (the proxy; the
	// mock itself for direct), of the mock behind a proxy, and of bench.
	// A peer bench did not start has no process: its CPU and RSS are not
	// measured (CPUNotMeasured) and its share is in OtherCores.
	CPUNotMeasured   bool    `json:"cpu_not_measured,omitempty"`
	ProxyCPUPer1k    float64 `json:"proxy_cpu_s_per_1k"`
	UpstreamCPUPer1k float64 `json:"upstream_cpu_s_per_1k,omitempty"`
	LoadgenCPUPer1k  float64 `json:"loadgen_cpu_s_per_1k"`
	RSSMB            float64 `json:"rss_mb"`      // VmRSS of the measured process mid-leg
	PeakRSSMB        float64 `json:"peak_rss_mb"` // VmHWM of the measured process so far
	Goroutines       int     `json:"goroutines,omitempty"`
	// OtherCores is how many cores other processes on the machine kept busy
	// during the leg (their noise; includes a floor's or gateway's mock when
	// it is not the measured pair, which never happens here). StealCores is
	// how many cores the hypervisor stole meanwhile (see machine).
	OtherCores float64 `json:"other_processes_cores"`
	StealCores float64 `json:"steal_cores"`
	// IdleRSSMB and IdleGoroutines are sampled before a held-streams leg.
	IdleRSSMB      float64 `json:"idle_rss_mb,omitempty"`
	IdleGoroutines int     `json:"idle_goroutines,omitempty"`
	// StackMB and IdleStackMB are the gateway's goroutine stacks
	// (go_memstats_stack_inuse_bytes) with the streams held and before.
	StackMB     float64 `json:"stack_mb,omitempty"`
	IdleStackMB float64 `json:"idle_stack_mb,omitempty"`
	// GCCycles is how many garbage collections the measured process ran
	// during the leg, GCMarkMS their mean mark phase (wall clock), and
	// AllocKBPerReq the heap it allocated per request, from its gctrace
	// lines (gctrace.go; MB-grained, so a guide where few collections ran).
	GCCycles      int     `json:"gc_cycles,omitempty"`
	GCMarkMS      float64 `json:"gc_mark_ms,omitempty"`
	GCLiveMB      float64 `json:"gc_live_mb,omitempty"` // the mean live heap the collections found
	AllocKBPerReq float64 `json:"alloc_kb_per_request,omitempty"`
}

func (l *leg) ok() int { return l.Requests - l.Errors }

// cpuSnap is the CPU seconds of the processes a leg involves.
type cpuSnap struct{ proxy, upstream, self, machine, steal float64 }

func snap(t *target) cpuSnap {
	var s cpuSnap
	if t.proxy != nil {
		s.proxy, _ = cpuSeconds(t.proxy.Pid())
	}
	if t.upstream != nil {
		s.upstream, _ = cpuSeconds(t.upstream.Pid())
	}
	s.self, _ = cpuSeconds(0)
	s.machine, s.steal = machineSeconds()
	return s
}

// run applies the load to one job for dur and returns the samples.
func run(j job, ls loadSpec, dur time.Duration, maxInFlight int) []sample {
	if ls.rate > 0 {
		return openLoop(ls.rate, dur, maxInFlight, j.w)
	}
	return closedLoop(ls.conc, dur, j.w)
}

// interleave measures every job under the same load, back to back in
// rounds slices each (direct, floor, gateway, direct, ...), so that a drift
// of the machine hits all targets alike. Each job is warmed up once before
// its first slice. The first job is the direct baseline that Added* of the
// others are computed against.
func interleave(jobs []job, ls loadSpec, rounds, maxInFlight int) []*leg {
	type acc struct {
		samples []sample
		wall    time.Duration
		cpu     cpuSnap
		rss     int64
		gor     int
		gc      gcSpan
	}
	accs := make([]acc, len(jobs))
	slice := ls.dur / time.Duration(rounds)
	for r := 0; r < rounds; r++ {
		for i, j := range jobs {
			if r == 0 {
				// Each measurement starts from the connections it opens:
				// those an earlier one left idle (thousands after a sweep
				// step past saturation) would otherwise be taken in turn,
				// each waking a cold connection and a parked goroutine in
				// the process measured, a cost of the earlier load.
				j.t.closeIdle()
				if ls.warm > 0 {
					run(j, ls, ls.warm, maxInFlight)
				}
			}
			gc := j.t.gcLog()
			gc.next() // the collections before the slice
			// Memory and goroutines are sampled in the middle of the slice.
			var mid sync.WaitGroup
			mid.Add(1)
			go func() {
				defer mid.Done()
				time.Sleep(slice / 2)
				if j.t.proxy == nil {
					return
				}
				if rss, _, err := memKB(j.t.proxy.Pid()); err == nil && rss > accs[i].rss {
					accs[i].rss = rss
				}
				if j.t.name == "gateway" {
					accs[i].gor = max(accs[i].gor, goroutines(j.t.addr))
				}
			}()
			c0, t0 := snap(j.t), time.Now()
			s := run(j, ls, slice, maxInFlight)
			c1, t1 := snap(j.t), time.Now()
			accs[i].gc.add(gc.next())
			mid.Wait()
			a := &accs[i]
			a.samples = append(a.samples, s...)
			a.wall += t1.Sub(t0)
			a.cpu.proxy += c1.proxy - c0.proxy
			a.cpu.upstream += c1.upstream - c0.upstream
			a.cpu.self += c1.self - c0.self
			a.cpu.machine += c1.machine - c0.machine
			a.cpu.steal += c1.steal - c0.steal
		}
	}
	legs := make([]*leg, len(jobs))
	for i, j := range jobs {
		a := accs[i]
		l := &leg{Target: j.t.name, Load: ls.String(), OfferedRPS: ls.rate, Concurrency: ls.conc,
			Seconds: round(a.wall.Seconds(), 2), Requests: len(a.samples), RSSMB: mb(a.rss), Goroutines: a.gor}
		var lat, ttfb, ttft, ttftPath, toUp, fromUp, gaps []time.Duration
		for _, s := range a.samples {
			if s.err != nil {
				l.Errors++
				if l.ErrorSample == "" {
					l.ErrorSample = truncate(s.err.Error(), 200)
				}
				continue
			}
			lat = append(lat, s.lat)
			if s.ttfb > 0 {
				ttfb = append(ttfb, s.ttfb)
			}
			if s.ttft > 0 {
				ttft = append(ttft, s.ttft)
			}
			if s.ttftPath != 0 {
				ttftPath = append(ttftPath, s.ttftPath)
				if s.toUpstream != 0 {
					toUp, fromUp = append(toUp, s.toUpstream), append(fromUp, s.ttftPath-s.toUpstream)
				}
			}
			gaps = append(gaps, s.gaps...)
		}
		l.Latency, l.TTFB, l.TTFT, l.InterChunk = summarize(lat), summarize(ttfb), summarize(ttft), summarize(gaps)
		if len(ttftPath) > 0 && len(ttftPath) == len(ttft) {
			l.TTFTPath = summarize(ttftPath)
			if len(toUp) == len(ttftPath) {
				l.ToUpstream, l.FromUpstream = summarize(toUp), summarize(fromUp)
			}
		}
		// Open model: completions per second of the schedule (a straggler
		// that completes late does not stretch the denominator). Closed
		// model: completions per second of wall time.
		if span := a.wall; ls.rate > 0 {
			l.ThroughputRPS = round(float64(l.ok())/(slice*time.Duration(rounds)).Seconds(), 1)
		} else if span > 0 {
			l.ThroughputRPS = round(float64(l.ok())/span.Seconds(), 1)
		}
		if n := float64(len(a.samples)); n > 0 {
			l.ProxyCPUPer1k = round(a.cpu.proxy/n*1000, 4)
			l.UpstreamCPUPer1k = round(a.cpu.upstream/n*1000, 4)
			l.LoadgenCPUPer1k = round(a.cpu.self/n*1000, 4)
		}
		if a.wall > 0 {
			other := a.cpu.machine - a.cpu.proxy - a.cpu.upstream - a.cpu.self
			l.OtherCores = round(max(other, 0)/a.wall.Seconds(), 2)
			l.StealCores = round(max(a.cpu.steal, 0)/a.wall.Seconds(), 2)
		}
		l.GCCycles = a.gc.cycles
		if a.gc.read > 0 {
			l.GCMarkMS = round(a.gc.markMS/float64(a.gc.read), 1)
			l.GCLiveMB = round(float64(a.gc.liveMB)/float64(a.gc.read), 1)
		}
		sent := 0 // requests that reached the target (not dropped by the generator)
		for _, s := range a.samples {
			if s.err != errDropped {
				sent++
			}
		}
		if sent > 0 && a.gc.cycles > 0 {
			l.AllocKBPerReq = round(float64(a.gc.allocMB)*1024/float64(sent), 2)
		}
		if j.t.proxy == nil {
			l.CPUNotMeasured = true
		} else if _, hwm, err := memKB(j.t.proxy.Pid()); err == nil {
			l.PeakRSSMB = mb(hwm)
		}
		legs[i] = l
	}
	for _, l := range legs[1:] {
		l.Added = l.Latency.minus(legs[0].Latency)
		l.AddedTTFB = l.TTFB.minus(legs[0].TTFB)
		l.AddedTTFT = l.TTFT.minus(legs[0].TTFT)
		l.AddedTTFTPath = l.TTFTPath.minus(legs[0].TTFTPath)
		l.AddedToUp = l.ToUpstream.minus(legs[0].ToUpstream)
		l.AddedFromUp = l.FromUpstream.minus(legs[0].FromUpstream)
		l.AddedInterChunk = l.InterChunk.minus(legs[0].InterChunk)
	}
	return legs
}

func mb(kb int64) float64 { return round(float64(kb)/1024, 1) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
