package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
)

// TestCheckTargets: each goal is met, missed or not measured from its
// scenario's figure, and a scenario that did not run says why.
func TestCheckTargets(t *testing.T) {
	t.Parallel()
	pass := &scenarioResult{Name: "passthrough", Status: "ok"}
	pass.fig("gateway/floor CPU per request", 1.2, "×")
	stream := &scenarioResult{Name: "stream", Status: "ok"}
	stream.fig("gateway added TTFT p50", 150, "µs")
	streams := &scenarioResult{Name: "streams", Status: "ok"}
	streams.fig("gateway RSS projected for 10,000 streams", 530, "MB")
	streams.fig("gateway/floor memory per stream", 1.1, "×")
	burst := &scenarioResult{Name: "burst", Status: "ok"}
	burst.fig("gateway/floor streams/s", 0.41, "×")
	res := &results{Settings: settings{Streams: 9968}, Scenarios: []*scenarioResult{
		pass, stream, burst, streams, {Name: "toolloop", Status: "skipped", Reason: "no tools"},
	}}
	want := []targetCheck{
		{Name: "CPU", Status: "met", Measured: 1.2},
		{Name: "saturation", Status: "not measured", Detail: "sweep did not run"},
		{Name: "added p99", Status: "not measured", Detail: "sweep did not run"},
		{Name: "burst streams", Status: "missed", Measured: 0.41},
		{Name: "TTFT", Status: "met", Measured: 150},
		{Name: "memory per stream", Status: "missed", Measured: 1.1},
		{Name: "stream memory", Status: "missed", Measured: 530, Detail: "projected from 9968 streams"},
		{Name: "tool loop", Status: "not measured", Detail: "skipped: no tools"},
	}
	got := checkTargets(res)
	if len(got) != len(want) {
		t.Fatalf("%d checks, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || g.Status != w.Status || g.Measured != w.Measured || g.Detail != w.Detail {
			t.Errorf("check %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestRenderPeer: with a peer leg, the README section gains a column for
// it ("not run" in gateway-only scenarios) and its ratios against the floor
// and the gateway; a peer that did not run says why.
func TestRenderPeer(t *testing.T) {
	t.Parallel()
	legs := func(names ...string) []*leg {
		var ls []*leg
		for _, n := range names {
			ls = append(ls, &leg{Target: n, Latency: &pcts{P50: 1000, P99: 2000}, ThroughputRPS: 100, Added: &pcts{}})
		}
		return ls
	}
	pass := &scenarioResult{Name: "passthrough", Title: "Pass", Load: "closed 8", Status: "ok", Legs: legs("direct", "floor", "gateway", "pk")}
	pass.fig("pk/floor throughput", 0.5, "×")
	pass.fig("pk/gateway throughput", 0.8, "×")
	stream := &scenarioResult{Name: "stream", Title: "Stream", Load: "open 60 rps", Status: "ok"}
	stream.fig("pk added TTFT p50", 25000, "µs")
	stream.fig("gateway added TTFT p50", 150, "µs")
	tool := &scenarioResult{Name: "toolloop", Title: "Tools", Load: "open 60 rps", Status: "ok", Legs: legs("direct", "floor", "gateway")}
	res := &results{runInfo: runInfo{Started: "2026-11-24T00:00:00Z", Command: "go run ./bench"}, Settings: settings{Mode: "quick"},
		Peer: &peerInfo{Name: "pk", Kind: "portkey", Status: "ok"}, Scenarios: []*scenarioResult{pass, stream, tool}}
	out := renderPerformance(res, "bench/results/quick/chart.svg", "bench/results/PERFORMANCE.md")
	for _, want := range []string{
		"| scenario | direct | floor proxy | gateway | pk |",
		"| Tools (open 60 rps) | p50 1 ms (+0 µs), p99 2 ms | p50 1 ms (+0 µs), p99 2 ms | p50 1 ms (+0 µs), p99 2 ms | not run |",
		"pass-through throughput 0.5× the floor's and 0.8× the gateway's",
		"added time to first content token at p50 25000 µs (the gateway's 150 µs)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("section lacks %q:\n%s", want, out)
		}
	}
	res.Peer = &peerInfo{Name: "portkey", Kind: "portkey", Status: "skipped", Reason: "npm is not installed"}
	out = renderPerformance(res, "bench/results/quick/chart.svg", "bench/results/PERFORMANCE.md")
	if !strings.Contains(out, "The peer portkey was not measured (skipped): npm is not installed.") || strings.Contains(out, "| gateway | portkey |") {
		t.Errorf("a skipped peer must be explained and get no column:\n%s", out)
	}
}

// TestRenderBurst: the burst scenario's figures come from its legs, and it
// reaches the targets table of results.md, its row and the peer's ratio in
// the README section, and, when missed, the explanation with its CPU
// figures.
func TestRenderBurst(t *testing.T) {
	t.Parallel()
	l := func(name string, rps, cpu1k float64) *leg {
		return &leg{Target: name, ThroughputRPS: rps, ProxyCPUPer1k: cpu1k, Latency: &pcts{P50: 5000, P99: 12000}, Added: &pcts{}}
	}
	legs := []*leg{l("direct", 8000, 0.02), l("floor", 4000, 0.1), l("gateway", 1600, 0.25), l("pk", 400, 1)}
	tests := []struct {
		name   string
		gwRPS  float64
		status string
		want   []string
		absent []string
	}{
		{name: "missed", gwRPS: 1600, status: "missed", want: []string{
			"| streams/s with a burst upstream ≥ 0.9× the floor proxy | 0.4 × | missed |",
			"| Streams (closed 32) | 8000 streams/s, p50/p99 5/12 ms, CPU 20 µs/stream | 4000 streams/s, p50/p99 5/12 ms, CPU 100 µs/stream | " +
				"1600 streams/s, p50/p99 5/12 ms, CPU 250 µs/stream | 400 streams/s, p50/p99 5/12 ms, CPU 1000 µs/stream |",
			"streams/s with a burst upstream 0.1× the floor's and 0.25× the gateway's",
			"the gateway serves 0.4× the floor proxy's streams per second. It spends 250 µs of CPU per stream against the floor's 100 µs (2.5×)",
		}},
		{name: "met", gwRPS: 3800, status: "met", want: []string{
			"| streams/s with a burst upstream ≥ 0.9× the floor proxy | 0.95 × | met |",
		}, absent: []string{"streams per second. It spends"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ls := make([]*leg, len(legs))
			for i, l := range legs {
				c := *l
				ls[i] = &c
			}
			ls[2].ThroughputRPS = tc.gwRPS
			s := &scenarioResult{Name: "burst", Title: "Streams", Load: "closed 32", Status: "ok", Legs: ls}
			burstFigures(s, byTarget(ls), "pk")
			res := &results{runInfo: runInfo{Started: "2026-11-24T00:00:00Z", Command: "go run ./bench"}, Settings: settings{Mode: "full"},
				Peer: &peerInfo{Name: "pk", Kind: "portkey", Status: "ok", CPUMeasured: true}, Scenarios: []*scenarioResult{s}}
			res.Targets = checkTargets(res)
			out := renderPerformance(res, "bench/results/full/chart.svg", "bench/results/PERFORMANCE.md")
			if md := markdown(res); !strings.Contains(md, "| burst streams | streams/s with a burst upstream ≥ 0.9× the floor proxy |") ||
				!strings.Contains(md, "| **"+tc.status+"** |") {
				t.Errorf("results.md lacks the burst target (%s):\n%s", tc.status, md)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("section lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(out, a) {
					t.Errorf("section has %q:\n%s", a, out)
				}
			}
		})
	}
}

// TestNoisySaturation: a saturation ratio far below what the CPU ratio
// explains is called noise, not put down to CPU; one in line with it is put
// down to CPU.
func TestNoisySaturation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sat   float64
		noisy bool
	}{{0.125, true}, {0.4, false}} {
		pass := &scenarioResult{Name: "passthrough", Status: "ok"}
		pass.fig("gateway/floor CPU per request", 2.29, "×")
		sweep := &scenarioResult{Name: "sweep", Status: "ok"}
		sweep.fig("gateway/floor saturation rate", tc.sat, "×")
		res := &results{Scenarios: []*scenarioResult{pass, sweep}}
		res.Targets = checkTargets(res)
		got := strings.Join(shortfalls(res), "\n")
		if strings.Contains(got, "noisier than the proxies' cost") != tc.noisy || strings.Contains(got, "garbage collection's mark work") == tc.noisy {
			t.Errorf("saturation %v (CPU 2.29×): %s", tc.sat, got)
		}
	}
}

// TestStreamMemorySentence: the README's 10,000-stream sentence gives the
// buffer size both proxies ran with, each one's cost per stream, the
// gateway's stack share and its idle process, whichever proxy costs more.
func TestStreamMemorySentence(t *testing.T) {
	t.Parallel()
	st := &scenarioResult{Name: "streams", Status: "ok", Legs: []*leg{{Target: "gateway", IdleRSSMB: 60.5}}}
	st.fig("gateway memory per stream", 25.3, "KiB")
	st.fig("floor memory per stream", 36.9, "KiB")
	st.fig("gateway goroutines per stream", 1, "")
	st.fig("gateway goroutine stack per stream", 8, "KiB")
	res := &results{Settings: settings{StreamsBuffer: 1024}}
	got := streamMemorySentence(res, st, targetCheck{Measured: 316.5, Detail: "projected from 9968 streams"})
	want := "10,000 streams take 316 MB (projected from 9968 streams), both proxies with 1024 B connection buffers. " +
		"An open stream costs the gateway 25.3 KiB (1 goroutine per stream, 8 KiB of it stack) and the floor proxy 36.9 KiB " +
		"(360 MB for 10,000); the gateway's idle process (binary, tokenizer tables, pools) is 60.5 MB of the total."
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestFixedRateTailNamesADisturbedStep: the added-p99 shortfall says the
// step was disturbed when the floor proxy's own tail at that rate is over
// the 1 ms bar too, and not when the floor kept under it; the CPU
// shortfall carries the layers scenario's breakdown when that ran.
func TestFixedRateTailNamesADisturbedStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		floor     float64
		disturbed bool
	}{{1506, true}, {164, false}} {
		pass := &scenarioResult{Name: "passthrough", Status: "ok"}
		pass.fig("gateway/floor CPU per request", 2.2, "×")
		layers := &scenarioResult{Name: "layers", Status: "ok"}
		layers.fig("core/floor CPU per request", 1.69, "×")
		layers.fig("gateway added CPU per request", 5.4, "µs")
		sweep := &scenarioResult{Name: "sweep", Status: "ok"}
		sweep.fig("gateway/floor saturation rate", 0.5, "×")
		sweep.fig("gateway highest rate with added p99 < 10 ms", 9369, "rps")
		sweep.fig(fmt.Sprintf("gateway added p99 at %d rps", fixedSweepRate), 1179, "µs")
		sweep.fig(fmt.Sprintf("floor added p99 at %d rps", fixedSweepRate), tc.floor, "µs")
		res := &results{Scenarios: []*scenarioResult{pass, layers, sweep}}
		res.Targets = checkTargets(res)
		got := strings.Join(shortfalls(res), "\n")
		if strings.Contains(got, "this step was disturbed") != tc.disturbed {
			t.Errorf("floor %v µs: %s", tc.floor, got)
		}
		if !strings.Contains(got, "costs 1.69× the floor's CPU; on top of it the access log 5.4 µs.") {
			t.Errorf("no layer breakdown: %s", got)
		}
	}
}

// TestNegativeAddedP99IsNotMet: a gateway "added p99" below zero means the
// direct baseline's own tail at that rate was the longer one (a disturbed
// step), which says nothing of the gateway: not measured, never met.
func TestNegativeAddedP99IsNotMet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		want string
	}{{-16496, "not measured"}, {900, "met"}, {1179, "missed"}} {
		sweep := &scenarioResult{Name: "sweep", Status: "ok"}
		sweep.fig(fmt.Sprintf("gateway added p99 at %d rps", fixedSweepRate), tc.v, "µs")
		res := &results{Scenarios: []*scenarioResult{sweep}}
		found := false
		for _, c := range checkTargets(res) {
			if c.Name != "added p99" {
				continue
			}
			found = true
			if c.Status != tc.want || tc.v < 0 && !strings.Contains(c.Detail, "disturbed") {
				t.Errorf("added p99 %v: %s (%s), want %s", tc.v, c.Status, c.Detail, tc.want)
			}
		}
		if !found {
			t.Fatal("no added p99 target")
		}
	}
}

// TestAddedP99NamesCollections: below the gateway's saturation, the added
// p99 sentence gives the collections the gateway ran at the fixed rate.
func TestAddedP99NamesCollections(t *testing.T) {
	t.Parallel()
	sweep := &scenarioResult{Name: "sweep", Status: "ok"}
	sweep.fig(fmt.Sprintf("gateway added p99 at %d rps", fixedSweepRate), 3208, "µs")
	sweep.fig(fmt.Sprintf("floor added p99 at %d rps", fixedSweepRate), 330, "µs")
	sweep.fig("gateway highest rate with added p99 < 10 ms", 6533, "rps")
	gcFigures(sweep, &leg{Target: "gateway", Seconds: 4, GCCycles: 8, GCMarkMS: 5.2, GCLiveMB: 5, AllocKBPerReq: 2.8},
		&leg{Target: "floor", Seconds: 4, GCCycles: 1, GCMarkMS: 1, GCLiveMB: 2, AllocKBPerReq: 0.15}, fmt.Sprintf(" at %d rps", fixedSweepRate))
	res := &results{Scenarios: []*scenarioResult{sweep}}
	res.Targets = checkTargets(res)
	got := strings.Join(shortfalls(res), "\n")
	if !strings.Contains(got, "its garbage collections among it (2 per second there, each marking for 5.2 ms on average; the floor proxy's 0.25 per second), each slowing") {
		t.Fatalf("added p99 sentence: %s", got)
	}
}

// TestLayerSentence: the layers sentence gives the core's ratio and what
// each layer adds, and calls an addition at or below zero (the legs'
// noise) nothing measurable rather than a negative cost.
func TestLayerSentence(t *testing.T) {
	t.Parallel()
	s := &scenarioResult{Name: "layers", Status: "ok"}
	s.fig("core/floor CPU per request", 1.755, "×")
	s.fig("+model layer added CPU per request", 4.9, "µs")
	s.fig("+request layer added CPU per request", -0.1, "µs")
	s.fig("gateway added CPU per request", 5.5, "µs")
	got := layerSentence(s)
	for _, want := range []string{"costs 1.755× the floor's CPU", "prompt cache) 4.9 µs",
		"response cache) nothing measurable (-0.1 µs)", "the access log 5.5 µs."} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
	for i := range s.Figures {
		if s.Figures[i].Name == "gateway added CPU per request" {
			s.Figures[i].Value = 0.4 // within the noise the other way
		}
	}
	if got := layerSentence(s); !strings.Contains(got, "the access log nothing measurable (0.4 µs).") {
		t.Errorf("a +0.4 µs layer: %s", got)
	}
	if got := layerSentence(s); strings.Contains(got, "leanest") {
		t.Errorf("an allowance sentence without the lean leg's figure: %s", got)
	}
}

// TestAllowanceSentence: the CPU target's allowance (0.25× the floor's
// CPU) is set against the lean checks and access line and the middleware
// layers, over or under it as the figures say.
func TestAllowanceSentence(t *testing.T) {
	t.Parallel()
	s := &scenarioResult{Name: "layers", Status: "ok"}
	s.fig(checksLogLeg+"/floor CPU per request", 1.149, "×")
	s.fig("core/floor CPU per request", 1.597, "×")
	s.fig("+request layer/floor CPU per request", 1.734, "×")
	got := allowanceSentence(s)
	for _, want := range []string{"A 1.25× ratio leaves 0.25× the floor's CPU", "takes 0.149× of it", "add 0.137× in the gateway",
		"0.286× in all, over it before routing"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
	for i := range s.Figures {
		if s.Figures[i].Name == checksLogLeg+"/floor CPU per request" {
			s.Figures[i].Value = 1.05
		}
	}
	if got := allowanceSentence(s); !strings.Contains(got, "0.187× in all, 0.063× of it left for routing") || strings.Contains(got, "timeouts") {
		t.Errorf("under the allowance: %s", got)
	}
	// With the timeouts leg, the allowance counts the lean floor that
	// bounds what a production server bounds.
	s.fig(timeoutsLeg+"/floor CPU per request", 1.12, "×")
	got = allowanceSentence(s)
	for _, want := range []string{"default timeouts (" + timeoutsLeg + ") takes 0.12× of it", "0.257× in all, over it before routing"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
}

// TestDefaultTimeouts: the timeouts leg's floor bounds what the gateway
// bounds by default, with the config's own defaults.
func TestDefaultTimeouts(t *testing.T) {
	t.Parallel()
	c := config.Defaults()
	got := strings.Join(defaultTimeouts(), " ")
	want := fmt.Sprintf("-read-timeout %s -idle-timeout %s -call-timeout 10m0s", c.Server.ReadTimeout.D(), c.Server.IdleTimeout.D())
	if got != want || c.Server.ReadTimeout.D() <= 0 || c.Server.IdleTimeout.D() <= 0 {
		t.Fatalf("flags %q, want %q", got, want)
	}
}

// TestMachineSentence: when both proxies go over the bar at about the same
// load on the machine, the saturation sentence says that CPU per request
// sets it and what CPU the target needs; when not, that the tail does.
func TestMachineSentence(t *testing.T) {
	t.Parallel()
	sweep := func(gCores float64) *scenarioResult {
		sw := &scenarioResult{Name: "sweep", Status: "ok"}
		sw.fig("gateway highest rate with added p99 < 10 ms", 10000, "rps")
		sw.fig("floor highest rate with added p99 < 10 ms", 20000, "rps")
		// The fixed-rate leg at the same offered rate must not be taken.
		sw.Legs = []*leg{
			{Target: "gateway", Step: "5000 rps", OfferedRPS: 10000, ThroughputRPS: 10000, ProxyCPUPer1k: 1, UpstreamCPUPer1k: 1, LoadgenCPUPer1k: 1},
			{Target: "gateway", Step: "0.40×sat", OfferedRPS: 10000, ThroughputRPS: 10000, ProxyCPUPer1k: gCores/10 - 0.07, UpstreamCPUPer1k: 0.04, LoadgenCPUPer1k: 0.03},
			{Target: "floor", Step: "0.80×sat", OfferedRPS: 20000, ThroughputRPS: 20000, ProxyCPUPer1k: 0.03, UpstreamCPUPer1k: 0.02, LoadgenCPUPer1k: 0.02},
		}
		return sw
	}
	// floor: 0.07 ms × 20,000/s = 1.4 cores; gateway 0.14 ms × 10,000/s = 1.4.
	got := machineSentence(sweep(1.4), saturationGoal)
	for _, want := range []string{"kept 1.4 cores busy, and 1.4 at the floor proxy's last step; both go over the bar at about the same load",
		"0.14 ms of CPU through the gateway and 0.07 ms through the floor proxy, so the gateway reaches that load at 0.5× the floor's rate",
		// 0.07/0.8 - 0.04 = 0.0475 ms: 1.58× the floor's 0.03.
		"at most 0.048 ms of the gateway's own CPU per request, 1.58× the floor proxy's, against the 0.07 ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if got := machineSentence(sweep(1.0), saturationGoal); !strings.Contains(got, "went over the bar at a lower load on the machine, so its tail") {
		t.Errorf("a gateway over the bar at 1.0 cores against the floor's 1.4: %s", got)
	}
	if got := machineSentence(sweep(1.8), saturationGoal); !strings.Contains(got, "held under the bar up to a higher load on the machine than the floor's, so its CPU per request, not a longer tail") ||
		strings.Contains(got, "so its tail") {
		t.Errorf("a gateway under the bar up to 1.8 cores against the floor's 1.4: %s", got)
	}
	if got := machineSentence(&scenarioResult{Name: "sweep"}, saturationGoal); got != "" {
		t.Errorf("no legs: %q", got)
	}
}

// TestTTFTFloorShare: the TTFT sentence says what of the goal the floor's
// own hop leaves, or that it takes all of it.
func TestTTFTFloorShare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		floor float64
		want  string
	}{
		{213.5, "In this run the floor proxy alone adds more than the 200 µs goal: the hop of a proxy in a process of its own takes the whole goal on this machine, and the gateway's own part is the 128 µs it adds over the floor's."},
		{150, "The floor proxy's own hop leaves 50 µs of the 200 µs goal; the gateway adds 192 µs over the floor's."},
	} {
		st := &scenarioResult{Name: "stream", Status: "ok"}
		st.fig("gateway added TTFT p50", 341.5, "µs")
		st.fig("floor added TTFT p50", c.floor, "µs")
		res := &results{Scenarios: []*scenarioResult{st}}
		res.Targets = checkTargets(res)
		if got := strings.Join(shortfalls(res), "\n"); !strings.Contains(got, c.want) {
			t.Errorf("floor %v: missing %q in:\n%s", c.floor, c.want, got)
		}
	}
}

// TestSweepConfirmsTheFirstStepOverTheBar: a proxy's first step over the
// bar is measured again, with every other proxy not past the bar yet (so
// that all of the step's figures come from one direct leg), and the second
// measurement decides; a proxy over the bar at an earlier step is not; the
// first measurement stays, marked superseded, and is not a saturation step.
func TestSweepConfirmsTheFirstStepOverTheBar(t *testing.T) {
	step := func(target string, addedP99 float64, errors int) *leg {
		return &leg{Target: target, Step: "0.40×sat", OfferedRPS: 9000, Errors: errors, Added: &pcts{P99: addedP99},
			ProxyCPUPer1k: 0.05, ThroughputRPS: 9000}
	}
	legs := []*leg{{Target: "direct", Step: "0.40×sat"}, step("floor", 3000, 0), step("gateway", 23000, 0), step("pk", 50, 2)}
	retry := firstOverBar(legs, map[string]bool{"pk": true})
	if len(retry) != 2 || !retry["gateway"] || !retry["floor"] {
		t.Fatalf("retry %v, want the gateway and the floor (pk was over before)", retry)
	}
	jobs := []job{{t: &target{name: "direct"}}, {t: &target{name: "floor"}}, {t: &target{name: "gateway"}}, {t: &target{name: "pk"}}}
	if js := retryJobs(jobs, retry); len(js) != 3 || js[0].t.name != "direct" || js[1].t.name != "floor" || js[2].t.name != "gateway" {
		t.Fatalf("retry jobs %v", js)
	}
	again := []*leg{{Target: "direct", Step: "0.40×sat, again"}, step("floor", 2500, 0), step("gateway", 4000, 0)}
	again[1].Step = "0.40×sat, again"
	again[2].Step, again[2].ProxyCPUPer1k = "0.40×sat, again", 0.07
	got := byTarget(confirmed(legs, again, retry))
	if got["gateway"] != again[2] || got["floor"] != again[1] || got["pk"] != legs[3] || !legs[2].Superseded || !legs[1].Superseded || legs[3].Superseded {
		t.Fatalf("confirmed legs: gateway %+v, floor %+v", got["gateway"], got["floor"])
	}
	sw := &scenarioResult{Name: "sweep", Legs: append(legs, again...)}
	sw.fig("gateway highest rate with added p99 < 10 ms", 9000, "rps")
	if l, ok := saturationLoad(sw, "gateway"); !ok || l.rate != 9000 || l.proxyMS != 0.07 {
		t.Fatalf("saturation load from the second measurement: %+v %v", l, ok)
	}
	if n := countRemeasured(sw.Legs); n != 1 {
		t.Fatalf("%d superseded", n)
	}
}

// A proxy's leg measured against a disturbed direct leg (its added p99 far
// below zero: direct's own tail was longer) is measured again, as a first
// step over the bar is; it was counted as under the bar, which made a
// disturbed step set the saturation rate (bench probe).
func TestSweepMeasuresADisturbedStepAgain(t *testing.T) {
	step := func(target string, addedP99 float64) *leg {
		return &leg{Target: target, Step: "0.50×sat", Added: &pcts{P99: addedP99}}
	}
	legs := []*leg{{Target: "direct", Step: "0.50×sat"}, step("floor", -556446), step("gateway", 3000)}
	// The floor was measured against a disturbed direct, and so, maybe,
	// was the gateway: both are measured again with direct.
	retry := firstOverBar(legs, map[string]bool{})
	if len(retry) != 2 || !retry["floor"] || !retry["gateway"] {
		t.Fatalf("retry %v, want the floor and the gateway", retry)
	}
	// A proxy past the bar already is not; a step with every proxy under
	// the bar and nothing disturbed is measured once.
	if retry := firstOverBar(legs, map[string]bool{"floor": true}); len(retry) != 0 {
		t.Fatalf("retry %v with the floor past the bar and the gateway under it", retry)
	}
	if retry := firstOverBar([]*leg{legs[0], step("floor", 400), step("gateway", 12000)}, map[string]bool{"floor": true}); len(retry) != 1 || !retry["gateway"] {
		t.Fatalf("retry %v, want the gateway alone (the floor is past the bar)", retry)
	}
	if retry := firstOverBar([]*leg{legs[0], step("floor", 400), step("gateway", 3000)}, map[string]bool{}); len(retry) != 0 {
		t.Fatalf("retry %v for a step under the bar", retry)
	}
	if !disturbed(legs[1]) || disturbed(legs[2]) || disturbed(step("x", -9000)) {
		t.Fatal("disturbed: only an added p99 at or below minus the bar")
	}
}

// A step measured twice judges each proxy by the lower of its two p99s less
// the lower of direct's two: a disturbed direct leg (long p99) neither
// passes a proxy measured against it nor, measured again, fails one; a
// disturbed proxy leg does not fail it either. The full run's two cases:
// the gateway judged against a direct whose p99 was 44.3 ms, then 25.6 ms
// (it passed at -0.7 ms); the floor under the bar at 7 ms, then over at
// 11.6 ms when measured again for the gateway (and its sweep ended there).
func TestSweepJudgesAStepMeasuredTwice(t *testing.T) {
	at := func(target string, p99, direct float64) *leg {
		return &leg{Target: target, Latency: &pcts{P99: p99}, Added: &pcts{P99: p99 - direct}}
	}
	first := []*leg{{Target: "direct", Latency: &pcts{P99: 44300}}, at("floor", 33300, 44300), at("gateway", 43600, 44300)}
	again := []*leg{{Target: "direct", Latency: &pcts{P99: 25600}}, at("floor", 30400, 25600), at("gateway", 42000, 25600)}
	judge(first, again)
	m := byTarget(again)
	if m["direct"].JudgedP99 != nil || m["floor"].JudgedP99 == nil || *m["floor"].JudgedP99 != 4800 || *m["gateway"].JudgedP99 != 16400 {
		t.Fatalf("judged floor %v gateway %v", m["floor"].JudgedP99, m["gateway"].JudgedP99)
	}
	if !underBar(m["floor"]) || underBar(m["gateway"]) {
		t.Fatal("the floor (4.8 ms) is under the bar, the gateway (16.4 ms) over it")
	}
	first = []*leg{{Target: "direct", Latency: &pcts{P99: 25000}}, at("floor", 32000, 25000), at("gateway", 36800, 25000)}
	again = []*leg{{Target: "direct", Latency: &pcts{P99: 25200}}, at("floor", 36800, 25200), at("gateway", 32800, 25200)}
	judge(first, again)
	m = byTarget(again)
	if !underBar(m["floor"]) || !underBar(m["gateway"]) || *m["floor"].JudgedP99 != 7000 || *m["gateway"].JudgedP99 != 7800 {
		t.Fatalf("judged floor %v gateway %v: both under the bar", *m["floor"].JudgedP99, *m["gateway"].JudgedP99)
	}
	if note := judgedNote("0.20×sat", again); !strings.Contains(note, "floor 7000 µs, gateway 7800 µs") {
		t.Fatalf("note %q", note)
	}
	// A leg with errors is left out of the minimum: its p99 is that of the
	// requests that succeeded (review). The gateway's first leg had errors
	// and a short p99; its second, none, adds 25 ms: over the bar.
	first = []*leg{{Target: "direct", Latency: &pcts{P99: 20000}}, at("gateway", 24000, 20000)}
	first[1].Errors = 40
	again = []*leg{{Target: "direct", Latency: &pcts{P99: 20000}}, at("gateway", 45000, 20000)}
	judge(first, again)
	if g := again[1]; g.JudgedP99 == nil || *g.JudgedP99 != 25000 || underBar(g) {
		t.Fatalf("judged %v: the leg with errors counted", *g.JudgedP99)
	}
	// A disturbed direct leg with errors is not the baseline either.
	first = []*leg{{Target: "direct", Latency: &pcts{P99: 5000}, Errors: 3}, at("floor", 26000, 5000)}
	again = []*leg{{Target: "direct", Latency: &pcts{P99: 20000}}, at("floor", 27000, 20000)}
	judge(first, again)
	if f := again[1]; f.JudgedP99 == nil || *f.JudgedP99 != 6000 {
		t.Fatalf("judged %v against a direct leg with errors", *f.JudgedP99)
	}
	// Nothing to judge by: said so, and the second leg's own figure decides.
	again = []*leg{{Target: "direct"}, at("floor", 27000, 20000)}
	judge([]*leg{{Target: "direct"}, at("floor", 26000, 5000)}, again)
	if again[1].JudgedP99 != nil || !strings.Contains(judgedNote("0.30×sat", again), "no proxy could be judged") {
		t.Fatalf("judged %v, note %q", again[1].JudgedP99, judgedNote("0.30×sat", again))
	}
}

// A ratio whose denominator is zero is no figure (it was 0×, which reads as
// the opposite of the truth: a peer that saturated at 3477 rps was "0× the
// gateway's" that saturated at once); a goal that reads it is not measured.
func TestRatioOverZeroIsNoFigure(t *testing.T) {
	sw := &scenarioResult{Name: "sweep", Status: "ok"}
	sw.fig("gateway/floor saturation rate", ratio(3477, 0), "×")
	if _, ok := sw.figure("gateway/floor saturation rate"); ok || len(sw.Notes) != 1 {
		t.Fatalf("figures %v, notes %v", sw.Figures, sw.Notes)
	}
	res := &results{Scenarios: []*scenarioResult{sw}}
	for _, c := range checkTargets(res) {
		if c.Name == "saturation" && c.Status != "not measured" {
			t.Fatalf("saturation goal: %+v", c)
		}
	}
}

// -render of a quick run's results rewrites its results.md, not the
// published Performance section beside the full run's (bench probe); a
// full run's results, or an explicit -performance path, still write it.
func TestRenderQuickLeavesThePerformanceSection(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, mode := range []string{"quick", "full"} {
		dir := filepath.Join(root, mode)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(&results{Settings: settings{Mode: mode}, runInfo: runInfo{Command: "go run ./bench -mode " + mode, Started: "2026-11-30T00:00:00Z", WallSeconds: 600}})
		if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	perf := filepath.Join(root, "PERFORMANCE.md")
	if _, err := renderPerformanceFile(filepath.Join(root, "quick", "results.json"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(perf); !os.IsNotExist(err) {
		t.Fatalf("a quick run's render wrote %s: %v", perf, err)
	}
	if _, err := os.Stat(filepath.Join(root, "quick", "results.md")); err != nil {
		t.Fatal(err)
	}
	if _, err := renderPerformanceFile(filepath.Join(root, "full", "results.json"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(perf); err != nil {
		t.Fatalf("a full run's render: %v", err)
	}
}

// The 10,000-stream goal is not judged from quick mode's 500 streams: the
// projection moved between 285 and 342 MB over two runs of the same code.
func TestStreamMemoryNotJudgedFromFewStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		streams int
		want    string
	}{{500, "not measured"}, {9968, "met"}} {
		s := &scenarioResult{Name: "streams", Status: "ok"}
		s.fig("gateway RSS projected for 10,000 streams", 285, "MB")
		for _, c := range checkTargets(&results{Settings: settings{Streams: tc.streams}, Scenarios: []*scenarioResult{s}}) {
			if c.Name == "stream memory" && c.Status != tc.want {
				t.Fatalf("%d streams: %+v, want %s", tc.streams, c, tc.want)
			}
		}
	}
}
