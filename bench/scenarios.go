package main

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Request bodies. The same bytes go to every target, so the mock does the
// same work behind each.
var (
	chatBody = []byte(`{"model":"chat","temperature":0.7,"messages":[` +
		`{"role":"system","content":"You are a concise assistant."},` +
		`{"role":"user","content":"Summarise the plot of Hamlet in two sentences."}]}`)
	streamBody = []byte(`{"model":"chat","temperature":0.7,"stream":true,"stream_options":{"include_usage":true},"messages":[` +
		`{"role":"system","content":"You are a concise assistant."},` +
		`{"role":"user","content":"Summarise the plot of Hamlet in two sentences."}]}`)
	cacheBody = []byte(`{"model":"chat","temperature":0,"messages":[` +
		`{"role":"user","content":"What is the capital of Norway?"}]}`)
	failBody = []byte(`{"model":"fail-500","temperature":0.7,"messages":[` +
		`{"role":"user","content":"Summarise the plot of Hamlet in two sentences."}]}`)
	toolBody = []byte(`{"model":"tools-2","temperature":0.7,"messages":[{"role":"user","content":"compute twice"}]}`)
	slowBody = []byte(`{"model":"slow","stream":true,"messages":[{"role":"user","content":"tell me a long story"}]}`)
)

const toolRounds = 2

// legs measures jobs interleaved under ls.
func (b *bench) legs(jobs []job, ls loadSpec) []*leg {
	if b.measureLegs != nil {
		return b.measureLegs(jobs, ls)
	}
	return interleave(jobs, ls, b.set.Rounds, b.set.MaxInFlight)
}

// finish marks r failed when a leg produced no successful request.
func finish(r *scenarioResult) *scenarioResult {
	if r.Status == "" {
		r.Status = "ok"
	}
	for _, l := range r.Legs {
		if l.ok() == 0 {
			r.Status = "failed"
			r.Reason = fmt.Sprintf("%s: no successful request (%s)", l.Target, l.ErrorSample)
			return r
		}
		if l.Errors > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s %s: %d of %d requests failed, e.g. %s", l.Target, l.Load, l.Errors, l.Requests, l.ErrorSample))
		}
	}
	return r
}

// measure runs jobs into r.Legs and returns the legs by target, or nil when
// the scenario failed (r says why).
func (b *bench) measure(r *scenarioResult, jobs []job, ls loadSpec) map[string]*leg {
	r.Legs = b.legs(jobs, ls)
	if finish(r).Status != "ok" {
		return nil
	}
	return byTarget(r.Legs)
}

// plainJobs are one JSON workload against the three targets: direct, the
// floor proxy and the gateway, whose answers header and check judge.
func (b *bench) plainJobs(body []byte, header string, check func(hv string, body []byte) error) []job {
	return []job{
		{b.direct, b.direct.plain(body, "", nil)},
		{b.floor, b.floor.plain(body, "", nil)},
		{b.gateway, b.gateway.plain(body, header, check)},
	}
}

func byTarget(legs []*leg) map[string]*leg {
	m := map[string]*leg{}
	for _, l := range legs {
		m[l.Target] = l
	}
	return m
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN() // fig records no figure for it
	}
	return round(a/b, 3)
}

// passthrough is non-streaming pass-through at a fixed concurrency (closed
// model): the throughput each target sustains, and so the direct saturation
// rate the sweep is scaled by.
func (b *bench) passthrough() *scenarioResult {
	ls := b.spec(0, b.set.Concurrency, b.set.LegSeconds)
	r := &scenarioResult{Name: "passthrough", Title: "Non-streaming pass-through, closed model", Load: ls.String()}
	jobs := b.withPeer(b.plainJobs(chatBody, "x-gateway-cache", noCacheHit), func(t *target) workload { return t.plain(chatBody, "", nil) })
	m := b.measure(r, jobs, ls)
	if m == nil {
		return r
	}
	b.directSaturation = m["direct"].ThroughputRPS
	r.fig("gateway/floor throughput", ratio(m["gateway"].ThroughputRPS, m["floor"].ThroughputRPS), "×")
	r.fig("gateway/direct throughput", ratio(m["gateway"].ThroughputRPS, m["direct"].ThroughputRPS), "×")
	r.fig("floor/direct throughput", ratio(m["floor"].ThroughputRPS, m["direct"].ThroughputRPS), "×")
	r.fig("gateway/floor CPU per request", ratio(m["gateway"].ProxyCPUPer1k, m["floor"].ProxyCPUPer1k), "×")
	r.fig("direct saturation", b.directSaturation, "rps")
	gcFigures(r, m["gateway"], m["floor"], "")
	b.peerRatios(r, m)
	return r
}

// gcFigures adds what the gateway's and the floor's garbage collections
// were in their legs g and f: collections per second, their mean mark
// phase and the heap allocated per request. at ("" or " at STEP") names
// the legs in the figures' names.
func gcFigures(r *scenarioResult, g, f *leg, at string) {
	for _, l := range []*leg{g, f} {
		if l == nil || l.Seconds <= 0 {
			continue
		}
		r.fig(l.Target+" collections per second"+at, round(float64(l.GCCycles)/l.Seconds, 2), "/s")
		if l.GCCycles > 0 && l.GCMarkMS > 0 { // a collection whose line was read
			r.fig(l.Target+" mean GC mark phase"+at, l.GCMarkMS, "ms")
			r.fig(l.Target+" mean live heap at a collection"+at, l.GCLiveMB, "MB")
			r.fig(l.Target+" heap allocated per request"+at, l.AllocKBPerReq, "KiB")
		}
	}
}

// noCacheHit keeps pass-through honest: a cached answer would skip the
// upstream.
func noCacheHit(hv string, _ []byte) error {
	if strings.EqualFold(hv, "hit") {
		return fmt.Errorf("pass-through request answered from the response cache")
	}
	return nil
}

// streaming is streaming pass-through at a constant arrival rate: time to
// first byte, time to first content token and the gap between chunks, as
// added by each proxy.
func (b *bench) streaming() *scenarioResult {
	ls := b.spec(b.set.StreamRate, 0, b.set.LegSeconds)
	r := &scenarioResult{Name: "stream", Title: "Streaming pass-through, open model", Load: ls.String()}
	stream := func(t *target) workload { return t.stream(streamBody) }
	m := b.measure(r, b.withPeer([]job{
		{b.direct, stream(b.direct)},
		{b.floor, stream(b.floor)},
		{b.gateway, stream(b.gateway)},
	}, stream), ls)
	if m == nil {
		return r
	}
	if m["direct"].TTFTPath != nil {
		r.Notes = append(r.Notes, "added TTFT is measured on the path alone: each stream's TTFT less the time the mock held the request "+
			"until it wrote that event (its x_mock_held_ns stamp), minus direct's; the same figure with the mock's delays included is beside it")
	}
	proxies := []string{"gateway", "floor"}
	if b.peer != nil {
		proxies = append(proxies, b.peer.name)
	}
	for _, t := range proxies {
		// The added TTFT is taken on the path alone (less the time the mock
		// held each request) when every stream carried the mock's stamp: the
		// mock's timers overshoot more while a proxy keeps the cores busier,
		// which is not time the proxy adds on the request's way.
		if a, raw := m[t].AddedTTFTPath, m[t].AddedTTFT; a != nil {
			r.fig(t+" added TTFT p50", a.P50, "µs")
			r.fig(t+" added TTFT p99", a.P99, "µs")
			if raw != nil {
				r.fig(t+" added TTFT p50, mock's delays included", raw.P50, "µs")
			}
			if up, down := m[t].AddedToUp, m[t].AddedFromUp; up != nil && down != nil {
				r.fig(t+" added TTFT p50, way to the upstream", up.P50, "µs")
				r.fig(t+" added TTFT p50, way back from it", down.P50, "µs")
			}
		} else if raw != nil {
			r.fig(t+" added TTFT p50", raw.P50, "µs")
			r.fig(t+" added TTFT p99", raw.P99, "µs")
			if m["direct"].TTFTPath != nil {
				r.Notes = append(r.Notes, t+"'s streams carried no x_mock_held_ns stamp: its added TTFT is taken with the upstream's own time included, "+
					"not on the path alone as the others'; if its answers do not come from the bench mock (its upstream set in its own config "+
					"elsewhere, or the stamp dropped on the way), the comparison measures another upstream")
			}
		}
		if a := m[t].AddedTTFB; a != nil {
			r.fig(t+" added TTFB p50", a.P50, "µs")
			r.fig(t+" added TTFB p99", a.P99, "µs")
		}
		if a := m[t].AddedInterChunk; a != nil {
			r.fig(t+" added inter-chunk p50", a.P50, "µs")
			r.fig(t+" added inter-chunk p99", a.P99, "µs")
		}
	}
	return r
}

// toolLoop runs a request whose model calls a server tool in two rounds
// before answering. Direct and floor run the same exchange the way a client
// without a gateway must (three calls, answering the tool itself); the
// gateway runs it server-side in one client request. A pass-through pair at
// the same rate isolates the loop's own cost per round.
func (b *bench) toolLoop() *scenarioResult {
	ls := b.spec(b.set.ToolRate, 0, b.set.LegSeconds)
	r := &scenarioResult{Name: "toolloop", Title: "Tool loop, two server-tool rounds, open model", Load: ls.String()}
	if reason := probeToolLoop(b.gateway); reason != "" {
		r.Status, r.Reason = "skipped", reason
		return r
	}
	// One interleaved set: the tool exchange on all three, and the
	// pass-through reference on direct and gateway.
	legs := b.legs([]job{
		{b.direct, b.direct.toolClient("tools-2", toolRounds)},
		{b.floor, b.floor.toolClient("tools-2", toolRounds)},
		{b.gateway, b.gateway.plain(toolBody, "", toolLoopAnswer)},
		{b.direct, b.direct.plain(chatBody, "", nil)},
		{b.gateway, b.gateway.plain(chatBody, "", nil)},
	}, ls)
	ref := legs[3:]
	for _, l := range ref {
		l.Step = "reference: one pass-through call"
	}
	ref[0].Added, ref[0].AddedTTFB, ref[0].AddedInterChunk = nil, nil, nil
	ref[1].Added = ref[1].Latency.minus(ref[0].Latency)
	r.Legs = legs
	m := byTarget(legs[:3])
	if finish(r).Status != "ok" {
		return r
	}
	g, rg := m["gateway"], ref[1]
	if g.Added != nil && rg.Added != nil {
		r.fig("tool loop own latency per round (p50)", round((g.Added.P50-rg.Added.P50)/toolRounds, 1), "µs")
		r.fig("tool loop own latency per round (mean)", round((g.Added.Mean-rg.Added.Mean)/toolRounds, 1), "µs")
	}
	r.fig("tool loop own CPU per round", round((g.ProxyCPUPer1k-rg.ProxyCPUPer1k)/toolRounds*1000, 1), "µs")
	if f := m["floor"]; f != nil && !f.CPUNotMeasured {
		// What a round costs in the floor: the client drives the loop, and
		// the floor relays each of its toolRounds+1 model calls.
		perCall := f.ProxyCPUPer1k / (toolRounds + 1) * 1000
		r.fig("floor CPU per relayed model call", round(perCall, 1), "µs")
		if perCall > 0 {
			r.fig("tool loop own CPU per round / floor CPU per relayed call", round((g.ProxyCPUPer1k-rg.ProxyCPUPer1k)/toolRounds*1000/perCall, 2), "×")
		}
	}
	r.fig("gateway added latency, whole exchange (p50)", g.Added.P50, "µs")
	r.Notes = append(r.Notes, "own cost per round = (gateway minus direct for the tool exchange - gateway minus direct for one pass-through call) / 2; "+
		"it covers one extra model call through the model-call middleware, the tool run and the history rebuild")
	return r
}

// toolLoopAnswer checks a chat answer of the two-round tool loop.
func toolLoopAnswer(_ string, body []byte) error {
	if c := gjson.GetBytes(body, "choices.0.message.content").String(); !strings.HasPrefix(c, "done after 2 tool rounds") {
		return fmt.Errorf("unexpected answer %.120q", c)
	}
	return nil
}

// probeToolLoop returns why the gateway cannot run the scenario ("" when it
// runs server tools).
func probeToolLoop(t *target) string {
	status, _, body, err := t.post(toolBody, "")
	if err != nil {
		return "gateway unreachable: " + err.Error()
	}
	if status != 200 {
		return fmt.Sprintf("gateway answered %d to a server-tool request: %.200s", status, body)
	}
	msg := gjson.GetBytes(body, "choices.0.message")
	switch c := msg.Get("content").String(); {
	case strings.HasPrefix(c, "done after 2 tool rounds"):
		return ""
	case c == "no calculator tool was offered":
		return "the gateway answered without running server tools (it did not offer the calculator upstream)"
	case msg.Get("tool_calls").Exists():
		return "the gateway returned the server tool call to the client instead of running it"
	default:
		return fmt.Sprintf("unexpected answer to a server-tool request: %.200s", body)
	}
}

// cacheHit sends the same temperature-0 request again and again: the gateway
// answers from its response cache; direct and floor call the mock each time.
func (b *bench) cacheHit() *scenarioResult {
	ls := b.spec(b.set.CacheRate, 0, b.set.LegSeconds)
	r := &scenarioResult{Name: "cache", Title: "Response cache hit, open model", Load: ls.String()}
	var hv string
	for i := 0; i < 2; i++ {
		status, v, body, err := b.gateway.post(cacheBody, "x-gateway-cache")
		if err != nil || status != 200 {
			r.Status, r.Reason = "failed", fmt.Sprintf("gateway: status %d, err %v: %.200s", status, err, body)
			return r
		}
		hv = v
	}
	if !strings.EqualFold(hv, "hit") {
		r.Status = "skipped"
		r.Reason = fmt.Sprintf("the gateway does not answer a repeated temperature-0 request from its cache (x-gateway-cache: %q)", hv)
		return r
	}
	hit := func(hv string, _ []byte) error {
		if !strings.EqualFold(hv, "hit") {
			return fmt.Errorf("x-gateway-cache: %q, want hit", hv)
		}
		return nil
	}
	m := b.measure(r, b.plainJobs(cacheBody, "x-gateway-cache", hit), ls)
	if m == nil {
		return r
	}
	r.fig("gateway cache-hit latency p50", m["gateway"].Latency.P50, "µs")
	r.fig("gateway cache-hit latency p99", m["gateway"].Latency.P99, "µs")
	r.fig("gateway CPU per cache hit", round(m["gateway"].ProxyCPUPer1k*1000, 1), "µs")
	r.Notes = append(r.Notes, "direct and floor call the mock (first-byte delay included); the gateway answers from memory, so its 'added' latency is negative")
	return r
}

// fallback calls a model whose deployment answers 500 and that falls back to
// a healthy one. Direct and floor do what a client must: call, see the 500,
// call the other model.
func (b *bench) fallback() *scenarioResult {
	ls := b.spec(b.set.FallbackRate, 0, b.set.LegSeconds)
	r := &scenarioResult{Name: "fallback", Title: "Fallback after a 500, open model", Load: ls.String()}
	status, att, body, err := b.gateway.post(failBody, "x-gateway-attempts")
	if err != nil || status != 200 {
		r.Status, r.Reason = "failed", fmt.Sprintf("gateway: status %d, err %v: %.200s", status, err, body)
		return r
	}
	if n, _ := strconv.Atoi(att); n < 2 {
		r.Status, r.Reason = "skipped", fmt.Sprintf("the gateway answered without falling back (x-gateway-attempts: %q)", att)
		return r
	}
	attempts := func(hv string, _ []byte) error {
		if n, _ := strconv.Atoi(hv); n < 2 {
			return fmt.Errorf("x-gateway-attempts: %q, want 2", hv)
		}
		return nil
	}
	okBody := bytes.Replace(failBody, []byte(`"fail-500"`), []byte(`"chat"`), 1)
	m := b.measure(r, []job{
		{b.direct, b.direct.clientFallback(failBody, okBody)},
		{b.floor, b.floor.clientFallback(failBody, okBody)},
		{b.gateway, b.gateway.plain(failBody, "x-gateway-attempts", attempts)},
	}, ls)
	if m == nil {
		return r
	}
	r.fig("gateway added latency p50", m["gateway"].Added.P50, "µs")
	r.fig("gateway added latency p99", m["gateway"].Added.P99, "µs")
	r.fig("gateway CPU per fallback request", round(m["gateway"].ProxyCPUPer1k*1000, 1), "µs")
	return r
}
