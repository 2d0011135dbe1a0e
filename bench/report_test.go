package main

import "testing"

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
