package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// bench is one run: the settings, the children and the targets. It is used
// from one goroutine (the load generators have their own).
type bench struct {
	set     settings
	started time.Time
	bins    *binaries
	procs   *procs

	api, floorAPI, gw      *child
	direct, floor, gateway *target
	peer                   *target // the -target or -peer leg; nil when none runs
	peerOpts               peerOptions
	peerInfo               *peerInfo // nil without -target or -peer
	mockAddr               string    // -mock-addr: the mock's fixed address ("" = a free port)
	directSaturation       float64   // direct's closed-model throughput, rps
	fileLimit              uint64
	ctx                    context.Context
	limitations            []string
	profileDir             string                               // "" = the gateway runs without profiles (see -profile)
	measureLegs            func(jobs []job, ls loadSpec) []*leg // nil: interleave (a test's stand-in)
}

// fdSpare is the file descriptors a proxy needs besides its streams'.
const fdSpare = 64

// scenarioResult is what one scenario reports.
type scenarioResult struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Status  string   `json:"status"` // ok | skipped | failed
	Reason  string   `json:"reason,omitempty"`
	Load    string   `json:"load,omitempty"`
	Legs    []*leg   `json:"legs,omitempty"`
	Figures []figure `json:"figures,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// figure is one headline number of a scenario.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// fig records a figure. A ratio whose denominator was zero (NaN) is not
// a figure: a note says so, and a goal that reads it is not measured.
func (r *scenarioResult) fig(name string, v float64, unit string) {
	if math.IsNaN(v) {
		r.Notes = append(r.Notes, name+": not defined (the figure it is divided by is 0)")
		return
	}
	r.Figures = append(r.Figures, figure{Name: name, Value: round(v, 3), Unit: unit})
}

func (r *scenarioResult) figure(name string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// runInfo opens every results.json (bench and soak): the machine, the
// command, when it started and how long it took.
type runInfo struct {
	Machine     machine `json:"machine"`
	Command     string  `json:"command"`
	Started     string  `json:"started"`
	WallSeconds float64 `json:"wall_seconds"`
}

// newRunInfo describes this process's run, started at started; WallSeconds
// is filled in at the end.
func newRunInfo(started time.Time) runInfo {
	return runInfo{Machine: describeMachine(), Started: started.UTC().Format(time.RFC3339),
		Command: "go run ./bench " + strings.Join(redactHeaders(os.Args[1:]), " ")}
}

// results is the whole run, as written to results.json.
type results struct {
	runInfo
	Settings    settings          `json:"settings"`
	BuildSecs   float64           `json:"build_seconds"`
	Config      []string          `json:"config_differences_from_shipped"`
	Limitations []string          `json:"limitations,omitempty"`
	Peer        *peerInfo         `json:"peer,omitempty"`
	Scenarios   []*scenarioResult `json:"scenarios"`
	Targets     []targetCheck     `json:"targets"`
}

func (r *results) failed() bool {
	for _, s := range r.Scenarios {
		if s.Status == "failed" {
			return true
		}
	}
	return false
}

func (r *results) scenario(name string) *scenarioResult {
	for _, s := range r.Scenarios {
		if s.Name == name && s.Status == "ok" {
			return s
		}
	}
	return nil
}

// run builds, starts the children, runs the selected scenarios in a fixed
// order and returns the results. An error means the run could not start.
func (b *bench) run(ctx context.Context, repo string, sel map[string]bool) (*results, error) {
	b.ctx = ctx
	res := &results{runInfo: newRunInfo(b.started), Settings: b.set}
	lim, err := raiseFileLimit(65536)
	if err != nil {
		return nil, err
	}
	b.fileLimit = lim
	// A proxy holds two descriptors per stream (client and upstream side)
	// plus a few of its own; the limit cannot be raised past the hard limit.
	if need := uint64(2*b.set.Streams + fdSpare); lim < need {
		n := int(lim-fdSpare) / 2
		b.limitations = append(b.limitations, fmt.Sprintf("RLIMIT_NOFILE is %d and cannot be raised here (a proxy needs two descriptors per stream): "+
			"concurrent streams lowered from %d to %d, and the 10,000-stream figure is projected from them", lim, b.set.Streams, n))
		b.set.Streams = n
		res.Settings.Streams = n
	}
	fmt.Printf("machine: %s\n", res.Machine.Note)
	if busy := res.Machine.LoadBefore; busy != "" {
		var one float64
		fmt.Sscan(busy, &one)
		if one > float64(res.Machine.Cores)/2 {
			fmt.Printf("warning: load average %s before the run: other work is using the machine and the figures will be noisy\n", busy)
		}
	}
	fmt.Printf("building gateway, mock and floor proxy...\n")
	t0 := time.Now()
	b.bins, err = build(repo)
	if err != nil {
		return nil, err
	}
	res.BuildSecs = round(time.Since(t0).Seconds(), 1)
	fmt.Printf("built in %.1fs\n", res.BuildSecs)
	b.procs = &procs{logDir: b.bins.dir}
	keepLogs := false
	defer func() {
		b.procs.stopAll()
		if !keepLogs {
			os.RemoveAll(b.bins.dir)
		} else {
			fmt.Printf("child logs kept in %s\n", b.bins.dir)
		}
	}()
	go func() { <-ctx.Done(); b.procs.stopAll() }()

	if err := b.startMain(); err != nil {
		keepLogs = true
		return nil, err
	}
	b.startPeer(b.peerOpts)
	res.Peer = b.peerInfo
	steps := []struct {
		name string
		fn   func() *scenarioResult
	}{
		{"passthrough", b.passthrough}, {"layers", b.layers}, {"stream", b.streaming}, {"burst", b.burstStreams}, {"toolloop", b.toolLoop},
		{"cache", b.cacheHit}, {"fallback", b.fallback}, {"limits", b.limits}, {"replicas", b.replicas}, {"responses", b.responses}, {"streams", b.concurrentStreams}, {"sweep", b.sweep},
	}
	for _, st := range steps {
		if !sel[st.name] {
			continue
		}
		if ctx.Err() != nil {
			res.Scenarios = append(res.Scenarios, &scenarioResult{Name: st.name, Status: "failed", Reason: "interrupted"})
			continue
		}
		s0 := time.Now()
		r := st.fn()
		b.notePeer(r)
		if ctx.Err() != nil && r.Status != "skipped" {
			r.Status, r.Reason = "failed", "interrupted"
		}
		res.Scenarios = append(res.Scenarios, r)
		printScenario(r, time.Since(s0))
		if r.Status == "failed" {
			keepLogs = true
		}
	}
	res.Config = configDifferences
	res.Limitations = b.limitations
	res.Settings = b.set
	res.Targets = checkTargets(res)
	res.WallSeconds = round(time.Since(b.started).Seconds(), 1)
	res.Machine.LoadAfter = loadAverage()
	res.Machine.OtherCores = legMean(res, func(l *leg) float64 { return l.OtherCores })
	res.Machine.StealCores = legMean(res, func(l *leg) float64 { return l.StealCores })
	return res, nil
}

// startMain starts the mock with LLM-like latency, the floor in front of it
// and the gateway with the bench config.
func (b *bench) startMain() error {
	var err error
	mockArgs := []string{"-listen", "{addr}",
		"-first-byte-delay", ms(b.set.FirstByteMS), "-chunk-delay", ms(b.set.ChunkDelayMS),
		"-reply-bytes", strconv.Itoa(b.set.ReplyBytes), "-text-runes", strconv.Itoa(b.set.TextRunes), "-stamp-held"}
	if b.mockAddr != "" {
		b.api, err = b.procs.startAt("mock", b.mockAddr, b.bins.mock, mockArgs...)
	} else {
		b.api, err = b.procs.start("mock", b.bins.mock, mockArgs...)
	}
	if err != nil {
		return err
	}
	fmt.Printf("mock upstream: http://%s/v1 (point a peer gateway's OpenAI provider here)\n", b.api.addr)
	b.floorAPI, err = b.procs.start("floor", b.bins.floor, floorArgs(b.api.addr, b.set.buffers())...)
	if err != nil {
		return err
	}
	cfg, err := writeGatewayConfig(b.bins.dir, "gateway", "127.0.0.1:0", b.api.addr, b.api.addr, 20000, b.set.buffers())
	if err != nil {
		return err
	}
	b.gw, err = b.procs.start("gateway", b.bins.gateway, b.gatewayArgs("gateway", cfg)...)
	if err != nil {
		return err
	}
	const conns = 4096
	b.direct = newTarget("direct", b.api, nil, conns)
	b.floor = newTarget("floor", b.floorAPI, b.api, conns)
	b.gateway = newTarget("gateway", b.gw, b.api, conns)
	return nil
}

// gatewayArgs are the arguments of the gateway process name with config
// cfg: with -profile, its CPU and allocation profiles go to name.cpu.pprof
// and name.allocs.pprof in the profile directory.
func (b *bench) gatewayArgs(name, cfg string) []string {
	args := []string{"-config", cfg, "-listen", "{addr}"}
	if b.profileDir != "" {
		args = append(args, "-cpuprofile", filepath.Join(b.profileDir, name+".cpu.pprof"),
			"-memprofile", filepath.Join(b.profileDir, name+".allocs.pprof"))
	}
	return args
}

// floorArgs are the floor proxy's arguments in front of upstream, with the
// connection buffers the gateway it is compared with has.
func floorArgs(upstream string, buf connBuffers) []string {
	return []string{"-listen", "{addr}", "-upstream", upstream,
		"-read-buffer", strconv.Itoa(buf.read), "-write-buffer", strconv.Itoa(buf.write),
		"-upstream-read-buffer", strconv.Itoa(buf.upstreamRead)}
}

// configDifferences are the ways the bench gateway config departs from the
// shipped config.toml (see gwconfig.go).
var configDifferences = []string{
	"providers point at the bench mock (kind openai) instead of the in-process demo model and OpenAI",
	"server tools are offered only to the tool-loop model (models = [\"tools-*\"]), so pass-through scenarios measure pass-through",
	"middleware.fallback.breaker_failures is raised so every fallback request meets the 500 (the shipped default opens the breaker after 5)",
	"the fallback scenario's provider has retries = 0, so the 500 falls back at once instead of retrying with backoff",
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "ms" }

func (b *bench) spec(rate float64, conc int, legSeconds float64) loadSpec {
	return loadSpec{rate: rate, conc: conc, dur: seconds(legSeconds), warm: seconds(b.set.WarmSeconds)}
}

func seconds(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }

// printScenario writes a scenario's legs as a compact table.
func printScenario(r *scenarioResult, took time.Duration) {
	fmt.Printf("\n== %s: %s (%.1fs)", r.Name, r.Status, took.Seconds())
	if r.Reason != "" {
		fmt.Printf(": %s", r.Reason)
	}
	fmt.Println()
	if len(r.Legs) > 0 {
		fmt.Printf("   %-8s %-22s %9s %7s %9s %9s %9s %9s %8s %6s %6s\n", "target", "step/load", "rps", "errors", "p50 µs", "p99 µs", "+p50 µs", "+p99 µs", "cpu/1k", "other", "steal")
	}
	for _, l := range r.Legs {
		label := l.Load
		if l.Step != "" {
			label = l.Step + " " + l.Load
		}
		var p50, p99, a50, a99 float64
		if l.Latency != nil {
			p50, p99 = l.Latency.P50, l.Latency.P99
		}
		if l.Added != nil {
			a50, a99 = l.Added.P50, l.Added.P99
		}
		cpu := fmt.Sprintf("%8.3f", l.ProxyCPUPer1k)
		if l.CPUNotMeasured {
			cpu = fmt.Sprintf("%8s", "-")
		}
		fmt.Printf("   %-8s %-22s %9.0f %7d %9.0f %9.0f %9.0f %9.0f %s %6.2f %6.2f\n", l.Target, truncate(label, 22), l.ThroughputRPS,
			l.Errors, p50, p99, a50, a99, cpu, l.OtherCores, l.StealCores)
		if l.ErrorSample != "" {
			fmt.Printf("            error: %s\n", l.ErrorSample)
		}
	}
	for _, f := range r.Figures {
		fmt.Printf("   %s = %g %s\n", f.Name, f.Value, f.Unit)
	}
	for _, n := range r.Notes {
		fmt.Printf("   note: %s\n", n)
	}
}

// legMean is the time-weighted mean of a per-leg figure over the run's
// legs (the held streams' legs, which mostly wait, left out).
func legMean(res *results, figure func(*leg) float64) float64 {
	var sum, wall float64
	for _, s := range res.Scenarios {
		if s.Name == "streams" {
			continue
		}
		for _, l := range s.Legs {
			sum += figure(l) * l.Seconds
			wall += l.Seconds
		}
	}
	if wall == 0 {
		return 0
	}
	return round(sum/wall, 2)
}
