package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds returns the user+system CPU time of pid (0 = this process) from
// /proc/PID/stat, threads that exited included.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no ')'", procPath(pid, "stat"))
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: short", procPath(pid, "stat"))
	}
	// After ")" come state(3), ppid(4), ... utime(14) and stime(15).
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: bad utime/stime", procPath(pid, "stat"))
	}
	return float64(ut+st) / clockTicks, nil
}

// machineSeconds returns, from /proc/stat, the CPU seconds all processes on
// the machine have spent in user and system mode, and the time the
// hypervisor stole from this machine's virtual cores (zero on bare metal).
// Interrupt and softirq time are left out: on loopback they are mostly the
// benchmark's own network traffic, which no process is charged for.
func machineSeconds() (busy, steal float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseCPULine(line)
}

// parseCPULine reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal guest guest_nice, in clock ticks
// (guest time is already in user).
func parseCPULine(line string) (busy, steal float64) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "cpu" {
		return 0, 0
	}
	var b, st uint64
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		switch i {
		case 0, 1, 2:
			b += n
		case 7:
			st = n
		}
	}
	return float64(b) / clockTicks, float64(st) / clockTicks
}

// loadAverage is the 1-minute load average ("" when unknown).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// memKB returns VmRSS (resident now) and VmHWM (peak resident) of pid in KiB.
func memKB(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(procPath(pid, "status"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var p *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			p = &rss
		case strings.HasPrefix(line, "VmHWM:"):
			p = &hwm
		default:
			continue
		}
		fs := strings.Fields(line)
		if len(fs) >= 2 {
			*p, _ = strconv.ParseInt(fs[1], 10, 64)
		}
	}
	return rss, hwm, sc.Err()
}

func procPath(pid int, file string) string {
	if pid == 0 {
		return "/proc/self/" + file
	}
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}

// goroutines reads go_goroutines from the gateway's Prometheus endpoint;
// -1 when it cannot.
func goroutines(addr string) int {
	return int(gaugeValue(addr, "go_goroutines"))
}

// gaugeValue reads one unlabelled series from the gateway's Prometheus
// endpoint; -1 when it cannot.
func gaugeValue(addr, name string) float64 {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// machine describes the host for the results.
type machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	MemoryGiB  int64  `json:"memory_gib"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Note       string `json:"note"`
	// LoadBefore and LoadAfter are /proc/loadavg (1, 5, 15 min) at the
	// start and end of the run; OtherCores is the mean number of cores that
	// processes other than bench and its children kept busy while bench
	// measured (noise from outside the benchmark). StealCores is the mean
	// number of cores the hypervisor took from this virtual machine
	// meanwhile: time none of the benchmark's processes could run, which
	// slows every leg it falls in without showing in their CPU figures.
	LoadBefore string  `json:"loadavg_before"`
	LoadAfter  string  `json:"loadavg_after,omitempty"`
	OtherCores float64 `json:"other_processes_cores"`
	StealCores float64 `json:"steal_cores"`
}

func describeMachine() machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), LoadBefore: loadAverage()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				m.MemoryGiB = (kb + 512<<10) >> 20
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.Note = fmt.Sprintf("%d cores shared by the load generator, the mock upstream and the proxy under test; nothing is pinned", m.Cores)
	return m
}
