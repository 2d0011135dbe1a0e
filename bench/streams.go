package main

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// concurrentStreams holds N slow streams open at once through each target
// and measures the memory each open stream costs: resident memory of the
// measured process with all N open minus its idle resident memory, over N.
// The processes are fresh (started for this scenario), so memory left over
// from earlier scenarios does not blur the figure.
func (b *bench) concurrentStreams() *scenarioResult {
	n := b.set.Streams
	r := &scenarioResult{Name: "streams", Title: fmt.Sprintf("%d concurrent slow streams", n),
		Load: fmt.Sprintf("%d streams held open, one event per %.0f ms, %d B connection buffers", n, b.set.SlowChunkMS, b.set.StreamsBuffer)}
	fail := func(err error) *scenarioResult {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	// The load generator's idle keep-alive connections to the main targets
	// would count against its descriptor limit.
	for _, t := range []*target{b.direct, b.floor, b.gateway} {
		t.hc.CloseIdleConnections()
		t.shc.CloseIdleConnections()
	}
	// Enough text that no stream ends while held: one event per chunk delay.
	mock, err := b.procs.start("mock-slow", b.bins.mock, "-listen", "{addr}", "-chunk-delay", ms(b.set.SlowChunkMS),
		"-reply-bytes", "4000", "-text-runes", strconv.Itoa(b.set.TextRunes))
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(mock)
	sb := b.set.StreamsBuffer
	floor, gw, err := b.startProxies("slow", b.api, mock, n+1000, connBuffers{read: sb, write: sb, upstreamRead: sb})
	if err != nil {
		return fail(err)
	}
	defer b.procs.stop(floor)
	defer b.procs.stop(gw)

	targets := []*target{
		newTarget("direct", mock, nil, n+100),
		newTarget("floor", floor, mock, n+100),
		newTarget("gateway", gw, mock, n+100),
	}
	for _, t := range targets {
		if b.ctx.Err() != nil {
			return fail(b.ctx.Err())
		}
		l, err := b.holdStreams(t, n)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", t.name, err))
		}
		r.Legs = append(r.Legs, l)
	}
	m := byTarget(r.Legs)
	g := m["gateway"]
	r.fig("gateway RSS with all streams open", g.RSSMB, "MB")
	r.fig("gateway memory per stream", perStreamKB(g), "KiB")
	r.fig("floor memory per stream", perStreamKB(m["floor"]), "KiB")
	r.fig("mock memory per stream", perStreamKB(m["direct"]), "KiB")
	r.fig("gateway/floor memory per stream", ratio(perStreamKB(g), perStreamKB(m["floor"])), "×")
	if g.Goroutines > 0 {
		r.fig("gateway goroutines with all streams open", float64(g.Goroutines), "")
		r.fig("gateway goroutines per stream", round(float64(g.Goroutines-g.IdleGoroutines)/float64(g.ok()), 2), "")
	}
	if g.StackMB > 0 {
		r.fig("gateway goroutine stack per stream", round((g.StackMB-g.IdleStackMB)*1024/float64(g.ok()), 1), "KiB")
	}
	if n < 10000 {
		proj := g.IdleRSSMB + perStreamKB(g)*10000/1024
		r.fig("gateway RSS projected for 10,000 streams", round(proj, 1), "MB")
	}
	r.Notes = append(r.Notes, "memory per stream = (VmRSS with all streams open - VmRSS idle) / streams open; direct is the mock's own cost",
		fmt.Sprintf("the floor proxy and the gateway both run with %d B connection buffers (server read and write, upstream read: the gateway's [server] read_buffer and write_buffer and its provider's read_buffer)", b.set.StreamsBuffer))
	for _, l := range r.Legs {
		if l.Errors > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %d of %d streams did not open, e.g. %s", l.Target, l.Errors, l.Requests, l.ErrorSample))
		}
	}
	r.Status = "ok"
	for _, l := range r.Legs {
		if l.ok() == 0 {
			r.Status, r.Reason = "failed", l.Target+": no stream opened: "+l.ErrorSample
		}
	}
	return r
}

func perStreamKB(l *leg) float64 {
	if l == nil || l.ok() == 0 {
		return 0
	}
	return round((l.RSSMB-l.IdleRSSMB)*1024/float64(l.ok()), 1)
}

// holdStreams opens n streams to t, waits until each has received its first
// event, samples memory and goroutines, and cuts them all.
func (b *bench) holdStreams(t *target, n int) (*leg, error) {
	// One stream first, so that code paths and pools are in place before the
	// idle sample.
	warm := make(chan struct{})
	go func() {
		defer close(warm)
		_ = t.readStream(slowBody, nil, func(time.Time, []byte) bool { return false }, nil)
	}()
	<-warm
	t.cutStreams()
	time.Sleep(150 * time.Millisecond)
	idle, _, err := memKB(t.proxy.Pid())
	if err != nil {
		return nil, err
	}
	l := &leg{Target: t.name, Load: fmt.Sprintf("%d streams", n), Requests: n, IdleRSSMB: mb(idle)}
	if t.name == "gateway" {
		l.IdleGoroutines = goroutines(t.addr)
		l.IdleStackMB = mb(int64(gaugeValue(t.addr, "go_memstats_stack_inuse_bytes") / 1024))
	}
	cpu0 := snap(t)
	var (
		opened, failed atomic.Int64
		cut            atomic.Bool
		wg             sync.WaitGroup
		errMu          sync.Mutex
		firstErr       error
	)
	start := time.Now()
	const ratePerSec = 2500 // opening pace: a burst of 10,000 connects would overflow accept queues
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / ratePerSec)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			counted := false
			err := t.readStream(slowBody, nil, func(time.Time, []byte) bool {
				if !counted {
					counted = true
					opened.Add(1)
				}
				return true
			}, nil)
			if err != nil && !cut.Load() || err == nil && !counted {
				failed.Add(1)
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for opened.Load()+failed.Load() < int64(n) && time.Now().Before(deadline) && b.ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	openTook := time.Since(start)
	// Let every stream pass at least one more event with all of them open.
	time.Sleep(time.Duration(b.set.SlowChunkMS*1.2) * time.Millisecond)
	rss, hwm, err := memKB(t.proxy.Pid())
	if err != nil {
		return nil, err
	}
	if t.name == "gateway" {
		l.Goroutines = goroutines(t.addr)
		l.StackMB = mb(int64(gaugeValue(t.addr, "go_memstats_stack_inuse_bytes") / 1024))
	}
	cpu1 := snap(t)
	held := opened.Load()
	cut.Store(true)
	t.cutStreams()
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		return nil, fmt.Errorf("streams did not end 15s after their connections were closed")
	}
	time.Sleep(300 * time.Millisecond) // the servers notice the closed conns
	l.Errors = n - int(held)
	if firstErr != nil {
		l.ErrorSample = truncate(firstErr.Error(), 200)
	} else if l.Errors > 0 {
		l.ErrorSample = "not open within 30s"
	}
	l.Seconds = round(openTook.Seconds(), 2)
	l.RSSMB, l.PeakRSSMB = mb(rss), mb(hwm)
	l.ProxyCPUPer1k = round((cpu1.proxy-cpu0.proxy)/float64(n)*1000, 4)
	return l, nil
}

// startProxies starts a floor proxy and a gateway (named floor-NAME and
// gateway-NAME) in front of mock, both with connection pools of maxConns
// and connection buffers buf; the gateway's "slow" provider is mock and its
// other providers api. The caller stops both.
func (b *bench) startProxies(name string, api, mock *child, maxConns int, buf connBuffers) (floor, gw *child, err error) {
	floor, err = b.procs.start("floor-"+name, b.bins.floor, append(floorArgs(mock.addr, buf), "-max-conns", strconv.Itoa(maxConns))...)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := writeGatewayConfig(b.bins.dir, "gateway-"+name, "127.0.0.1:0", api.addr, mock.addr, maxConns, buf)
	if err == nil {
		gw, err = b.procs.start("gateway-"+name, b.bins.gateway, b.gatewayArgs("gateway-"+name, cfg)...)
	}
	if err != nil {
		b.procs.stop(floor)
		return nil, nil, err
	}
	return floor, gw, nil
}
