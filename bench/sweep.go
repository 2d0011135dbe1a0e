package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// addedP99Limit is the sweep's bar: the highest rate whose added p99 stays
// under it is the saturation rate of a proxy.
const addedP99Limit = 10000.0 // µs

// fixedSweepRate is the offered rate at which the sweep reports the added
// p99 of every proxy, whatever the direct saturation rate: a rate users
// compare gateways at.
const fixedSweepRate = 5000

// sweep raises a constant arrival rate of non-streaming requests in steps
// (fractions of the direct saturation rate) and measures each target at each
// step, interleaved. It finds the highest rate at which the gateway's (and
// the floor's) added p99 stays under 10 ms with no error, at every step up to
// it, the added p99 at half of the direct saturation rate, and first the added
// p99 at fixedSweepRate.
func (b *bench) sweep() *scenarioResult {
	r := &scenarioResult{Name: "sweep", Title: "Saturation sweep, non-streaming, open model"}
	if b.directSaturation == 0 {
		ls := b.spec(0, b.set.Concurrency, min(b.set.LegSeconds, 1))
		legs := b.legs([]job{{b.direct, b.direct.plain(chatBody, "", nil)}}, ls)
		b.directSaturation = legs[0].ThroughputRPS
	}
	sat := b.directSaturation
	if sat <= 0 {
		r.Status, r.Reason = "failed", "could not measure the direct saturation rate"
		return r
	}
	r.Load = fmt.Sprintf("open, %d rps, then steps of %.0f rps (direct saturation, closed %d) × %v", fixedSweepRate, sat, b.set.Concurrency, b.set.SweepFractions)
	if fixedSweepRate < sat {
		// The fixed rate is a figure of its own, outside the saturation
		// search (its steps must rise in order).
		legs := b.legs(b.plainJobs(chatBody, "", nil), b.spec(fixedSweepRate, 0, b.set.SweepSeconds))
		for _, l := range legs {
			l.Step = fmt.Sprintf("%d rps", fixedSweepRate)
			if l.Target != "direct" && l.Added != nil {
				r.fig(fmt.Sprintf("%s added p99 at %d rps", l.Target, fixedSweepRate), l.Added.P99, "µs")
			}
		}
		m := byTarget(legs)
		gcFigures(r, m["gateway"], m["floor"], fmt.Sprintf(" at %d rps", fixedSweepRate))
		r.Legs = append(r.Legs, legs...)
	}
	best, over := map[string]float64{}, map[string]bool{}
	overAt := map[string]float64{} // each proxy's first step over the bar
	var firstOver []*leg           // the legs of the step where the gateway first went over the bar
	wasBeyond := false
	// The steps are a tenth of direct's saturation apart, so a proxy's
	// saturation rate is known to within one: one more step halfway
	// between its last step under the bar and its first over it halves
	// that. It decides for its own proxy only; the proxies not past the
	// bar at its rate are measured with it, as at every step. It runs
	// right after the proxy's first step over the bar, before the steps
	// beyond: after those, what their backlog left (thousands of
	// connections, a grown heap) would still weigh on the proxies.
	// Proxies first over the bar at the same step whose halfway steps
	// fall on the same rate share one.
	refine := func(rate float64, names []string) {
		jobs := notPast(b.withPeer(b.plainJobs(chatBody, "", nil), func(t *target) workload { return t.plain(chatBody, "", nil) }), overAt, rate)
		legs := b.sweepStep(r, jobs, b.spec(rate, 0, b.set.SweepSeconds), refineStep(rate/sat), map[string]bool{})
		m := byTarget(legs)
		for _, name := range names {
			l := m[name]
			switch {
			case l == nil: // not measured (the run was stopped)
			case disturbed(l):
				r.Notes = append(r.Notes, fmt.Sprintf("%s at %.0f rps (halfway step): measured twice against a disturbed direct leg; not counted", name, rate))
			case underBar(l):
				best[name] = rate
				r.Notes = append(r.Notes, fmt.Sprintf("%s at %.0f rps, halfway between its last step under the bar and its first over it: under the bar", name, rate))
			default:
				if name == "gateway" {
					firstOver = legs
				}
				r.Notes = append(r.Notes, fmt.Sprintf("%s at %.0f rps, halfway between its last step under the bar and its first over it: over the bar", name, rate))
			}
		}
	}
	for _, f := range b.set.SweepFractions {
		if b.ctx.Err() != nil {
			break
		}
		ls := b.spec(round(f*sat, 0), 0, b.set.SweepSeconds)
		jobs := b.plainJobs(chatBody, "", nil)
		// A peer is measured up to its first step over the bar: past its
		// saturation its backlog would only slow the sweep and spill into
		// the next legs.
		if b.peer != nil && !over[b.peer.name] {
			jobs = b.withPeer(jobs, func(t *target) workload { return t.plain(chatBody, "", nil) })
		}
		legs := b.sweepStep(r, jobs, ls, fmt.Sprintf("%.2f×sat", f), over)
		beyond := true
		justOver := map[string]float64{} // the proxies whose first step over the bar this is
		for _, l := range legs {
			if l.Target == "direct" {
				continue
			}
			// The saturation rate is the last step before the first one over
			// the bar: a later step that looks fine (because direct had a
			// noisy tail there) does not count.
			under := underBar(l)
			switch {
			case disturbed(l):
				// Measured twice against a disturbed direct leg: the step
				// decides nothing for this proxy.
				r.Notes = append(r.Notes, fmt.Sprintf("%s at %.2f×sat: measured twice, direct's lower p99 was longer than this proxy's lower one by more than the bar; the step is not counted for it",
					l.Target, f))
			case under && !over[l.Target]:
				best[l.Target] = max(best[l.Target], ls.rate)
			case !under:
				if l.Target == "gateway" && !over["gateway"] {
					firstOver = legs
				}
				if !over[l.Target] {
					overAt[l.Target], justOver[l.Target] = ls.rate, ls.rate
				}
				over[l.Target] = true
			}
			if p99, ok := addedP99(l); !ok || p99 < 5*addedP99Limit {
				beyond = false
			}
			if p99, ok := addedP99(l); f == 0.5 && ok {
				r.fig(l.Target+" added p99 at half direct saturation", p99, "µs")
			}
		}
		names := refineOrder(best, justOver)
		for i := 0; i < len(names) && b.ctx.Err() == nil; {
			rate, j := refineRate(best[names[i]], overAt[names[i]]), i+1
			for j < len(names) && refineRate(best[names[j]], overAt[names[j]]) == rate {
				j++
			}
			refine(rate, names[i:j])
			i = j
		}
		if beyond && wasBeyond {
			r.Notes = append(r.Notes, fmt.Sprintf("stopped after %.2f×: both proxies past %.0f ms added p99 at two steps in a row", f, 5*addedP99Limit/1000))
			break
		}
		wasBeyond = beyond
	}
	if n := countRemeasured(r.Legs); n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d step(s) measured again: a proxy's first step over the bar, or a step whose direct leg was disturbed, is measured a second time "+
			"(with direct and every proxy not past the bar yet), and each proxy is judged by the lower of its two p99s less the lower of direct's two "+
			"(a disturbance only lengthens a tail); both measurements are in the table, each with its own added figures", n))
	}
	r.fig("direct saturation (closed model)", sat, "rps")
	r.fig("gateway highest rate with added p99 < 10 ms", best["gateway"], "rps")
	r.fig("floor highest rate with added p99 < 10 ms", best["floor"], "rps")
	r.fig("gateway/floor saturation rate", ratio(best["gateway"], best["floor"]), "×")
	if firstOver != nil {
		m := byTarget(firstOver)
		r.fig("gateway's first step over the bar", m["gateway"].OfferedRPS, "rps")
		gcFigures(r, m["gateway"], m["floor"], " at the gateway's first step over the bar")
	}
	if p := b.peer; p != nil {
		r.fig(p.name+" highest rate with added p99 < 10 ms", best[p.name], "rps")
		r.fig(p.name+"/floor saturation rate", ratio(best[p.name], best["floor"]), "×")
		r.fig(p.name+"/gateway saturation rate", ratio(best[p.name], best["gateway"]), "×")
		if over[p.name] {
			r.Notes = append(r.Notes, p.name+" was measured up to its first step over 10 ms added p99 and not at the steps after it")
		}
	}
	r.Status = "ok"
	for _, l := range r.Legs {
		if l.ok() == 0 && l.Target != "direct" && l.Step == r.Legs[0].Step {
			r.Status, r.Reason = "failed", l.Target+": no successful request at the lowest step: "+l.ErrorSample
		}
	}
	if len(r.Legs) == 0 {
		r.Status, r.Reason = "failed", "no step ran"
	}
	return r
}

// machineLoad is what one sweep leg cost the whole machine: the CPU of the
// proxy, the mock behind it and the load generator per request (ms), and
// so the cores they kept busy at the leg's rate.
type machineLoad struct {
	rate, cpuMS, proxyMS, cores float64
}

// saturationLoad is the machine load at target's last sweep step under the
// bar (its saturation rate): false when the run has no such step or its
// CPU was not measured.
func saturationLoad(sw *scenarioResult, target string) (machineLoad, bool) {
	rate, ok := sw.figure(target + " highest rate with added p99 < 10 ms")
	if !ok || rate <= 0 {
		return machineLoad{}, false
	}
	for _, l := range sw.Legs {
		step := strings.HasSuffix(strings.TrimSuffix(l.Step, againStep), "×sat")
		if l.Target != target || l.OfferedRPS != rate || !step || l.Superseded || l.CPUNotMeasured || l.ProxyCPUPer1k <= 0 {
			continue
		}
		ms := l.ProxyCPUPer1k + l.UpstreamCPUPer1k + l.LoadgenCPUPer1k // s per 1,000 = ms per request
		return machineLoad{rate: rate, cpuMS: ms, proxyMS: l.ProxyCPUPer1k, cores: ms * l.ThroughputRPS / 1000}, true
	}
	return machineLoad{}, false
}

// machineSentence compares the machine's load at the gateway's and the
// floor's saturation ("" when either is missing). Every process of the run
// shares the same cores, so a proxy's tail goes over the bar at some load on
// the machine; when both go over at about the same load, the gateway's
// saturation rate is the floor's times the ratio of the machine's CPU per
// request through each, and the target asks for less CPU per request, not
// a shorter tail at the same load.
func machineSentence(sw *scenarioResult, want float64) string {
	g, ok1 := saturationLoad(sw, "gateway")
	f, ok2 := saturationLoad(sw, "floor")
	if !ok1 || !ok2 || g.cpuMS <= 0 || f.proxyMS <= 0 {
		return ""
	}
	same := math.Abs(g.cores-f.cores) <= 0.1*f.cores
	out := fmt.Sprintf("at its last step under the bar the machine (proxy, mock and load generator on the same cores) kept %s cores busy, "+
		"and %s at the floor proxy's last step",
		fmtNum(round(g.cores, 2)), fmtNum(round(f.cores, 2)))
	switch {
	case !same && g.cores < f.cores:
		return out + "; the gateway's tail went over the bar at a lower load on the machine, so its tail, not only its CPU per request, " +
			"sets its saturation."
	case !same:
		// A gateway that holds its tail under the bar at more load on the
		// machine than the floor is bounded by what its requests cost.
		return out + fmt.Sprintf("; the gateway's tail held under the bar up to a higher load on the machine than the floor's, so its CPU per request, "+
			"not a longer tail, sets its saturation (%s ms of the machine's CPU per request through the gateway, %s ms through the floor proxy).",
			fmtNum(round(g.cpuMS, 3)), fmtNum(round(f.cpuMS, 3)))
	}
	out += fmt.Sprintf("; both go over the bar at about the same load on the machine. A request costs the machine %s ms of CPU through the gateway "+
		"and %s ms through the floor proxy, so the gateway reaches that load at %s× the floor's rate: its saturation follows its CPU per request, "+
		"its garbage collections' share included.", fmtNum(round(g.cpuMS, 3)), fmtNum(round(f.cpuMS, 3)), fmtNum(round(f.cpuMS/g.cpuMS, 2)))
	if want > 0 {
		// The gateway's own share of the machine's CPU per request that
		// would reach want× the floor's rate at the same load, the mock and
		// the load generator costing what they did at the floor's rate.
		own := f.cpuMS/want - (f.cpuMS - f.proxyMS)
		if own > 0 {
			out += fmt.Sprintf(" A saturation of %s× the floor's would need at most %s ms of the gateway's own CPU per request, %s× the floor proxy's, against the %s ms it spent at its saturation.",
				fmtNum(want), fmtNum(round(own, 3)), fmtNum(round(own/f.proxyMS, 2)), fmtNum(round(g.proxyMS, 3)))
		}
	}
	return out
}

// sweepStep measures jobs under ls as the sweep step name, and measures it
// again when a proxy not in over went over the bar or was measured against
// a disturbed direct leg (firstOverBar); it adds every leg to r and returns
// the step's legs, each proxy's second measurement in place of its first.
func (b *bench) sweepStep(r *scenarioResult, jobs []job, ls loadSpec, name string, over map[string]bool) []*leg {
	legs := b.legs(jobs, ls)
	for _, l := range legs {
		l.Step = name
	}
	r.Legs = append(r.Legs, legs...)
	if retry := firstOverBar(legs, over); len(retry) > 0 {
		again := b.legs(retryJobs(jobs, retry), ls)
		for _, l := range again {
			l.Step = name + againStep
		}
		r.Legs = append(r.Legs, again...)
		judge(legs, again)
		r.Notes = append(r.Notes, judgedNote(name, again))
		legs = confirmed(legs, again, retry)
	}
	return legs
}

// refineRate is the rate halfway between a proxy's saturation rate (its
// last sweep step under the bar) and its first step over the bar; 0 when
// it has not both.
func refineRate(best, overAt float64) float64 {
	if best <= 0 || overAt <= best {
		return 0
	}
	return round((best+overAt)/2, 0)
}

// refineOrder is the proxies with a halfway step to measure, by its rate.
func refineOrder(best, overAt map[string]float64) []string {
	var out []string
	for name := range overAt {
		if refineRate(best[name], overAt[name]) > 0 {
			out = append(out, name)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ri, rj := refineRate(best[out[i]], overAt[out[i]]), refineRate(best[out[j]], overAt[out[j]])
		return ri < rj || ri == rj && out[i] < out[j]
	})
	return out
}

// notPast is jobs without the proxies already over the bar at or below
// rate: past its saturation a proxy's backlog would only spill into the
// other legs.
func notPast(jobs []job, overAt map[string]float64, rate float64) []job {
	var out []job
	for _, j := range jobs {
		if at, ok := overAt[j.t.name]; j.t.name == "direct" || !ok || rate < at {
			out = append(out, j)
		}
	}
	return out
}

// refineStep names a halfway step by its fraction of direct's saturation.
func refineStep(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", f), "0"), ".") + "×sat"
}

// againStep ends the step name of a sweep step's second measurement.
const againStep = ", again"

// underBar reports whether a proxy's leg of a sweep step stays under the
// bar: no error, and an added p99 under addedP99Limit.
func underBar(l *leg) bool {
	p99, ok := addedP99(l)
	return l.Errors == 0 && ok && p99 < addedP99Limit
}

// disturbed reports whether a proxy's leg of a sweep step was measured
// against a direct leg whose own p99 was longer than the proxy's by more
// than the bar: the baseline of the step was disturbed (a collection, a
// burst of another process on the shared cores), and the proxy's added
// p99, far below zero, says nothing of its own tail.
func disturbed(l *leg) bool {
	p99, ok := addedP99(l)
	return l.Errors == 0 && ok && p99 <= -addedP99Limit
}

// addedP99 is the added p99 a sweep step judges l by: JudgedP99 on the
// second measurement of a step measured twice, else l's own.
func addedP99(l *leg) (float64, bool) {
	switch {
	case l.JudgedP99 != nil:
		return *l.JudgedP99, true
	case l.Added != nil:
		return l.Added.P99, true
	}
	return 0, false
}

// judgedNote says what a step measured twice judged each proxy by.
func judgedNote(step string, again []*leg) string {
	var parts []string
	for _, l := range again {
		if l.JudgedP99 != nil {
			parts = append(parts, fmt.Sprintf("%s %s µs", l.Target, fmtNum(*l.JudgedP99)))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%s, measured twice: no proxy could be judged (no leg of direct, or of the proxy, without errors); each proxy's second leg decides", step)
	}
	return fmt.Sprintf("%s, measured twice, judged by added p99 (the lower of each proxy's two p99s less the lower of direct's two): %s",
		step, strings.Join(parts, ", "))
}

// judge sets, on each proxy's leg of again (a step's second measurement),
// the added p99 the step judges it by: the lower of the proxy's two p99s
// less the lower of direct's two. A disturbance on the shared cores (a
// collection, a burst of another process) only ever lengthens a tail: a
// disturbed direct leg makes every proxy measured against it look faster,
// a disturbed proxy leg makes that proxy look slower, and the lower of two
// measurements is the less disturbed of each. Each of the two legs keeps
// its own added figures in the table.
//
// A leg with errors is left out of its minimum: its p99 is that of the
// requests that succeeded, which errors shorten rather than lengthen. A
// proxy whose both legs had errors is judged by its second leg, errors
// and all (over the bar).
func judge(first, again []*leg) {
	f, a := byTarget(first), byTarget(again)
	direct, ok := lowerP99(f["direct"], a["direct"])
	if !ok {
		return
	}
	for name, l := range a {
		if name == "direct" {
			continue
		}
		if p99, ok := lowerP99(f[name], l); ok {
			v := round(p99-direct, 1)
			l.JudgedP99 = &v
		}
	}
}

// lowerP99 is the lower p99 of the legs without errors among first and
// again (either may be nil); false when neither has one.
func lowerP99(first, again *leg) (float64, bool) {
	p99, ok := 0.0, false
	for _, l := range [...]*leg{first, again} {
		if l != nil && l.Latency != nil && l.Errors == 0 && (!ok || l.Latency.P99 < p99) {
			p99, ok = l.Latency.P99, true
		}
	}
	return p99, ok
}

// firstOverBar returns the proxies to measure again at this step (with
// direct): none, unless a proxy's leg is over the bar while no earlier step
// was, or was measured against a disturbed direct leg, so that one
// disturbed step does not end a sweep, or count for it, on its own. Then
// every proxy not past the bar yet is measured again, not only that one,
// and judge decides the step for all of them from both measurements: a
// proxy is never judged against a baseline found disturbed for another.
// (In a full run, direct's p99 at a step was 44.3 ms, then 25.6 ms when
// measured again for the floor; the gateway, judged against the first
// alone, added -0.7 ms there, about 18 ms against the second, and the two
// proxies' saturation rates read equal.)
func firstOverBar(legs []*leg, over map[string]bool) map[string]bool {
	again := false
	for _, l := range legs {
		if l.Target != "direct" && !over[l.Target] && (!underBar(l) || disturbed(l)) {
			again = true
		}
	}
	retry := map[string]bool{}
	for _, l := range legs {
		if again && l.Target != "direct" && !over[l.Target] {
			retry[l.Target] = true
		}
	}
	return retry
}

// retryJobs are the step's jobs of direct (the added latency's baseline)
// and of the proxies in retry.
func retryJobs(jobs []job, retry map[string]bool) []job {
	var out []job
	for _, j := range jobs {
		if j.t.name == "direct" || retry[j.t.name] {
			out = append(out, j)
		}
	}
	return out
}

// confirmed returns the step's legs with each proxy in retry taken from
// again (its second measurement), the first one marked superseded.
func confirmed(legs, again []*leg, retry map[string]bool) []*leg {
	m := byTarget(again)
	out := make([]*leg, 0, len(legs))
	for _, l := range legs {
		if a := m[l.Target]; a != nil && retry[l.Target] {
			l.Superseded = true
			out = append(out, a)
			continue
		}
		out = append(out, l)
	}
	return out
}

// countRemeasured counts the steps measured twice.
func countRemeasured(legs []*leg) int {
	steps := map[string]bool{}
	for _, l := range legs {
		if l.Superseded {
			steps[l.Step] = true
		}
	}
	return len(steps)
}
