package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/llmgw/gateway/config"
)

// targetCheck is one goal of the issue, as measured in this run.
type targetCheck struct {
	Name     string  `json:"name"`
	Goal     string  `json:"goal"`
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit"`
	Status   string  `json:"status"` // met | missed | not measured
	Detail   string  `json:"detail,omitempty"`
}

// ttftGoalUS is the time-to-first-content-token target: µs added at p50.
const ttftGoalUS = 200

// burstGoal is the burst target: the gateway's streams per second over
// the floor proxy's.
const burstGoal = 0.9

// cpuGoal is the CPU target: the gateway's CPU per pass-through request
// over the floor proxy's, at most.
const cpuGoal = 1.25

// saturationGoal is the saturation target: the gateway's rate over the
// floor proxy's.
const saturationGoal = 0.8

// goal is one target of the issue: a figure of one scenario and its bound.
type goal struct {
	name, text, unit, scenario string
	// figure names the scenario's figure that measures the goal, and a note
	// on how it was measured ("" = none).
	figure func(res *results) (name, detail string)
	met    func(v float64) bool
	// void, when set, says why a measured value cannot be judged ("" =
	// it can): the figure is then not measured.
	void func(res *results, v float64) string
}

// minJudgedStreams is the least number of held streams the 10,000-stream
// goal is judged from: a projection from fewer moves by tens of MB from run
// to run.
const minJudgedStreams = 5000

// goals are the targets of the performance issue (#17), in report order.
// Allocations per request, its one other target, are a `go test -bench`
// figure (BenchmarkPassthrough in gateway/), not a bench/ one.
var goals = []goal{
	{name: "CPU", text: fmt.Sprintf("gateway CPU per pass-through request ≤ %s× the floor proxy's", fmtNum(cpuGoal)), unit: "×", scenario: "passthrough",
		figure: fixedFigure("gateway/floor CPU per request"), met: func(v float64) bool { return v <= cpuGoal }},
	{name: "saturation", text: "saturation rate (added p99 < 10 ms) ≥ 0.8× the floor proxy's", unit: "×", scenario: "sweep",
		figure: fixedFigure("gateway/floor saturation rate"), met: func(v float64) bool { return v >= saturationGoal }},
	{name: "added p99", text: fmt.Sprintf("added p99 ≤ 1 ms at %d rps (open model)", fixedSweepRate), unit: "µs", scenario: "sweep",
		figure: fixedFigure(fmt.Sprintf("gateway added p99 at %d rps", fixedSweepRate)), met: func(v float64) bool { return v <= 1000 },
		void: func(_ *results, v float64) string {
			if v < 0 {
				return "the direct leg's own p99 at this rate was longer than the gateway's: the step was disturbed"
			}
			return ""
		}},
	{name: "burst streams", text: "streams/s with a burst upstream ≥ 0.9× the floor proxy", unit: "×", scenario: "burst",
		figure: fixedFigure("gateway/floor streams/s"), met: func(v float64) bool { return v >= burstGoal }},
	{name: "TTFT", text: "added time to first content token ≤ 0.2 ms at p50", unit: "µs", scenario: "stream",
		figure: fixedFigure("gateway added TTFT p50"), met: func(v float64) bool { return v <= ttftGoalUS }},
	{name: "memory per stream", text: "RSS per open stream ≤ 1.05× the floor proxy's, same buffer settings", unit: "×", scenario: "streams",
		figure: fixedFigure("gateway/floor memory per stream"), met: func(v float64) bool { return v <= 1.05 }},
	{name: "stream memory", text: "10,000 concurrent streams in ≤ 300 MB RSS", unit: "MB", scenario: "streams",
		figure: func(res *results) (string, string) {
			if n := res.Settings.Streams; n < 10000 {
				return "gateway RSS projected for 10,000 streams", fmt.Sprintf("projected from %d streams", n)
			}
			return "gateway RSS with all streams open", fmt.Sprintf("measured with %d streams", res.Settings.Streams)
		}, met: func(v float64) bool { return v <= 300 },
		void: func(res *results, _ float64) string {
			if n := res.Settings.Streams; n < minJudgedStreams {
				// Quick mode's 500: two runs of the same code were judged
				// 342 MB and 285 MB.
				return fmt.Sprintf("projected from %d streams, too few to judge 10,000 by: run -mode full or -streams %d or more", n, minJudgedStreams)
			}
			return ""
		}},
	// CPU, not latency: the gateway runs the exchange server-side and saves
	// the client's round trips, so its latency difference against a
	// client-driven exchange can even be negative.
	{name: "tool loop", text: "tool loop's own cost ≤ 60 µs CPU per round", unit: "µs CPU", scenario: "toolloop",
		figure: fixedFigure("tool loop own CPU per round"), met: func(v float64) bool { return v <= 60 }},
}

func fixedFigure(name string) func(*results) (string, string) {
	return func(*results) (string, string) { return name, "" }
}

// checkTargets compares the run's figures with the targets.
func checkTargets(res *results) []targetCheck {
	out := make([]targetCheck, 0, len(goals))
	for _, g := range goals {
		c := targetCheck{Name: g.name, Goal: g.text, Unit: g.unit, Status: "not measured"}
		s := res.scenario(g.scenario)
		if s == nil {
			c.Detail = g.scenario + " did not run"
			for _, sc := range res.Scenarios {
				if sc.Name == g.scenario {
					c.Detail = sc.Status + ": " + sc.Reason
				}
			}
			out = append(out, c)
			continue
		}
		fig, detail := g.figure(res)
		v, have := s.figure(fig)
		c.Measured, c.Detail = v, detail
		if !have && c.Detail == "" {
			c.Detail = "no figure: " + fig + " (see the scenario's notes)"
		}
		switch {
		case have && g.void != nil && g.void(res, v) != "":
			c.Detail = g.void(res, v)
		case have:
			c.Status = map[bool]string{false: "missed", true: "met"}[g.met(v)]
		}
		out = append(out, c)
	}
	return out
}

func printTargets(res *results) {
	fmt.Println()
	for _, c := range res.Targets {
		word := map[string]string{"met": "MET", "missed": "MISSED", "not measured": "NOT MEASURED"}[c.Status]
		if c.Status == "not measured" {
			fmt.Printf("%-12s %s: %s; measured –", word, c.Name, c.Goal)
		} else {
			fmt.Printf("%-12s %s: %s; measured %g %s", word, c.Name, c.Goal, c.Measured, c.Unit)
		}
		if c.Detail != "" {
			fmt.Printf(" (%s)", c.Detail)
		}
		fmt.Println()
	}
	for _, s := range res.Scenarios {
		if s.Status != "ok" {
			fmt.Printf("%-12s %s: %s\n", strings.ToUpper(s.Status), s.Name, s.Reason)
		}
	}
	if p := res.Peer; p != nil && p.Status != "ok" {
		fmt.Printf("%-12s peer %s: %s\n", strings.ToUpper(p.Status), p.Name, p.Reason)
	}
}

// writeJSONAndMarkdown writes v as dir/results.json and md as
// dir/results.md, creating dir.
func writeJSONAndMarkdown(dir string, v any, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644)
}

// writeResults writes results.json, results.md and, when the run has a
// sweep to draw, chart.svg (and chart.png when rsvg-convert is installed)
// into dir. It returns the names of the files it wrote.
func writeResults(res *results, dir string) (string, error) {
	if err := writeJSONAndMarkdown(dir, res, markdown(res)); err != nil {
		return "", err
	}
	svg := chartSVG(res)
	if svg == "" {
		return "{results.json,results.md}", nil
	}
	svgPath := filepath.Join(dir, "chart.svg")
	if err := os.WriteFile(svgPath, []byte(svg), 0o644); err != nil {
		return "", err
	}
	if conv, err := exec.LookPath("rsvg-convert"); err == nil {
		if out, err := exec.Command(conv, "-o", filepath.Join(dir, "chart.png"), svgPath).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: rsvg-convert: %v: %s\n", err, out)
		}
	}
	return "{results.json,results.md,chart.svg}", nil
}

// markdown renders the whole run as tables.
func markdown(res *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results (%s mode)\n\n", res.Settings.Mode)
	fmt.Fprintf(&b, "Generated by `%s` on %s in %.0f s.\n\n", res.Command, res.Started, res.WallSeconds)
	writeMachine(&b, res)
	b.WriteString("## Targets\n\n| target | goal | measured | status |\n|---|---|---|---|\n")
	for _, c := range res.Targets {
		m := fmt.Sprintf("%g %s", c.Measured, c.Unit)
		if c.Status == "not measured" {
			m = "–"
		}
		if c.Detail != "" {
			m += " (" + c.Detail + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | **%s** |\n", c.Name, c.Goal, m, c.Status)
	}
	b.WriteString("\nAll latencies in µs. *+pNN* is the target's percentile minus direct's at the same load. ")
	b.WriteString("CPU is seconds per 1,000 requests of the measured process (the proxy; the mock itself for direct); ")
	b.WriteString("*mock CPU* is the upstream behind a proxy; *bench CPU* is the load generator (CPU figures have 10 ms resolution). ")
	b.WriteString("*other cores* is how many cores processes outside the benchmark kept busy during the leg: noise.\n")
	for _, s := range res.Scenarios {
		fmt.Fprintf(&b, "\n## %s — %s\n\n", s.Name, s.Title)
		if s.Status != "ok" {
			fmt.Fprintf(&b, "**%s**: %s\n", s.Status, s.Reason)
			continue
		}
		if s.Load != "" {
			fmt.Fprintf(&b, "Load: %s.\n\n", s.Load)
		}
		writeLegs(&b, s)
		if len(s.Figures) > 0 {
			b.WriteString("\n| figure | value |\n|---|---|\n")
			for _, f := range s.Figures {
				fmt.Fprintf(&b, "| %s | %g %s |\n", f.Name, f.Value, f.Unit)
			}
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "\n- %s", n)
		}
		if len(s.Notes) > 0 {
			b.WriteString("\n")
		}
	}
	if res.scenario("sweep") != nil {
		b.WriteString("\n![latency versus load](chart.svg)\n")
	}
	return b.String()
}

func writeMachine(b *strings.Builder, res *results) {
	m := res.Machine
	fmt.Fprintf(b, "**Machine:** %s, %d cores, %d GiB, %s, %s (GOMAXPROCS %d). %s. "+
		"Load average %s before the run, %s after; processes outside the benchmark kept %.2f cores busy on average while it measured, "+
		"and the hypervisor stole %.2f cores (time no process of this machine could run).\n\n",
		orDash(m.CPU), m.Cores, m.MemoryGiB, m.Kernel, m.Go, m.GOMAXPROCS, m.Note, orDash(m.LoadBefore), orDash(m.LoadAfter), m.OtherCores, m.StealCores)
	st := res.Settings
	fmt.Fprintf(b, "**Settings:** mock first byte %g ms, %g ms between stream events, %d-byte replies in %d-rune deltas; "+
		"%g s per measured leg after %g s warm-up, %d interleaved round(s) of %s; "+
		"closed model at %d clients; %d concurrent slow streams%s.\n\n",
		st.FirstByteMS, st.ChunkDelayMS, st.ReplyBytes, st.TextRunes, st.LegSeconds, st.WarmSeconds, st.Rounds, legOrder(res),
		st.Concurrency, st.Streams, floorBuffers(st))
	if len(res.Config) > 0 {
		fmt.Fprintf(b, "**Gateway config:** the shipped middleware (request layer %s; model layer %s, outermost first; "+
			"memory response cache; builtin calculator and current_time tools; access log at info, JSON, to a file), except:\n",
			strings.Join(config.DefaultRequestMiddleware, " → "), strings.Join(config.DefaultModelMiddleware, " → "))
		for _, d := range res.Config {
			fmt.Fprintf(b, "- %s\n", d)
		}
		b.WriteString("\n")
	}
	for _, l := range res.Limitations {
		fmt.Fprintf(b, "**Limitation:** %s.\n\n", l)
	}
	writePeer(b, res.Peer)
}

// writePeer describes the peer leg, if the run had one.
func writePeer(b *strings.Builder, p *peerInfo) {
	if p == nil {
		return
	}
	what := "an OpenAI-compatible endpoint given with -target"
	if p.Kind == "portkey" {
		what = fmt.Sprintf("the Portkey OSS gateway (npm @portkey-ai/gateway %s, started by bench, OpenAI provider with its custom host set to the mock)", p.Version)
	}
	fmt.Fprintf(b, "**Peer:** *%s*, %s, at %s", p.Name, what, p.URL)
	if p.Model != "" {
		fmt.Fprintf(b, ", asked for model %q", p.Model)
	}
	if len(p.Headers) > 0 {
		fmt.Fprintf(b, ", with headers %s", strings.Join(p.Headers, ", "))
	}
	if p.Status != "ok" {
		fmt.Fprintf(b, ". **%s**: %s.\n\n", p.Status, p.Reason)
		return
	}
	b.WriteString(". It runs in the scenarios a plain endpoint can (passthrough, stream, burst, sweep); the others say why not.")
	if !p.CPUMeasured {
		b.WriteString(" Bench did not start it, so its CPU and memory are not measured (–); they count as other cores.")
	}
	for _, n := range p.Notes {
		b.WriteString(" " + n)
	}
	b.WriteString("\n\n")
}

func writeLegs(b *strings.Builder, s *scenarioResult) {
	stream := s.Name == "stream"
	mem := s.Name == "streams"
	switch {
	case mem:
		b.WriteString("| target | streams open | RSS idle MB | RSS open MB | peak RSS MB | KiB/stream | goroutines idle → open | CPU s/1k |\n|---|---|---|---|---|---|---|---|\n")
		for _, l := range s.Legs {
			g := "–"
			if l.Goroutines > 0 {
				g = fmt.Sprintf("%d → %d", l.IdleGoroutines, l.Goroutines)
			}
			fmt.Fprintf(b, "| %s | %d of %d | %.1f | %.1f | %.1f | %.1f | %s | %.3f |\n", l.Target, l.ok(), l.Requests,
				l.IdleRSSMB, l.RSSMB, l.PeakRSSMB, perStreamKB(l), g, l.ProxyCPUPer1k)
		}
		return
	}
	b.WriteString("| target | step | load | rps | errors | p50 | p90 | p99 | p99.9 | max | +p50 | +p99 | +p99.9 | CPU s/1k | mock CPU | bench CPU | RSS MB | peak MB | goroutines | other cores | steal cores |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range s.Legs {
		p := l.Latency
		if p == nil {
			p = &pcts{}
		}
		a := l.Added
		added := "| – | – | –"
		if a != nil {
			added = fmt.Sprintf("| %.0f | %.0f | %.0f", a.P50, a.P99, a.P999)
		}
		gor := "–"
		if l.Goroutines > 0 {
			gor = fmt.Sprint(l.Goroutines)
		}
		cpu, rss := fmt.Sprintf("%.3f | %.3f", l.ProxyCPUPer1k, l.UpstreamCPUPer1k), fmt.Sprintf("%.1f | %.1f", l.RSSMB, l.PeakRSSMB)
		if l.CPUNotMeasured {
			cpu, rss = "– | –", "– | –"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f | %d | %.0f | %.0f | %.0f | %.0f | %.0f %s | %s | %.3f | %s | %s | %.2f | %.2f |\n",
			l.Target, orDash(l.Step), l.Load, l.ThroughputRPS, l.Errors, p.P50, p.P90, p.P99, p.P999, p.Max, added,
			cpu, l.LoadgenCPUPer1k, rss, gor, l.OtherCores, l.StealCores)
	}
	if stream {
		b.WriteString("\n*TTFT* is the time to first content token: to the first event whose delta carries non-empty content or a tool call. " +
			"*path* is TTFT less the time the mock held the request until it wrote that event: the way to and from the upstream alone. " +
			"*TTFB* is the time to the first body byte.\n")
		b.WriteString("\n| target | TTFT p50 | TTFT p99 | +TTFT p50 | +TTFT p99 | path p50 | +path p50 | +path p99 | TTFB p50 | TTFB p99 | +TTFB p50 | +TTFB p99 | inter-chunk p50 | inter-chunk p99 | +inter-chunk p50 | +inter-chunk p99 | +inter-chunk max |\n" +
			"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range s.Legs {
			t, g := l.TTFB, l.InterChunk
			if t == nil || g == nil {
				continue
			}
			tt, att, path, at, ag := "– | –", "– | –", "– | – | –", "– | –", "– | – | –"
			if l.TTFT != nil {
				tt = fmt.Sprintf("%.0f | %.0f", l.TTFT.P50, l.TTFT.P99)
			}
			if l.AddedTTFT != nil {
				att = fmt.Sprintf("%.0f | %.0f", l.AddedTTFT.P50, l.AddedTTFT.P99)
			}
			if p := l.TTFTPath; p != nil {
				path = fmt.Sprintf("%.0f | – | –", p.P50)
				if a := l.AddedTTFTPath; a != nil {
					path = fmt.Sprintf("%.0f | %.0f | %.0f", p.P50, a.P50, a.P99)
				}
			}
			if l.AddedTTFB != nil && l.AddedInterChunk != nil {
				at = fmt.Sprintf("%.0f | %.0f", l.AddedTTFB.P50, l.AddedTTFB.P99)
				ag = fmt.Sprintf("%.0f | %.0f | %.0f", l.AddedInterChunk.P50, l.AddedInterChunk.P99, l.AddedInterChunk.Max)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %.0f | %.0f | %s | %.0f | %.0f | %s |\n", l.Target, tt, att, path, t.P50, t.P99, at, g.P50, g.P99, ag)
		}
	}
}

// legOrder is the order the targets are measured in, within a round.
func legOrder(res *results) string {
	if p := res.Peer; p != nil && p.Status == "ok" {
		return "direct → floor → gateway → " + p.Name
	}
	return "direct → floor → gateway"
}

// floorBuffers describes the floor proxy's connection buffers ("" for a
// run from before they were recorded).
func floorBuffers(st settings) string {
	if st.ReadBuffer == 0 {
		return ""
	}
	return fmt.Sprintf("; floor proxy buffers per connection: server read %d B, write %d B, upstream read %d B",
		st.ReadBuffer, st.WriteBuffer, st.UpstreamReadBuffer)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
