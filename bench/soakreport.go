package main

import (
	"fmt"
	"strings"
	"time"
)

// driftCheck is one metric's drift over the post-warm-up part of a soak:
//
//	drift % = 100 × (mean of the last window − mean of the first window) / max(mean of the first window, floor)
//
// The first window starts when warm-up ends; the last window ends with the
// run; both are WindowSeconds long. The floor keeps small absolute changes
// small (with a goroutine floor of 200, 30 → 40 goroutines is 5%, not 33%).
// Only growth counts: a metric that shrinks does not fail.
type driftCheck struct {
	Metric     string  `json:"metric"`
	Unit       string  `json:"unit"`
	First      float64 `json:"first_window_mean"`
	Last       float64 `json:"last_window_mean"`
	Floor      float64 `json:"floor"`
	DriftPct   float64 `json:"drift_percent"`
	FirstN     int     `json:"first_window_samples"`
	LastN      int     `json:"last_window_samples"`
	Passed     bool    `json:"passed"`
	LimitPct   float64 `json:"limit_percent"`
	MinOverall float64 `json:"min_after_warmup"`
	MaxOverall float64 `json:"max_after_warmup"`
}

// judgeDrift computes the drift of RSS, goroutines, descriptors and the
// live heap. Descriptors exclude the gateway's pooled upstream connections:
// its pool keeps as many as a burst needed until they sit idle for 90 s,
// which is capacity, not a leak (they are listed in every sample).
func judgeDrift(samples []soakSample, set soakSettings) []driftCheck {
	var post []soakSample
	for _, s := range samples {
		if !s.Warmup {
			post = append(post, s)
		}
	}
	metrics := []struct {
		name, unit string
		floor      float64
		get        func(soakSample) float64
	}{
		{"RSS", "MB", set.RSSFloorMB, func(s soakSample) float64 { return s.RSSMB }},
		{"goroutines", "", set.GoroutineFloor, func(s soakSample) float64 { return float64(s.Goroutines) }},
		{"open fds (without pooled upstream)", "", set.FDFloor, func(s soakSample) float64 { return float64(s.FDs - s.UpstreamFDs) }},
		{"live heap", "MB", set.RSSFloorMB / 2, func(s soakSample) float64 { return s.LiveHeapMB }},
	}
	var out []driftCheck
	if len(post) == 0 {
		return nil
	}
	t0, t1 := post[0].At, post[len(post)-1].At
	for _, m := range metrics {
		c := driftCheck{Metric: m.name, Unit: m.unit, Floor: m.floor, LimitPct: set.MaxDriftPct,
			MinOverall: m.get(post[0]), MaxOverall: m.get(post[0])}
		var fs, ls float64
		for _, s := range post {
			v := m.get(s)
			c.MinOverall, c.MaxOverall = min(c.MinOverall, v), max(c.MaxOverall, v)
			if s.At < t0+set.WindowSeconds {
				fs += v
				c.FirstN++
			}
			if s.At > t1-set.WindowSeconds {
				ls += v
				c.LastN++
			}
		}
		c.First, c.Last = round(fs/float64(c.FirstN), 2), round(ls/float64(c.LastN), 2)
		c.DriftPct = round(100*(c.Last-c.First)/max(c.First, m.floor), 2)
		c.Passed = c.DriftPct <= set.MaxDriftPct
		out = append(out, c)
	}
	return out
}

// idleCheck compares the gateway with no traffic before and after the soak:
// goroutines and descriptors must come back (within the drift limit and
// floor) once the clients' connections are closed and the gateway's idle
// upstream connections have expired.
type idleCheck struct {
	GoroutinesBefore int `json:"goroutines_before"`
	GoroutinesAfter  int `json:"goroutines_after"`
	FDsBefore        int `json:"fds_before"`
	FDsAfter         int `json:"fds_after"`
	// UpstreamFDs* are the fds among FDs* that are pooled upstream
	// connections: idle ones close after the pool's 90 s idle timeout, so
	// they are reported but not judged here (the drift check covers them).
	UpstreamFDsBefore int     `json:"upstream_fds_before"`
	UpstreamFDsAfter  int     `json:"upstream_fds_after"`
	RSSMBBefore       float64 `json:"rss_mb_before"`
	RSSMBAfter        float64 `json:"rss_mb_after"`
	SettledSeconds    float64 `json:"settled_after_seconds"`
	// Dump is the gateway log holding its goroutine dump (SIGQUIT), taken
	// when it did not settle.
	Dump   string `json:"goroutine_dump,omitempty"`
	Passed bool   `json:"passed"`
}

// idleSettle is how long the idle check waits for the gateway to settle
// (server-side connections close when the client closes them; this is
// slack for a loaded machine).
const idleSettle = 30 * time.Second

// settle closes the load generator's connections and waits until the
// gateway's goroutines and descriptors are back within the drift allowance
// of before, or idleSettle passes.
func settle(gw *child, upPort int, t *target, before soakSample, set soakSettings) *idleCheck {
	t.hc.CloseIdleConnections()
	t.shc.CloseIdleConnections()
	ic := &idleCheck{GoroutinesBefore: before.Goroutines, FDsBefore: before.FDs, RSSMBBefore: before.RSSMB}
	allowG := set.MaxDriftPct / 100 * max(float64(before.Goroutines), set.GoroutineFloor)
	allowF := set.MaxDriftPct / 100 * max(float64(before.FDs), set.FDFloor)
	t0 := time.Now()
	for {
		s, err := sampleGateway(gw, upPort, 0)
		if err != nil {
			return ic
		}
		ic.GoroutinesAfter, ic.FDsAfter, ic.RSSMBAfter = s.Goroutines, s.FDs, s.RSSMB
		ic.UpstreamFDsBefore, ic.UpstreamFDsAfter = before.UpstreamFDs, s.UpstreamFDs
		ic.SettledSeconds = round(time.Since(t0).Seconds(), 1)
		own := (s.FDs - s.UpstreamFDs) - (before.FDs - before.UpstreamFDs)
		ic.Passed = float64(s.Goroutines-before.Goroutines) <= allowG && float64(own) <= allowF
		if ic.Passed || time.Since(t0) > idleSettle {
			return ic
		}
		time.Sleep(time.Second)
	}
}

// soakFailures lists why the run fails: a sampling error, drift above the
// limit, an idle gateway that did not come back, or more unexpected
// request errors than the limit (a soak whose requests fail measures nothing).
func soakFailures(res *soakResults, sampleErr error) []string {
	var f []string
	if sampleErr != nil {
		f = append(f, sampleErr.Error())
	}
	post := 0
	for _, s := range res.Samples {
		if !s.Warmup {
			post++
		}
	}
	if post < 2 {
		f = append(f, fmt.Sprintf("only %d samples after warm-up: run longer", post))
	}
	for _, d := range res.Drift {
		if !d.Passed {
			f = append(f, fmt.Sprintf("%s drifted %+.2f%% (first window mean %g, last %g, floor %g; limit %g%%)",
				d.Metric, d.DriftPct, d.First, d.Last, d.Floor, d.LimitPct))
		}
	}
	if res.Idle != nil && !res.Idle.Passed {
		ic := res.Idle
		f = append(f, fmt.Sprintf("idle gateway did not settle in %gs: goroutines %d → %d, fds other than pooled upstream connections %d → %d",
			ic.SettledSeconds, ic.GoroutinesBefore, ic.GoroutinesAfter, ic.FDsBefore-ic.UpstreamFDsBefore, ic.FDsAfter-ic.UpstreamFDsAfter)+
			"; goroutine dump in "+ic.Dump)
	}
	var errs int64
	for _, k := range res.Kinds {
		errs += k.Errors
		if k.Errors > 0 {
			f = appendIf(f, 100*float64(k.Errors) > res.Settings.MaxErrorPct*float64(k.OK+k.Errors),
				fmt.Sprintf("%s: %d of %d requests failed, e.g. %s", k.Name, k.Errors, k.OK+k.Errors, k.ErrorSample))
		}
	}
	if res.Dropped > 0 {
		f = append(f, fmt.Sprintf("%d requests dropped: %d were already in flight", res.Dropped, res.Settings.MaxInFlight))
	}
	return f
}

func appendIf(f []string, cond bool, s string) []string {
	if cond {
		return append(f, s)
	}
	return f
}

// writeSoakResults writes results.json and results.md into dir.
func writeSoakResults(res *soakResults, dir string) error {
	return writeJSONAndMarkdown(dir, res, soakMarkdown(res))
}

func soakMarkdown(res *soakResults) string {
	var b strings.Builder
	st := res.Settings
	verdict := "**passed**"
	if !res.Passed {
		verdict = "**FAILED**"
	}
	fmt.Fprintf(&b, "# Soak (%s)\n\nGenerated by `%s` on %s in %.0f s: %s.\n\n", st.Duration, res.Command, res.Started, res.WallSeconds, verdict)
	m := res.Machine
	fmt.Fprintf(&b, "**Machine:** %s, %d cores, %s, %s. Load average %s before, %s after.\n\n",
		orDash(m.CPU), m.Cores, m.Kernel, m.Go, orDash(m.LoadBefore), orDash(m.LoadAfter))
	fmt.Fprintf(&b, "**Load:** %g requests/s for %s (%d requests, %d dropped), the mix below in a fixed weighted rotation; "+
		"mock first byte %g ms, %g ms between stream events. Warm-up %g s; a sample every %g s; windows of %g s.\n\n",
		st.RateRPS, st.Duration, res.Requests, res.Dropped, st.FirstByteMS, st.ChunkDelayMS, st.WarmupSeconds, st.SampleSeconds, st.WindowSeconds)
	b.WriteString("**Drift** = 100 × (mean of the last window − mean of the first window after warm-up) / max(first window mean, floor); " +
		"fails above " + fmt.Sprint(st.MaxDriftPct) + "%. Only growth counts.\n\n")
	b.WriteString("| metric | first window | last window | floor | drift | min..max after warm-up | |\n|---|---|---|---|---|---|---|\n")
	for _, d := range res.Drift {
		fmt.Fprintf(&b, "| %s | %g %s | %g %s | %g | %+.2f%% | %g..%g | %s |\n", d.Metric, d.First, d.Unit, d.Last, d.Unit, d.Floor,
			d.DriftPct, d.MinOverall, d.MaxOverall, map[bool]string{true: "ok", false: "**drift**"}[d.Passed])
	}
	if ic := res.Idle; ic != nil {
		fmt.Fprintf(&b, "\n**Idle before → after** (client connections closed, %g s to settle): goroutines %d → %d, fds %d → %d "+
			"(of which pooled upstream connections %d → %d, not judged: they close after 90 s idle), RSS %g → %g MB: %s.\n",
			ic.SettledSeconds, ic.GoroutinesBefore, ic.GoroutinesAfter, ic.FDsBefore, ic.FDsAfter, ic.UpstreamFDsBefore, ic.UpstreamFDsAfter,
			ic.RSSMBBefore, ic.RSSMBAfter,
			map[bool]string{true: "ok", false: "**did not settle**"}[ic.Passed])
	}
	b.WriteString("\n## Traffic\n\n| kind | weight | expected outcome | ok | errors | error sample |\n|---|---|---|---|---|---|\n")
	for _, k := range res.Kinds {
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %s |\n", k.Name, k.Weight, k.Expect, k.OK, k.Errors, orDash(strings.ReplaceAll(k.ErrorSample, "|", "\\|")))
	}
	if len(res.Failures) > 0 {
		b.WriteString("\n## Failures\n\n")
		for _, f := range res.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	b.WriteString("\n## Samples\n\n*heap* is go_memstats_heap_inuse_bytes (it follows the GC's sawtooth); *live heap* is go_gc_heap_live_bytes, the heap that survived the last GC; " +
		"*upstream* are the fds that are pooled connections to the mock.\n\n")
	b.WriteString("| t (s) | RSS MB | heap MB | live heap MB | goroutines | fds | upstream | requests done | |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range res.Samples {
		fmt.Fprintf(&b, "| %g | %g | %g | %g | %d | %d | %d | %d | %s |\n", s.At, s.RSSMB, s.HeapMB, s.LiveHeapMB, s.Goroutines, s.FDs, s.UpstreamFDs, s.Requests,
			map[bool]string{true: "warm-up", false: ""}[s.Warmup])
	}
	return b.String()
}
