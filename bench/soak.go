package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The soak mode runs mixed traffic at a steady rate against one gateway for a
// long time and watches the gateway process for growth: resident memory,
// goroutines and open file descriptors. A leak shows as drift between the
// first and the last window after warm-up; steady load should show none.

// soakSettings are the knobs of a soak run.
type soakSettings struct {
	Duration       string  `json:"duration"`
	Seconds        float64 `json:"seconds"`
	RateRPS        float64 `json:"rate_rps"`
	SampleSeconds  float64 `json:"sample_interval_seconds"`
	WarmupSeconds  float64 `json:"warmup_seconds"`
	WindowSeconds  float64 `json:"window_seconds"`
	MaxDriftPct    float64 `json:"max_drift_percent"`
	MaxErrorPct    float64 `json:"max_unexpected_error_percent"`
	FirstByteMS    float64 `json:"mock_first_byte_delay_ms"`
	ChunkDelayMS   float64 `json:"mock_chunk_delay_ms"`
	ReplyBytes     int     `json:"mock_reply_bytes"`
	TextRunes      int     `json:"mock_runes_per_delta"`
	MaxInFlight    int     `json:"max_in_flight"`
	RSSFloorMB     float64 `json:"drift_floor_rss_mb"`
	GoroutineFloor float64 `json:"drift_floor_goroutines"`
	FDFloor        float64 `json:"drift_floor_fds"`
}

// newSoakSettings derives the warm-up, sampling interval and windows from
// the duration. Warm-up is the first 20% or 2 minutes, whichever is less,
// but at least a minute (or half of a shorter run): at the default rate the
// gateway's RSS takes about a minute to reach its plateau (the Go heap grows
// to its GC target over the first few GC cycles, about 20 s apart here).
// About 120 samples are taken (1 s to 15 s apart). Each comparison window is
// a quarter of the post-warm-up time and at least 3 samples, so that a
// window spans several GC cycles.
func newSoakSettings(d time.Duration, rate float64) soakSettings {
	s := soakSettings{Duration: shortDuration(d), Seconds: d.Seconds(), RateRPS: rate,
		MaxDriftPct: 5, MaxErrorPct: 1, FirstByteMS: 20, ChunkDelayMS: 10, ReplyBytes: 120, TextRunes: 4,
		MaxInFlight: 2000, RSSFloorMB: 64, GoroutineFloor: 200, FDFloor: 200}
	warm := max(min(d/5, 2*time.Minute), min(time.Minute, d/2))
	interval := min(max(d/120, time.Second), 15*time.Second)
	window := max((d-warm)/4, 3*interval)
	s.WarmupSeconds, s.SampleSeconds, s.WindowSeconds = warm.Seconds(), interval.Seconds(), window.Seconds()
	return s
}

// shortDuration formats d as "30m", "2m30s", "90s" (no trailing zero units).
func shortDuration(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// soakSample is one reading of the gateway process.
type soakSample struct {
	At     float64 `json:"t_seconds"`
	RSSMB  float64 `json:"rss_mb"`
	HeapMB float64 `json:"heap_inuse_mb"`
	// LiveHeapMB is the heap that survived the last collection
	// (go_gc_heap_live_bytes). Unlike RSS and heap in use it does not
	// follow the GC's sawtooth or its pacing, so a leak shows in it first.
	LiveHeapMB float64 `json:"live_heap_mb"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	// UpstreamFDs are the FDs that are pooled connections to the mock.
	UpstreamFDs int   `json:"upstream_fds"`
	Requests    int64 `json:"requests_done"`
	Warmup      bool  `json:"warmup"`
}

// soakKind is one kind of request in the mix and what its outcome must be.
type soakKind struct {
	Name   string `json:"name"`
	Weight int    `json:"weight"`
	Expect string `json:"expect"`
	run    func() error
	ok     atomic.Int64
	errs   atomic.Int64
	mu     sync.Mutex
	sample string
}

// soakKindResult is a soakKind's counters, as written to results.json.
type soakKindResult struct {
	Name        string `json:"name"`
	Weight      int    `json:"weight"`
	Expect      string `json:"expect"`
	OK          int64  `json:"ok"`
	Errors      int64  `json:"errors"`
	ErrorSample string `json:"error_sample,omitempty"`
}

// soakResults is a whole soak run, as written to results.json.
type soakResults struct {
	runInfo
	Settings soakSettings     `json:"settings"`
	Config   []string         `json:"config_differences_from_shipped"`
	Kinds    []soakKindResult `json:"traffic"`
	Requests int64            `json:"requests"`
	Dropped  int64            `json:"dropped"`
	Samples  []soakSample     `json:"samples"`
	Drift    []driftCheck     `json:"drift"`
	Idle     *idleCheck       `json:"idle,omitempty"`
	Failures []string         `json:"failures,omitempty"`
	Passed   bool             `json:"passed"`
}

// soakExtraModels are appended to the bench gateway config: a failing model
// without fallbacks (its 503 must reach the client as a 503).
const soakExtraModels = `
[[models]]
name = "fail-503"
provider = "api-noretry"
context_window = 128000
`

// soak runs the soak: build, start mock and gateway, drive the mix at a
// steady rate for the duration while sampling the gateway, then judge drift.
func soak(ctx context.Context, repo string, d time.Duration, rate float64) (*soakResults, error) {
	set := newSoakSettings(d, rate)
	started := time.Now()
	res := &soakResults{runInfo: newRunInfo(started), Settings: set,
		Config: append(append([]string(nil), configDifferences...),
			"a model fail-503 on the no-retry provider without fallbacks, so its 503 reaches the client")}
	if _, err := raiseFileLimit(65536); err != nil {
		return nil, err
	}
	fmt.Printf("soak: %s at %g rps, warm-up %gs, a sample every %gs, windows of %gs\n",
		set.Duration, rate, set.WarmupSeconds, set.SampleSeconds, set.WindowSeconds)
	fmt.Println("building gateway and mock...")
	bins, err := build(repo)
	if err != nil {
		return nil, err
	}
	p := &procs{logDir: bins.dir}
	keepLogs := false
	defer func() {
		p.stopAll()
		if keepLogs {
			fmt.Printf("child logs kept in %s\n", bins.dir)
		} else {
			os.RemoveAll(bins.dir)
		}
	}()
	go func() { <-ctx.Done(); p.stopAll() }()
	api, err := p.start("mock", bins.mock, "-listen", "{addr}", "-first-byte-delay", ms(set.FirstByteMS),
		"-chunk-delay", ms(set.ChunkDelayMS), "-reply-bytes", strconv.Itoa(set.ReplyBytes), "-text-runes", strconv.Itoa(set.TextRunes))
	if err != nil {
		keepLogs = true
		return nil, err
	}
	cfg, err := writeGatewayConfig(bins.dir, "gateway", "127.0.0.1:0", api.addr, api.addr, 1024, fasthttpBuffers)
	if err == nil {
		err = appendFile(cfg, soakExtraModels)
	}
	if err == nil {
		err = editFile(cfg, "[server]\n", "[server]\n"+soakGC)
	}
	if err != nil {
		return nil, err
	}
	gw, err := p.start("gateway", bins.gateway, "-config", cfg, "-listen", "{addr}")
	if err != nil {
		keepLogs = true
		return nil, err
	}
	t := newTarget("gateway", gw, api, 1024)
	// Reuse the most recent connection first and close ones idle for 3 s,
	// so that the load generator's pool (and with it the gateway's server
	// goroutines and descriptors) shrinks back after a burst instead of
	// staying at its peak and reading as drift.
	for _, hc := range []*fasthttp.HostClient{t.hc, t.shc} {
		hc.ConnPoolStrategy, hc.MaxIdleConnDuration = fasthttp.LIFO, 3*time.Second
	}
	_, ps, _ := net.SplitHostPort(api.addr)
	upPort, _ := strconv.Atoi(ps)
	kinds := soakMix(t)
	if why := probeToolLoop(t); why != "" {
		keepLogs = true
		return nil, fmt.Errorf("tool loop does not run: %s", why)
	}

	time.Sleep(time.Second) // let the probes' connections go idle
	idle, err := sampleGateway(gw, upPort, 0)
	if err != nil {
		keepLogs = true
		return nil, err
	}

	// Traffic: one request every 1/rate, kinds in a fixed weighted rotation.
	var rotation []*soakKind
	for _, k := range kinds {
		for i := 0; i < k.Weight; i++ {
			rotation = append(rotation, k)
		}
	}
	var done, dropped atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	begin := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sem := make(chan struct{}, set.MaxInFlight)
		interval := time.Duration(float64(time.Second) / rate)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		for i := 0; ; i++ {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				dropped.Add(1)
				continue
			}
			k := rotation[i%len(rotation)]
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				if err := k.run(); err != nil {
					k.errs.Add(1)
					k.mu.Lock()
					if k.sample == "" {
						k.sample = truncate(err.Error(), 200)
					}
					k.mu.Unlock()
				} else {
					k.ok.Add(1)
				}
				done.Add(1)
				<-sem
			}()
		}
	}()

	// Sampling, on this goroutine.
	every := time.Duration(set.SampleSeconds * float64(time.Second))
	warm := time.Duration(set.WarmupSeconds * float64(time.Second))
	tick := time.NewTicker(every)
	defer tick.Stop()
	var sampleErr error
sampling:
	for {
		select {
		case <-runCtx.Done():
			break sampling
		case <-gw.done:
			sampleErr = errors.New("the gateway exited during the soak")
			break sampling
		case <-tick.C:
		}
		el := time.Since(begin)
		s, err := sampleGateway(gw, upPort, done.Load())
		if err != nil {
			sampleErr = err
			break sampling
		}
		s.At = round(el.Seconds(), 1)
		s.Warmup = el < warm
		res.Samples = append(res.Samples, s)
		fmt.Printf("  t=%5.0fs rss=%6.1f MB heap=%5.1f MB live=%5.1f MB goroutines=%4d fds=%4d (upstream %d) requests=%d%s\n",
			s.At, s.RSSMB, s.HeapMB, s.LiveHeapMB, s.Goroutines, s.FDs, s.UpstreamFDs, s.Requests,
			map[bool]string{true: " (warm-up)", false: ""}[s.Warmup])
	}
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, errors.New("interrupted")
	}
	if sampleErr == nil {
		res.Idle = settle(gw, upPort, t, idle, set)
		if !res.Idle.Passed {
			// Ask the Go runtime for every goroutine's stack (SIGQUIT dumps
			// them to stderr, the child's log, and exits) for the report.
			_ = gw.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-gw.done:
			case <-time.After(5 * time.Second):
			}
			res.Idle.Dump = filepath.Join(bins.dir, "gateway.log")
		}
	}

	for _, k := range kinds {
		res.Kinds = append(res.Kinds, soakKindResult{Name: k.Name, Weight: k.Weight, Expect: k.Expect,
			OK: k.ok.Load(), Errors: k.errs.Load(), ErrorSample: k.sample})
	}
	res.Requests, res.Dropped = done.Load(), dropped.Load()
	res.Drift = judgeDrift(res.Samples, set)
	res.Failures = soakFailures(res, sampleErr)
	res.Passed = len(res.Failures) == 0
	res.WallSeconds = round(time.Since(started).Seconds(), 1)
	res.Machine.LoadAfter = loadAverage()
	if !res.Passed {
		keepLogs = true
	}
	return res, nil
}

// soakGC is the soak gateway's collector setting: Go's own pacing. At the
// soak's low rate the collector floor (server.gc_min_growth_bytes) would
// leave tens of seconds between collections, and the live heap the drift
// check reads is the last collection's.
const soakGC = "gc_min_growth_bytes = 0\n"

// editFile replaces the first old in the file at path with new; it fails
// when old is not there.
func editFile(path, old, new string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), old) {
		return fmt.Errorf("%s: no %q to replace", path, old)
	}
	return os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644)
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
