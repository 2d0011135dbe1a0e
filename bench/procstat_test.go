package main

import (
	"strings"
	"testing"
)

// TestParseCPULine: busy time is user, nice and system; steal is its own
// figure, not busy time; anything but the aggregate cpu line is nothing.
func TestParseCPULine(t *testing.T) {
	t.Parallel()
	busy, steal := parseCPULine("cpu  1000 20 300 688006 7346 5 26204 1940 77 0")
	if busy != 13.2 || steal != 19.4 {
		t.Errorf("busy %v steal %v, want 13.2 and 19.4", busy, steal)
	}
	if b, s := parseCPULine("cpu0 1000 20 300 688006 7346 5 26204 1940 0 0"); b != 0 || s != 0 {
		t.Errorf("a per-core line read as %v %v", b, s)
	}
	if b, s := parseCPULine("cpu  1000 20 300"); b != 13.2 || s != 0 {
		t.Errorf("a kernel without steal read as %v %v", b, s)
	}
}

// TestStealReported: a run's steal reaches its legs' table in results.md,
// the machine line, and, past 0.05 cores, the README section's notes.
func TestStealReported(t *testing.T) {
	t.Parallel()
	l := &leg{Target: "gateway", Load: "closed 8", Latency: &pcts{P50: 1000, P99: 2000}, ThroughputRPS: 100, Seconds: 5, OtherCores: 0.01, StealCores: 0.17}
	pass := &scenarioResult{Name: "passthrough", Title: "Pass", Load: "closed 8", Status: "ok", Legs: []*leg{l}}
	res := &results{runInfo: runInfo{Started: "2026-11-24T00:00:00Z", Command: "go run ./bench"}, Settings: settings{Mode: "full"},
		Scenarios: []*scenarioResult{pass}}
	res.Machine.StealCores = legMean(res, func(l *leg) float64 { return l.StealCores })
	if res.Machine.StealCores != 0.17 {
		t.Fatalf("machine steal %v, want the legs' 0.17", res.Machine.StealCores)
	}
	var b strings.Builder
	writeMachine(&b, res)
	writeLegs(&b, pass)
	md := b.String()
	for _, want := range []string{"the hypervisor stole 0.17 cores", "other cores | steal cores |", "| 0.01 | 0.17 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("results lack %q:\n%s", want, md)
		}
	}
	note := "The hypervisor stole 0.17 of the 2 cores"
	if out := strings.Join(shortfalls(res), "\n"); !strings.Contains(out, note) {
		t.Errorf("notes lack the steal:\n%s", out)
	}
	res.Machine.StealCores = 0.01
	if out := strings.Join(shortfalls(res), "\n"); strings.Contains(out, "hypervisor") {
		t.Errorf("a negligible steal is noted:\n%s", out)
	}
}
