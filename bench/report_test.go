package main

import (
	"strings"
	"testing"
)

// TestCheckTargets: each goal is met, missed or not measured from its
// scenario's figure, and a scenario that did not run says why.
func TestCheckTargets(t *testing.T) {
	t.Parallel()
	pass := &scenarioResult{Name: "passthrough", Status: "ok"}
	pass.fig("gateway/floor throughput", 0.9, "×")
	stream := &scenarioResult{Name: "stream", Status: "ok"}
	stream.fig("gateway added TTFT p50", 150, "µs")
	streams := &scenarioResult{Name: "streams", Status: "ok"}
	streams.fig("gateway RSS projected for 10,000 streams", 530, "MB")
	res := &results{Settings: settings{Streams: 9968}, Scenarios: []*scenarioResult{
		pass, stream, streams, {Name: "toolloop", Status: "skipped", Reason: "no tools"},
	}}
	want := []targetCheck{
		{Name: "throughput", Status: "met", Measured: 0.9},
		{Name: "added p99", Status: "not measured", Detail: "sweep did not run"},
		{Name: "TTFT", Status: "met", Measured: 150},
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
