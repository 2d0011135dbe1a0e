package main

import "fmt"

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
	var firstOver []*leg // the legs of the step where the gateway first went over the bar
	wasBeyond := false
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
		legs := b.legs(jobs, ls)
		beyond := true
		for _, l := range legs {
			l.Step = fmt.Sprintf("%.2f×sat", f)
			if l.Target == "direct" {
				continue
			}
			// The saturation rate is the last step before the first one over
			// the bar: a later step that looks fine (because direct had a
			// noisy tail there) does not count.
			under := l.Errors == 0 && l.Added != nil && l.Added.P99 < addedP99Limit
			switch {
			case under && !over[l.Target]:
				best[l.Target] = max(best[l.Target], ls.rate)
			case !under:
				if l.Target == "gateway" && !over["gateway"] {
					firstOver = legs
				}
				over[l.Target] = true
			}
			if l.Added == nil || l.Added.P99 < 5*addedP99Limit {
				beyond = false
			}
			if f == 0.5 && l.Added != nil {
				r.fig(l.Target+" added p99 at half direct saturation", l.Added.P99, "µs")
			}
		}
		r.Legs = append(r.Legs, legs...)
		if beyond && wasBeyond {
			r.Notes = append(r.Notes, fmt.Sprintf("stopped after %.2f×: both proxies past %.0f ms added p99 at two steps in a row", f, 5*addedP99Limit/1000))
			break
		}
		wasBeyond = beyond
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
