package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
)

// binaries are the three programs bench runs as children.
type binaries struct {
	dir, gateway, mock, floor string
}

// build compiles the gateway, the bench mock and the floor proxy into a temp
// dir.
func build(repo string) (*binaries, error) {
	dir, err := os.MkdirTemp("", "llmgw-bench-")
	if err != nil {
		return nil, err
	}
	if err := testproc.Build(repo, dir+string(os.PathSeparator), "./cmd/gateway", "./cmd/mockllm", "./bench/floor"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &binaries{
		dir:     dir,
		gateway: filepath.Join(dir, "gateway"),
		mock:    filepath.Join(dir, "mockllm"),
		floor:   filepath.Join(dir, "floor"),
	}, nil
}

// child is one running process.
type child struct {
	name string
	addr string // host:port it listens on
	cmd  *exec.Cmd
	done chan struct{}
	gc   *gcLog // its garbage collections (a Go program's, from its log)
}

// Pid is the child's process id.
func (c *child) Pid() int { return c.cmd.Process.Pid }

// procs owns every child so that they all die with bench: on return, on error
// and on a signal (Pdeathsig covers a bench that is killed outright). It is
// safe for concurrent use.
type procs struct {
	logDir string
	mu     sync.Mutex
	kids   []*child
}

// start runs bin with args (which may contain "{addr}", replaced by a free
// loopback address, or "{port}", its port) and waits until the address
// accepts connections.
func (p *procs) start(name, bin string, args ...string) (*child, error) {
	addr, err := testproc.Loopback()
	if err != nil {
		return nil, err
	}
	return p.startAt(name, addr, bin, args...)
}

// startAt is start on an address chosen by the caller (for a program that
// reads its address from a file, such as haproxy).
func (p *procs) startAt(name, addr, bin string, args ...string) (*child, error) {
	full := make([]string, len(args))
	for i, a := range args {
		switch a {
		case "{addr}":
			a = addr
		case "{port}":
			_, a, _ = net.SplitHostPort(addr)
		}
		full[i] = a
	}
	logf, err := os.Create(filepath.Join(p.logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, full...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = withGCTrace(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, addr: addr, cmd: cmd, done: make(chan struct{}), gc: &gcLog{path: logf.Name()}}
	go func() { _ = cmd.Wait(); logf.Close(); close(c.done) }()
	p.mu.Lock()
	p.kids = append(p.kids, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return nil, fmt.Errorf("%s exited at start (see %s)", name, logf.Name())
	default:
	}
	if err := testproc.WaitListening(addr, 15*time.Second, c.done); err != nil {
		p.stop(c)
		return nil, fmt.Errorf("%s: %w (see %s)", name, err, logf.Name())
	}
	return c, nil
}

// stop ends one child: SIGTERM, then SIGKILL after ten seconds (a gateway
// run with -profile writes its profiles while it shuts down).
func (p *procs) stop(c *child) {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	p.mu.Lock()
	for i, k := range p.kids {
		if k == c {
			p.kids = append(p.kids[:i], p.kids[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
}

// stopAll ends every child still running.
func (p *procs) stopAll() {
	p.mu.Lock()
	kids := append([]*child(nil), p.kids...)
	p.mu.Unlock()
	for _, c := range kids {
		p.stop(c)
	}
}

// raiseFileLimit lifts RLIMIT_NOFILE as far as allowed (children inherit it)
// and returns the soft limit in force.
func raiseFileLimit(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	// Root may raise the hard limit too; others get up to the hard limit.
	try := syscall.Rlimit{Cur: want, Max: max(want, lim.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &try); err == nil {
		return want, nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, errors.Join(errors.New("setrlimit"), err)
	}
	return lim.Cur, nil
}

// withGCTrace returns env with gctrace=1 added to GODEBUG (gctrace.go).
func withGCTrace(env []string) []string {
	out := make([]string, 0, len(env)+1)
	godebug := "gctrace=1"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			if v != "" {
				godebug = v + ",gctrace=1"
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GODEBUG="+godebug)
}
