package main

import (
	"slices"
	"testing"
)

// TestSweepHalfwayStep: a proxy with a last step under the bar and a first
// step over it gets one more step halfway between them; a proxy that never
// went over, or never was under, gets none; the halfway steps run by rate.
func TestSweepHalfwayStep(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ best, over, want float64 }{
		{4016, 6024, 5020},
		{10040, 12048, 11044},
		{0, 2008, 0},    // over at the lowest step: no saturation rate to refine
		{20080, 0, 0},   // never over
		{6024, 6024, 0}, // not below its first step over (a step judged disturbed)
	} {
		if got := refineRate(c.best, c.over); got != c.want {
			t.Errorf("refineRate(%v, %v) = %v, want %v", c.best, c.over, got, c.want)
		}
	}
	best := map[string]float64{"gateway": 4016, "floor": 10040, "pk": 0}
	overAt := map[string]float64{"gateway": 6024, "floor": 12048, "pk": 2008}
	if got := refineOrder(best, overAt); !slices.Equal(got, []string{"gateway", "floor"}) {
		t.Errorf("refineOrder = %v, want [gateway floor]", got)
	}
	if got := refineStep(5020.0 / 20080); got != "0.25×sat" {
		t.Errorf("refineStep = %q", got)
	}
	if got := refineStep(0.075); got != "0.075×sat" {
		t.Errorf("refineStep = %q", got)
	}
}

// TestSweepHalfwayStepLeavesOutProxiesPastTheBar: a halfway step measures
// direct and every proxy whose first step over the bar is above its rate,
// never one already past the bar there (its backlog would spill into the
// other legs).
func TestSweepHalfwayStepLeavesOutProxiesPastTheBar(t *testing.T) {
	t.Parallel()
	var jobs []job
	for _, name := range []string{"direct", "floor", "gateway", "pk"} {
		jobs = append(jobs, job{t: &target{name: name}})
	}
	overAt := map[string]float64{"gateway": 6024, "floor": 12048, "pk": 2008}
	names := func(js []job) (out []string) {
		for _, j := range js {
			out = append(out, j.t.name)
		}
		return out
	}
	if got := names(notPast(jobs, overAt, 5020)); !slices.Equal(got, []string{"direct", "floor", "gateway"}) {
		t.Errorf("at the gateway's halfway step: %v", got)
	}
	if got := names(notPast(jobs, overAt, 11044)); !slices.Equal(got, []string{"direct", "floor"}) {
		t.Errorf("at the floor's halfway step: %v", got)
	}
	delete(overAt, "pk")
	if got := names(notPast(jobs, overAt, 11044)); !slices.Equal(got, []string{"direct", "floor", "pk"}) {
		t.Errorf("a proxy never over the bar is measured: %v", got)
	}
}
