package main

import (
	"context"
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

// TestSweepHalfwayStepRunsBeforeTheStepsBeyond: a proxy's halfway step is
// measured right after its first step over the bar (and that step's second
// measurement), before any higher step, whose backlog would still weigh
// on the proxies; a halfway step under the bar raises the proxy's
// saturation rate to it.
func TestSweepHalfwayStepRunsBeforeTheStepsBeyond(t *testing.T) {
	t.Parallel()
	// The gateway goes over the bar above 2,600 rps, the floor above
	// 4,600: its first step over is 3,000 (measured twice), its halfway
	// step 2,500, before 4,000; the floor's first over is 5,000 (twice),
	// its halfway 4,500, before 6,000. (5,000 first: the fixed rate.)
	rates := sweepRates(t, 2600, 4600, map[string]float64{"gateway": 2500, "floor": 4500})
	if want := []float64{5000, 1000, 2000, 3000, 3000, 2500, 4000, 5000, 5000, 4500, 6000}; !slices.Equal(rates, want) {
		t.Fatalf("rates measured %v, want %v", rates, want)
	}
	// Both first over at 3,000: one halfway step at 2,500 decides for both
	// (measured twice, as the floor is over the bar there).
	rates = sweepRates(t, 2600, 2400, map[string]float64{"gateway": 2500, "floor": 2000})
	if want := []float64{5000, 1000, 2000, 3000, 3000, 2500, 2500, 4000, 5000, 6000}; !slices.Equal(rates, want) {
		t.Fatalf("rates measured %v, want %v", rates, want)
	}
}

// sweepRates runs a sweep (direct saturation 10,000 rps, steps of a tenth
// up to 0.6) whose gateway and floor go over the bar above the rates given,
// checks each proxy's saturation rate and returns the rates measured, in
// order.
func sweepRates(t *testing.T, gatewayLimit, floorLimit float64, want map[string]float64) []float64 {
	t.Helper()
	limit := map[string]float64{"gateway": gatewayLimit, "floor": floorLimit}
	var rates []float64
	b := &bench{ctx: context.Background(), directSaturation: 10000,
		set: settings{SweepFractions: []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, SweepSeconds: 1}}
	b.direct = makeTarget("direct", "127.0.0.1:1", "http://127.0.0.1:1/v1", false, nil, nil, 1)
	b.floor = makeTarget("floor", "127.0.0.1:1", "http://127.0.0.1:1/v1", false, nil, nil, 1)
	b.gateway = makeTarget("gateway", "127.0.0.1:1", "http://127.0.0.1:1/v1", false, nil, nil, 1)
	b.measureLegs = func(jobs []job, ls loadSpec) []*leg {
		rates = append(rates, ls.rate)
		var legs []*leg
		for _, j := range jobs {
			l := &leg{Target: j.t.name, OfferedRPS: ls.rate, Requests: 100}
			if at, ok := limit[j.t.name]; ok {
				l.Added = &pcts{P99: map[bool]float64{true: 3000, false: 30000}[ls.rate <= at]}
			}
			legs = append(legs, l)
		}
		return legs
	}
	r := b.sweep()
	for name, rate := range want {
		if got, _ := r.figure(name + " highest rate with added p99 < 10 ms"); got != rate {
			t.Errorf("%s saturation %v, want %v", name, got, rate)
		}
	}
	return rates
}
