// Package testredis runs a real redis-server on a free loopback port for a
// test, and skips the test (saying why) when redis-server is not installed.
// StartCluster and StartSentinel run a Redis Cluster and a Sentinel setup
// the same way. .ci/run installs what they need. For tests only.
package testredis

import (
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process; Stop and Start kill and restart it on
// the same port.
type Server struct {
	t    testing.TB
	bin  string
	Port int
	conf string   // a config file, first on the command line; "" for none
	tls  bool     // Port is a TLS port (the plain one is off)
	args []string // after the port and the common flags
	cmd  *exec.Cmd
}

// Start runs a redis-server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := newServer(t, lookPath(t, "redis-server"))
	s.Start()
	return s
}

// lookPath finds bin or skips the test.
func lookPath(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s not installed: skipping (install it to run this test)", bin)
	}
	return p
}

// newServer picks a port for a process of bin (not started) that is killed
// when the test ends.
func newServer(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	// Its own directory: a master writes dump.rdb there to sync a replica.
	s := &Server{t: t, bin: bin, Port: FreePort(t), args: append([]string{"--dir", t.TempDir()}, args...)}
	t.Cleanup(s.Stop)
	return s
}

// FreePort returns a loopback port that was free a moment ago, chosen
// below the kernel's ephemeral range. A port from that range, freed by a
// probe, can be taken by any outgoing connection of the tests running
// beside it before redis-server binds it (a cluster node that could not
// bind failed a test once); a port below the range is only ever taken by
// a listener that asks for it by number.
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := 10000, ephemeralStart()
	for range 100 {
		if hi-lo < 1000 {
			break
		}
		p := lo + rand.IntN(hi-lo)
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			_ = ln.Close()
			return p
		}
	}
	_, port, _ := net.SplitHostPort(testproc.FreeAddr(t))
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Start launches the process and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.launch()
	s.wait()
}

// launch starts the process without waiting, so that several start together.
func (s *Server) launch() {
	s.t.Helper()
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	if s.tls {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.Port))
	} else {
		args = append(args, "--port", strconv.Itoa(s.Port))
	}
	args = append(args, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning")
	args = append(args, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.bin, err)
	}
}

// wait returns once the port accepts connections.
func (s *Server) wait() {
	s.t.Helper()
	if err := testproc.WaitListening(s.Addr(), 10*time.Second, nil); err != nil {
		s.t.Fatalf("%s: %v", s.bin, err)
	}
}

// Stop kills the process (as a crash would).
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Client returns a client of s that fails fast (no retries, a 200 ms
// dial), closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
