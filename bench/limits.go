package main

import (
	"os/exec"
	"strings"
)

// limitsConfig is added to the bench gateway's config for the limits
// scenario: every request passes a rate limit, a token limit, a
// concurrency limit and a budget, all set far above the load so that none
// refuses, shared through Redis as replicas would share them.
const limitsConfig = `
[redis]
addr = "{redis}"
timeout = "500ms"

[[limits]]
tenant = "*"
requests_per_minute = 1000000000
tokens_per_minute = 1000000000000
concurrent = 1000000

[[budgets]]
tenant = "default"
amount = 1000000000.0
period = "month"
`

// limits compares non-streaming pass-through through the bench gateway with
// the same gateway enforcing limits and a budget through a real
// redis-server: what one shared-limits check (one Redis round trip) and the
// metering of the call cost per request.
func (b *bench) limits() *scenarioResult {
	ls := b.spec(0, b.set.Concurrency, b.set.LegSeconds)
	r := &scenarioResult{Name: "limits", Title: "Pass-through with Redis-backed rate limits and a budget, closed model", Load: ls.String()}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		r.Status, r.Reason = "skipped", "redis-server is not installed"
		return r
	}
	rd, err := b.procs.start("redis", bin, "--port", "{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err != nil {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	defer b.procs.stop(rd)
	path, err := writeGatewayConfig(b.bins.dir, "gateway-limits", "127.0.0.1:0", b.api.addr, b.api.addr, 20000, b.set.buffers())
	if err == nil {
		err = appendFile(path, strings.ReplaceAll(limitsConfig, "{redis}", rd.addr))
	}
	if err != nil {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	gl, err := b.procs.start("gateway-limits", b.bins.gateway, "-config", path, "-listen", "{addr}")
	if err != nil {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	defer b.procs.stop(gl)
	limited := newTarget("gateway+limits", gl, b.api, 4096)
	m := b.measure(r, []job{
		{b.direct, b.direct.plain(chatBody, "", nil)},
		{b.gateway, b.gateway.plain(chatBody, "x-gateway-cache", noCacheHit)},
		{limited, limited.plain(chatBody, "x-gateway-cache", noCacheHit)},
	}, ls)
	if m == nil {
		return r
	}
	g, l := m["gateway"], m["gateway+limits"]
	r.fig("limits/gateway throughput", ratio(l.ThroughputRPS, g.ThroughputRPS), "×")
	r.fig("limits/gateway CPU per request", ratio(l.ProxyCPUPer1k, g.ProxyCPUPer1k), "×")
	r.fig("limits added CPU per request", round((l.ProxyCPUPer1k-g.ProxyCPUPer1k)*1000, 1), "µs")
	if l.Latency != nil && g.Latency != nil {
		r.fig("limits added p50 latency", round(l.Latency.P50-g.Latency.P50, 1), "µs")
	}
	return r
}
