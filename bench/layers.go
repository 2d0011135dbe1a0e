package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/llmgw/gateway/config"
)

// layerSet is which optional parts of the gateway a variant of the bench
// gateway runs. The core runs whatever the config says: it reads and checks
// the request, routes it, calls the upstream through the connection
// tracking that lets a vanished client cancel it, checks the answer and
// meters its usage.
type layerSet struct {
	model     bool // the model-call middleware (fallback, context_edit, prompt_cache)
	request   bool // the request middleware (policy, limits, response cache)
	accessLog bool // one JSON access-log line per request
}

// layerVariants are the gateways the layers scenario starts besides the
// bench gateway (which runs every layer), each adding one layer to the one
// before it.
var layerVariants = []struct {
	name string
	set  layerSet
}{
	{"core", layerSet{}},
	{"+model layer", layerSet{model: true}},
	{"+request layer", layerSet{model: true, request: true}},
}

// layerEdits turn the bench gateway's config into a variant's. Each edit
// names text the config must hold, so a change to the config that would
// silently keep a layer on fails the run instead.
func layerEdits(s layerSet) [][2]string {
	var e [][2]string
	if !s.accessLog {
		e = append(e, [2]string{`log_level = "info"`, `log_level = "warn"`})
	}
	if !s.request {
		e = append(e, [2]string{"\n[middleware.cache]\nenabled = true\n", "\n[middleware]\nrequest = []\n\n[middleware.cache]\nenabled = false\n"})
	}
	if !s.model {
		e = append(e, [2]string{"name = \"chat\"\nprovider = \"api\"\n", "name = \"chat\"\nprovider = \"api\"\nmiddleware = []\n"})
	}
	return e
}

// writeGatewayVariant writes the bench gateway's config with only the
// layers of s, and returns its path.
func writeGatewayVariant(dir, name, listen, api string, conns int, buf connBuffers, s layerSet) (string, error) {
	path, err := writeGatewayConfig(dir, name, listen, api, api, conns, buf)
	if err != nil {
		return "", err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	cfg := string(raw)
	for _, e := range layerEdits(s) {
		if strings.Count(cfg, e[0]) != 1 {
			return "", fmt.Errorf("bench gateway config: %q is not there once, cannot make the %s variant", e[0], name)
		}
		cfg = strings.Replace(cfg, e[0], e[1], 1)
	}
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// layers measures non-streaming pass-through (closed model) through
// gateways that add the optional layers one at a time, beside the floor
// proxy and the bench gateway: what the core every request pays costs
// against the floor, and what each layer adds to it.
func (b *bench) layers() *scenarioResult {
	ls := b.spec(0, b.set.Concurrency, b.set.LegSeconds)
	r := &scenarioResult{Name: "layers", Title: "Pass-through CPU by gateway layer, closed model", Load: ls.String()}
	fail := func(err error) *scenarioResult {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	jobs := []job{{b.floor, b.floor.plain(chatBody, "", nil)}}
	for _, v := range []struct {
		leg, proc string
		flags     []string
	}{
		{checksLeg, "floor-checks", []string{"-check"}},
		{checksLogLeg, "floor-checks-log", []string{"-check", "-log", filepath.Join(b.bins.dir, "floor-access.log")}},
		{timeoutsLeg, "floor-checks-log-timeouts", append([]string{"-check", "-log", filepath.Join(b.bins.dir, "floor-access-2.log")},
			defaultTimeouts()...)},
	} {
		c, err := b.procs.start(v.proc, b.bins.floor, append(floorArgs(b.api.addr, b.set.buffers()), v.flags...)...)
		if err != nil {
			return fail(err)
		}
		defer b.procs.stop(c)
		t := newTarget(v.leg, c, b.api, 4096)
		jobs = append(jobs, job{t, t.plain(chatBody, "", nil)})
	}
	for i, v := range layerVariants {
		name := fmt.Sprintf("gateway-layers-%d", i)
		path, err := writeGatewayVariant(b.bins.dir, name, "127.0.0.1:0", b.api.addr, 20000, b.set.buffers(), v.set)
		if err != nil {
			return fail(err)
		}
		c, err := b.procs.start(name, b.bins.gateway, b.gatewayArgs(name, path)...)
		if err != nil {
			return fail(err)
		}
		defer b.procs.stop(c)
		t := newTarget(v.name, c, b.api, 4096)
		jobs = append(jobs, job{t, t.plain(chatBody, "x-gateway-cache", noCacheHit)})
	}
	jobs = append(jobs, job{b.gateway, b.gateway.plain(chatBody, "x-gateway-cache", noCacheHit)})
	m := b.measure(r, jobs, ls)
	if m == nil {
		return r
	}
	floor := m["floor"].ProxyCPUPer1k
	prev := ""
	for _, j := range jobs[1:] {
		n := j.t.name
		r.fig(n+"/floor CPU per request", ratio(m[n].ProxyCPUPer1k, floor), "×")
		if prev != "" && n != layerVariants[0].name { // the core adds to nothing of the floor's
			r.fig(n+" added CPU per request", round((m[n].ProxyCPUPer1k-m[prev].ProxyCPUPer1k)*1000, 1), "µs")
		}
		prev = n
	}
	return r
}

// checksLeg names the floor proxy run with -check: the floor plus the
// checks and the metering the gateway's design makes of every request
// (the request and the answer read as JSON, the model and the usage read).
const checksLeg = "floor+checks"

// checksLogLeg names the floor proxy run with -check and -log: floor+checks
// writing the access line the gateway writes of every request, in the
// leanest form (zerolog, a buffer under a mutex flushed every millisecond).
const checksLogLeg = "floor+checks+log"

// timeoutsLeg names floor+checks+log bounding what the gateway bounds by
// default: reading a request, a keep-alive connection's wait for the next,
// and each upstream call (fasthttp sets a socket deadline for each).
const timeoutsLeg = "floor+checks+log+timeouts"

// defaultTimeouts are the floor's flags for the gateway's default timeouts:
// the [server] ones and a provider's total_timeout, which bounds a JSON
// answer's call.
func defaultTimeouts() []string {
	c := config.Config{Providers: []config.Provider{{Name: "p", Kind: "openai"}}}
	c.ApplyDefaults()
	return []string{"-read-timeout", c.Server.ReadTimeout.D().String(), "-idle-timeout", c.Server.IdleTimeout.D().String(),
		"-call-timeout", c.Providers[0].TotalTimeout.D().String()}
}

// layerSentence says, from the layers scenario, what the core and each
// layer cost ("" when the scenario has no figures).
func layerSentence(s *scenarioResult) string {
	core, ok := s.figure("core/floor CPU per request")
	if !ok {
		return ""
	}
	checks, okChecks := s.figure(checksLeg + "/floor CPU per request")
	var adds []string
	for _, a := range []struct{ fig, what string }{
		{"+model layer", "the model-call middleware (fallback, context editing, prompt cache)"},
		{"+request layer", "the request middleware (policy, limits, response cache)"},
		{"gateway", "the access log"},
	} {
		v, ok := s.figure(a.fig + " added CPU per request")
		switch {
		case ok && v > -1 && v < 1: // within the legs' noise, either way
			adds = append(adds, fmt.Sprintf("%s nothing measurable (%s µs)", a.what, fmtNum(v)))
		case ok:
			adds = append(adds, fmt.Sprintf("%s %s µs", a.what, fmtNum(v)))
		}
	}
	out := fmt.Sprintf("By layer (the layers scenario, same run): the core every request pays, with no middleware and no access log "+
		"(the server, the request's checks and routing, the upstream call and the tracking that lets a vanished client cancel it, "+
		"the answer's check and usage metering), costs %s× the floor's CPU", fmtNum(core))
	if okChecks {
		out += fmt.Sprintf(" (the floor proxy itself, made to check the request and the answer as JSON and to read their model and usage "+
			"as the gateway must and to do nothing else, %s×)", fmtNum(checks))
	}
	if len(adds) > 0 {
		out += "; on top of it " + strings.Join(adds, ", ")
	}
	return out + "." + allowanceSentence(s)
}

// allowanceSentence compares what the CPU target leaves for everything
// the gateway does beyond relaying (cpuGoal-1 of the floor's CPU) with
// what the leanest checks and access line and the gateway's middleware
// take of it ("" without the figures).
func allowanceSentence(s *scenarioResult) string {
	leanLeg, timeouts := checksLogLeg, ""
	if _, ok := s.figure(timeoutsLeg + "/floor CPU per request"); ok {
		leanLeg = timeoutsLeg
		timeouts = fmt.Sprintf(", and to bound a request's read, a keep-alive connection's wait and the upstream call with the gateway's "+
			"default timeouts (%s)", timeoutsLeg)
	}
	lean, ok1 := s.figure(leanLeg + "/floor CPU per request")
	core, ok2 := s.figure("core/floor CPU per request")
	layers, ok3 := s.figure("+request layer/floor CPU per request")
	if !ok1 || !ok2 || !ok3 {
		return ""
	}
	allowed := round(cpuGoal-1, 2)
	mw := round(max(layers-core, 0), 3)
	used := round(lean-1+mw, 3)
	verdict := "over it before"
	if used <= allowed {
		verdict = fmt.Sprintf("%s× of it left for", fmtNum(round(allowed-used, 3)))
	}
	return fmt.Sprintf(" A %s× ratio leaves %s× the floor's CPU for all the gateway does beyond relaying. The floor proxy made to do the "+
		"checks and to write the access line in their leanest form (%s: zerolog, one line per request, a buffer flushed every "+
		"millisecond)%s takes %s× of it, and the two middleware layers, acting on nothing, add %s× in the gateway: %s× in all, %s "+
		"routing, the per-request record, the tracking that cancels a vanished client's call, metering's bookkeeping and the metrics.",
		fmtNum(cpuGoal), fmtNum(allowed), checksLogLeg, timeouts, fmtNum(round(lean-1, 3)), fmtNum(mw), fmtNum(used), verdict)
}
