package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// sampleGateway reads the gateway's RSS (/proc/PID/status), open
// descriptors (/proc/PID/fd; those connected to upstreamPort counted apart
// too) and, from its /metrics, goroutines (go_goroutines) and heap in use
// (go_memstats_heap_inuse_bytes) and the heap the last collection found
// live (go_gc_heap_live_bytes).
func sampleGateway(gw *child, upstreamPort int, requests int64) (soakSample, error) {
	rss, _, err := memKB(gw.Pid())
	if err != nil {
		return soakSample{}, fmt.Errorf("gateway RSS: %w", err)
	}
	fds, upstream, err := countFDs(gw.Pid(), upstreamPort)
	if err != nil {
		return soakSample{}, fmt.Errorf("gateway fds: %w", err)
	}
	m, err := scrape(gw.addr, "go_goroutines", "go_memstats_heap_inuse_bytes", "go_gc_heap_live_bytes")
	if err != nil {
		return soakSample{}, err
	}
	// The /metrics scrape itself holds one connection (one fd) while it is
	// served; it is closed by the time the next sample is taken.
	return soakSample{RSSMB: mb(rss), HeapMB: round(m[1]/(1<<20), 1), LiveHeapMB: round(m[2]/(1<<20), 1), Goroutines: int(m[0]), FDs: fds,
		UpstreamFDs: upstream, Requests: requests}, nil
}

// scrape reads the named unlabelled gauges from addr's /metrics.
func scrape(addr string, names ...string) ([]float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("gateway /metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("gateway /metrics: %w", err)
	}
	out := make([]float64, len(names))
	for i, n := range names {
		out[i] = -1
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, n+" "); ok {
				out[i], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
		if out[i] < 0 {
			return nil, fmt.Errorf("gateway /metrics has no %s", n)
		}
	}
	return out, nil
}

// countFDs counts pid's open descriptors, and among them the TCP sockets
// whose remote port is port (the gateway's pooled upstream connections,
// which outlive the traffic by the pool's idle timeout).
func countFDs(pid, port int) (total, toPort int, err error) {
	ents, err := os.ReadDir(procPath(pid, "fd"))
	if err != nil {
		return 0, 0, err
	}
	inodes := map[string]bool{}
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(procPath(pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			_, rport, _ := strings.Cut(fs[2], ":")
			if p, err := strconv.ParseInt(rport, 16, 32); err == nil && int(p) == port {
				inodes[fs[9]] = true
			}
		}
	}
	for _, e := range ents {
		link, err := os.Readlink(procPath(pid, "fd/"+e.Name()))
		if err != nil {
			continue
		}
		total++
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
			toPort++
		}
	}
	return total, toPort, nil
}
