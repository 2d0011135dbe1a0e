// Command bench is the load benchmark suite of the gateway. One command
// builds the gateway, the bench mock upstream and the minimal fasthttp floor
// proxy, starts them on free loopback ports, and runs every scenario against
// (a) the mock directly, (b) the floor proxy and (c) the gateway with the
// shipped middleware config, interleaved, reporting the gateway's cost as
// ratios and differences against the other two from the same run.
//
//	go run ./bench -mode quick          # < 60 s, for CI
//	go run ./bench -mode full           # the published figures
//	go run ./bench -mode soak -duration 30m   # leak check: drift of RSS, goroutines, fds (see soak.go)
//	go run ./bench -render bench/results/full/results.json   # re-render md, chart, PERFORMANCE.md
//
// Exit status: 0 when every selected scenario ran and produced figures, even
// when targets are missed (those print MISSED lines) and when a -peer cannot
// be installed here (SKIPPED); 1 when a scenario could not run or a peer did
// not answer; 2 on bad flags.
//
// A peer leg compares any OpenAI-compatible endpoint with the three (see
// peer.go):
//
//	go run ./bench -target http://127.0.0.1:4000/v1 -target-name litellm -mock-addr 127.0.0.1:18090
//	go run ./bench -peer portkey        # installs and starts Portkey's gateway with npm
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/gateway/internal/modroot"
)

// settings are the knobs of one run; the mode picks the defaults.
type settings struct {
	Mode           string    `json:"mode"`
	LegSeconds     float64   `json:"leg_seconds"`
	WarmSeconds    float64   `json:"warmup_seconds"`
	Rounds         int       `json:"interleave_rounds"`
	Concurrency    int       `json:"closed_concurrency"`
	BurstClients   int       `json:"burst_closed_concurrency"`
	StreamRate     float64   `json:"stream_rps"`
	ToolRate       float64   `json:"tool_loop_rps"`
	CacheRate      float64   `json:"cache_rps"`
	FallbackRate   float64   `json:"fallback_rps"`
	Streams        int       `json:"concurrent_streams"`
	SweepSeconds   float64   `json:"sweep_step_seconds"`
	SweepFractions []float64 `json:"sweep_fractions_of_direct_saturation"`
	FirstByteMS    float64   `json:"mock_first_byte_delay_ms"`
	ChunkDelayMS   float64   `json:"mock_chunk_delay_ms"`
	ReplyBytes     int       `json:"mock_reply_bytes"`
	TextRunes      int       `json:"mock_runes_per_delta"`
	SlowChunkMS    float64   `json:"slow_stream_chunk_delay_ms"`
	MaxInFlight    int       `json:"open_model_max_in_flight"`
	Scenarios      []string  `json:"default_scenarios"` // what runs without -scenarios
	// The per-connection buffers of the floor proxy and the gateway, in bytes: server read and
	// write, upstream read (fasthttp's defaults are 4096 each). They are
	// the gateway's [server] read_buffer, write_buffer and provider
	// read_buffer, so both proxies are compared at the same sizes.
	ReadBuffer         int `json:"floor_read_buffer_bytes"`
	WriteBuffer        int `json:"floor_write_buffer_bytes"`
	UpstreamReadBuffer int `json:"floor_upstream_read_buffer_bytes"`
	// StreamsBuffer is every connection buffer of both proxies in the
	// held-streams scenario, tuned for many open streams: what an operator
	// sets to hold them in the least memory (chat request heads and SSE
	// events are a few hundred bytes; a head that does not fit is refused).
	StreamsBuffer int `json:"streams_buffer_bytes"`
}

func modeSettings(mode string) (settings, error) {
	s := settings{Mode: mode, FirstByteMS: 20, ChunkDelayMS: 10, ReplyBytes: 120, TextRunes: 4,
		SlowChunkMS: 1000, MaxInFlight: 8000, BurstClients: 32, StreamsBuffer: 1024,
		ReadBuffer: fasthttpBuffers.read, WriteBuffer: fasthttpBuffers.write, UpstreamReadBuffer: fasthttpBuffers.upstreamRead}
	switch mode {
	case "quick":
		// Quick mode checks in CI that bench works, within a minute build
		// included: one scenario of each kind (closed model, stream, tool
		// loop, held streams, sweep), short legs, two sweep steps. Every
		// scenario still runs when named with -scenarios.
		s.Scenarios = []string{"passthrough", "stream", "toolloop", "streams", "sweep"}
		s.LegSeconds, s.WarmSeconds, s.Rounds = 0.6, 0.15, 1
		s.Concurrency = 512
		s.StreamRate, s.ToolRate, s.CacheRate, s.FallbackRate = 60, 60, 300, 150
		s.Streams, s.SlowChunkMS = 500, 500
		s.SweepSeconds, s.SweepFractions = 0.5, []float64{0.1, 0.5}
	case "full":
		s.Scenarios = allScenarios
		s.LegSeconds, s.WarmSeconds, s.Rounds = 6, 1, 3
		s.Concurrency = 512
		s.StreamRate, s.ToolRate, s.CacheRate, s.FallbackRate = 200, 200, 1000, 500
		s.Streams = 10000
		s.SweepSeconds = 4
		s.SweepFractions = []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}
	default:
		return s, fmt.Errorf("unknown -mode %q (quick or full)", mode)
	}
	return s, nil
}

var allScenarios = []string{"passthrough", "layers", "stream", "burst", "toolloop", "cache", "fallback", "limits", "replicas", "responses", "streams", "sweep"}

func main() { os.Exit(realMain()) }

func realMain() int {
	mode := flag.String("mode", "quick", "quick (< 60 s, CI), full (the published figures) or soak (leak check)")
	out := flag.String("out", "bench/results", "results directory; files go to OUT/MODE/")
	list := flag.String("scenarios", "", "comma-separated scenarios to run (default: the mode's; every scenario in full mode)")
	var legDur durationFlag
	flag.Var(&legDur, "duration", "seconds per measured leg (0 = the mode's default); in soak mode the soak's length (e.g. 30m, default 2m)")
	rate := flag.Float64("rate", 60, "soak mode: requests per second")
	streams := flag.Int("streams", 0, "concurrent slow streams (0 = the mode's default: 500 quick, 10000 full)")
	perf := flag.String("performance", "", "also write the README Performance section here (default: OUT/PERFORMANCE.md in full mode)")
	render := flag.String("render", "", "only re-render results.md, the chart and the Performance section from this results.json, then exit")
	profile := flag.Bool("profile", false, "profile the gateway: CPU and allocation profiles of the whole run, and their pprof -top, beside the results (OUT/MODE/gateway.*)")
	repo := flag.String("repo", "", "repository root (default: the nearest directory above the working one holding go.mod)")
	var peer peerOptions
	flag.StringVar(&peer.url, "target", "", "also measure this OpenAI-compatible endpoint (its base URL, e.g. http://127.0.0.1:4000/v1) as a peer leg in passthrough, stream, burst and sweep")
	flag.StringVar(&peer.name, "target-name", "", "the peer leg's name in the results (default: target, or the -peer name)")
	flag.StringVar(&peer.model, "model", "", "the model the peer is asked for (default: the bench bodies' own, \"chat\")")
	flag.Var(&peer.headers, "header", "NAME:VALUE header sent to the peer, repeatable; {mock} in a value is the mock's base URL")
	flag.StringVar(&peer.kind, "peer", "", "install and start a peer gateway pointed at the mock: portkey (needs node and npm)")
	mockAddr := flag.String("mock-addr", "", "listen address of the mock upstream (default: a free port), for a peer whose upstream is set in its own config")
	readBuf := flag.Int("read-buffer", fasthttpBuffers.read, "floor proxy and gateway's per-connection server read buffer, bytes")
	writeBuf := flag.Int("write-buffer", fasthttpBuffers.write, "floor proxy and gateway's per-connection server write buffer, bytes")
	upReadBuf := flag.Int("upstream-read-buffer", fasthttpBuffers.upstreamRead, "floor proxy and gateway's per-connection upstream read buffer, bytes")
	streamsBuf := flag.Int("streams-buffer", 0, "every connection buffer of both proxies in the held-streams scenario, bytes (0 = 1024, tuned for many open streams)")
	flag.Parse()

	if *render != "" {
		wrote, err := renderPerformanceFile(*render, *perf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Println("wrote", strings.Join(wrote, ", "))
		return 0
	}
	if *mode == "soak" {
		return soakMain(*out, *repo, time.Duration(legDur), *rate)
	}
	set, err := modeSettings(*mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if legDur > 0 {
		set.LegSeconds, set.SweepSeconds = time.Duration(legDur).Seconds(), time.Duration(legDur).Seconds()
	}
	if *streams > 0 {
		set.Streams = *streams
	}
	set.ReadBuffer, set.WriteBuffer, set.UpstreamReadBuffer = *readBuf, *writeBuf, *upReadBuf
	if *streamsBuf != 0 {
		set.StreamsBuffer = *streamsBuf
	}
	if min(*readBuf, *writeBuf, *upReadBuf, set.StreamsBuffer) <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -read-buffer, -write-buffer, -upstream-read-buffer and -streams-buffer must be positive")
		return 2
	}
	if err := peer.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if !flagSet("scenarios") {
		*list = strings.Join(set.Scenarios, ",")
	}
	selected, err := parseScenarios(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if *perf == "" && *mode == "full" {
		*perf = filepath.Join(*out, "PERFORMANCE.md")
	}

	if *repo == "" {
		if *repo, err = moduleRoot(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := filepath.Join(*out, *mode)
	b := &bench{set: set, started: time.Now(), peerOpts: peer, mockAddr: *mockAddr}
	if *profile {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		b.profileDir, _ = filepath.Abs(dir)
	}
	res, err := b.run(ctx, *repo, selected)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if res == nil {
			return 1
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted; results not written")
		return 1
	}
	files, werr := writeResults(res, dir)
	if werr != nil {
		fmt.Fprintln(os.Stderr, "bench:", werr)
		return 1
	}
	fmt.Printf("\nwrote %s/%s\n", dir, files)
	if b.profileDir != "" {
		if werr := writeProfileTops(b.profileDir); werr != nil {
			fmt.Fprintln(os.Stderr, "bench:", werr)
			return 1
		}
		fmt.Printf("wrote %s/gateway.{cpu,allocs}.{pprof,top.txt}\n", dir)
	}
	if *perf != "" {
		if werr := writeSection(*perf, renderPerformance(res, filepath.Join(dir, "chart.svg"), *perf)); werr != nil {
			fmt.Fprintln(os.Stderr, "bench:", werr)
			return 1
		}
		fmt.Println("wrote", *perf)
	}
	printTargets(res)
	var ran, skipped, failed int
	for _, s := range res.Scenarios {
		switch s.Status {
		case "ok":
			ran++
		case "skipped":
			skipped++
		default:
			failed++
		}
	}
	fmt.Printf("bench: %d scenarios produced figures, %d skipped, %d could not run (%.0f s)\n", ran, skipped, failed, res.WallSeconds)
	if err != nil || res.failed() {
		fmt.Println("FAILED: a scenario could not run (see above)")
		return 1
	}
	if p := res.Peer; p != nil && p.Status == "failed" {
		fmt.Printf("FAILED: the peer %s did not answer (see above)\n", p.Name)
		return 1
	}
	return 0
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func parseScenarios(list string) (map[string]bool, error) {
	sel := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		known := false
		for _, a := range allScenarios {
			known = known || a == n
		}
		if !known {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", n, strings.Join(allScenarios, ", "))
		}
		sel[n] = true
	}
	if len(sel) == 0 {
		return nil, errors.New("no scenario selected")
	}
	return sel, nil
}

// moduleRoot is the module's directory, for a run without -repo.
func moduleRoot() (string, error) {
	d, err := modroot.Dir()
	if err != nil {
		return "", fmt.Errorf("%w; pass -repo", err)
	}
	return d, nil
}
