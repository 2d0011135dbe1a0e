package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/llmgw/gateway/internal/testproc"
)

// replicasConfig turns the bench gateway into a replica: the response cache
// and the tool loop's state in Redis, breakers shared through it.
func replicasConfig(base, redis string) string {
	s := strings.Replace(base, `store = "memory"`, `store = "redis"`, 1)
	s = strings.Replace(s, "breaker_failures = 1000000000", "breaker_failures = 1000000000\nshared_breakers = true", 1)
	return s + "\n[redis]\naddr = \"" + redis + "\"\ntimeout = \"500ms\"\n"
}

// haproxyConfig balances across backends (least connections, /readyz
// checks), as deploy/haproxy.cfg does.
func haproxyConfig(bind string, backends []*child) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n    maxconn 8000\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n    timeout server 60s\n"+
		"frontend llm\n    bind %s\n    default_backend gateways\nbackend gateways\n    balance leastconn\n    option httpchk GET /readyz\n"+
		"    default-server check inter 2s\n", bind)
	for i, be := range backends {
		fmt.Fprintf(&b, "    server r%d %s\n", i, be.addr)
	}
	return b.String()
}

// replicas measures what a second replica buys: non-streaming pass-through
// (closed model) against one Redis-backed gateway directly, HAProxy in front
// of that one replica, and HAProxy in front of two. On a machine whose
// cores are shared by the load generator, the mock, HAProxy and the
// replicas, a second replica can only add what idle CPU there is.
func (b *bench) replicas() *scenarioResult {
	ls := b.spec(0, b.set.Concurrency, b.set.LegSeconds)
	r := &scenarioResult{Name: "replicas", Title: "Two replicas behind HAProxy against one (Redis-backed cache and state), closed model", Load: ls.String()}
	redisBin, err1 := exec.LookPath("redis-server")
	lbBin, err2 := exec.LookPath("haproxy")
	if err1 != nil || err2 != nil {
		r.Status, r.Reason = "skipped", "redis-server or haproxy is not installed"
		return r
	}
	fail := func(err error) *scenarioResult {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	rd, err := b.procs.start("redis-replicas", redisBin, "--port", "{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(rd)
	var gws []*child
	for i := range 2 {
		name := fmt.Sprintf("gateway-replica-%d", i)
		path, err := writeGatewayConfig(b.bins.dir, name, "127.0.0.1:0", b.api.addr, b.api.addr, 20000, b.set.buffers())
		if err != nil {
			return fail(err)
		}
		base, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(path, []byte(replicasConfig(string(base), rd.addr)), 0o644)
		}
		if err != nil {
			return fail(err)
		}
		gw, err := b.procs.start(name, b.bins.gateway, "-config", path, "-listen", "{addr}")
		if err != nil {
			return fail(err)
		}
		defer b.procs.stop(gw)
		gws = append(gws, gw)
	}
	lb := func(name string, backends []*child) (*child, error) {
		addr, err := testproc.Loopback()
		if err != nil {
			return nil, err
		}
		path := filepath.Join(b.bins.dir, name+".cfg")
		if err := os.WriteFile(path, []byte(haproxyConfig(addr, backends)), 0o644); err != nil {
			return nil, err
		}
		return b.procs.startAt(name, addr, lbBin, "-db", "-f", path)
	}
	lb1, err := lb("haproxy-1", gws[:1])
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(lb1)
	lb2, err := lb("haproxy-2", gws)
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(lb2)
	one := newTarget("1 replica", gws[0], b.api, 4096)
	viaLB1 := newTarget("haproxy+1 replica", lb1, b.api, 4096)
	viaLB2 := newTarget("haproxy+2 replicas", lb2, b.api, 4096)
	m := b.measure(r, []job{
		{one, one.plain(chatBody, "x-gateway-cache", noCacheHit)},
		{viaLB1, viaLB1.plain(chatBody, "x-gateway-cache", noCacheHit)},
		{viaLB2, viaLB2.plain(chatBody, "x-gateway-cache", noCacheHit)},
	}, ls)
	if m == nil {
		return r
	}
	g1, h1, h2 := m["1 replica"], m["haproxy+1 replica"], m["haproxy+2 replicas"]
	r.fig("2 replicas/1 replica throughput", ratio(h2.ThroughputRPS, g1.ThroughputRPS), "×")
	r.fig("2 replicas/1 replica behind haproxy throughput", ratio(h2.ThroughputRPS, h1.ThroughputRPS), "×")
	r.fig("haproxy/direct throughput (1 replica)", ratio(h1.ThroughputRPS, g1.ThroughputRPS), "×")
	return r
}
