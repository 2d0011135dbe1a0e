package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// A burst answer is burstEvents SSE data events (role, 19 content deltas of
// burstTextRunes runes, finish, usage) before data: [DONE], all written to
// the socket at once: an upstream that sends a finished answer in one go.
const (
	burstEvents    = 22
	burstTextRunes = 4
	burstReply     = (burstEvents - 3) * burstTextRunes // ASCII text: one byte per rune
)

// burstStreams is streaming pass-through from an upstream that answers each
// stream in one burst, without first-byte delay, under a closed model (as
// wrk -c32 does): how many streams per second each target serves when
// relaying a whole answer is the work. It needs a mock of its own (no
// delays, one flush per stream), with a floor proxy and a gateway in front
// of it.
func (b *bench) burstStreams() *scenarioResult {
	ls := b.spec(0, b.set.BurstClients, b.set.LegSeconds)
	r := &scenarioResult{Name: "burst", Title: fmt.Sprintf("Streams of a %d-event burst, closed model", burstEvents), Load: ls.String()}
	fail := func(err error) *scenarioResult {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	mock, err := b.procs.start("mock-burst", b.bins.mock, "-listen", "{addr}", "-burst",
		"-reply-bytes", strconv.Itoa(burstReply), "-text-runes", strconv.Itoa(burstTextRunes))
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(mock)
	floor, gw, err := b.startProxies("burst", mock, mock, 4096, b.set.buffers())
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(floor)
	defer b.procs.stop(gw)
	checks, err := b.procs.start("floor-checks-burst", b.bins.floor, append(floorArgs(mock.addr, b.set.buffers()), "-max-conns", "4096", "-check")...)
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(checks)

	conns := b.set.BurstClients + 64
	direct, fl, g := newTarget("direct", mock, nil, conns), newTarget("floor", floor, mock, conns), newTarget("gateway", gw, mock, conns)
	ct := newTarget(checksLeg, checks, mock, conns)
	stream := func(t *target) workload { return t.stream(streamBody) }
	jobs := []job{{direct, stream(direct)}, {fl, stream(fl)}, {ct, stream(ct)}, {g, stream(g)}}
	// Each target must relay the burst mock's answer, or the legs measure
	// different upstreams.
	for _, j := range jobs {
		if err := checkBurst(j.t); err != nil {
			return fail(fmt.Errorf("%s: %w", j.t.name, err))
		}
	}
	var peerName string
	if b.peer != nil {
		peerName = b.peer.name
		p := b.peerAt(mock)
		why := "its upstream is set in its own config, not by a {mock} header, so it cannot be pointed at the burst mock"
		if p != nil {
			if err := checkBurst(p); err != nil {
				why = "it did not relay the burst mock's answer: " + err.Error()
			} else {
				jobs, why = append(jobs, job{p, stream(p)}), ""
			}
		}
		if why != "" {
			r.Notes = append(r.Notes, peerName+" was not run in this scenario: "+why)
		}
	}
	m := b.measure(r, jobs, ls)
	if m == nil {
		return r
	}
	burstFigures(r, m, peerName)
	r.Notes = append(r.Notes, fmt.Sprintf("each stream is read to data: [DONE]; rps is streams per second, latency the whole stream's duration; "+
		"the mock sends all %d events with one flush and no first-byte delay, so the proxies' work per stream bounds the rate", burstEvents))
	return r
}

// burstFigures are the scenario's ratios from its legs by target; peer
// names the peer's leg ("" = none).
func burstFigures(r *scenarioResult, m map[string]*leg, peer string) {
	g, f, d := m["gateway"], m["floor"], m["direct"]
	r.fig("gateway/floor streams/s", ratio(g.ThroughputRPS, f.ThroughputRPS), "×")
	r.fig("gateway/direct streams/s", ratio(g.ThroughputRPS, d.ThroughputRPS), "×")
	r.fig("floor/direct streams/s", ratio(f.ThroughputRPS, d.ThroughputRPS), "×")
	r.fig("gateway/floor CPU per stream", ratio(g.ProxyCPUPer1k, f.ProxyCPUPer1k), "×")
	r.fig("gateway CPU per stream", round(g.ProxyCPUPer1k*1000, 1), "µs")
	r.fig("floor CPU per stream", round(f.ProxyCPUPer1k*1000, 1), "µs")
	if c := m[checksLeg]; c != nil {
		r.fig(checksLeg+"/floor streams/s", ratio(c.ThroughputRPS, f.ThroughputRPS), "×")
		r.fig("gateway/"+checksLeg+" streams/s", ratio(g.ThroughputRPS, c.ThroughputRPS), "×")
		r.fig(checksLeg+"/floor CPU per stream", ratio(c.ProxyCPUPer1k, f.ProxyCPUPer1k), "×")
		r.fig("gateway/"+checksLeg+" CPU per stream", ratio(g.ProxyCPUPer1k, c.ProxyCPUPer1k), "×")
		r.fig(checksLeg+" CPU per stream", round(c.ProxyCPUPer1k*1000, 1), "µs")
	}
	if p := m[peer]; p != nil {
		r.fig(peer+"/floor streams/s", ratio(p.ThroughputRPS, f.ThroughputRPS), "×")
		r.fig(peer+"/gateway streams/s", ratio(p.ThroughputRPS, g.ThroughputRPS), "×")
	}
}

// checkBurst makes sure t answers the burst mock's answer, burstReply
// bytes of text in burstEvents events before [DONE], so the scenario
// measures what it says. One event more is the gateway's: it sends each
// choice's finish in a chunk of its own (the upstream's goes with null).
func checkBurst(t *target) error {
	n, text := 0, 0
	err := t.readStream(t.body(streamBody), nil, func(_ time.Time, data []byte) bool {
		n++
		text += len(gjson.GetBytes(data, "choices.0.delta.content").Str)
		return true
	}, nil)
	if err != nil {
		return err
	}
	if (n-1 != burstEvents && n-1 != burstEvents+1) || text != burstReply {
		return fmt.Errorf("stream of %d events and %d bytes of text before [DONE], want %d events (or one more) and %d bytes", n-1, text, burstEvents, burstReply)
	}
	return nil
}

// peerAt is the peer leg pointed at mock instead of the main mock, or nil
// when its upstream is not chosen by a request header bench sets (a {mock}
// header or Portkey's custom host).
func (b *bench) peerAt(mock *child) *target {
	p := b.peer
	from, to := "http://"+b.api.addr+"/v1", "http://"+mock.addr+"/v1"
	headers := make([][2]string, len(p.headers))
	moved := false
	for i, h := range p.headers {
		headers[i] = [2]string{h[0], strings.ReplaceAll(h[1], from, to)}
		moved = moved || headers[i][1] != h[1]
	}
	if !moved {
		return nil
	}
	t := makeTarget(p.name, p.addr, p.base, p.hc.IsTLS, p.proxy, mock, b.set.BurstClients+64)
	t.headers, t.model = headers, p.model
	return t
}
