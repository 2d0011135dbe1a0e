// Package testredis runs a real redis-server on a free loopback port for a
// test, and skips the test (saying why) when redis-server is not installed.
// .ci/run installs it. For tests only.
package testredis

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Server is one redis-server process; Stop and Start kill and restart it on
// the same port.
type Server struct {
	t    testing.TB
	bin  string
	Port int
	cmd  *exec.Cmd
}

// Start runs a redis-server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed: skipping (install redis-server to run this test)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &Server{t: t, bin: bin, Port: port}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Start launches the process and waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond); err == nil {
			_ = c.Close()
			return
		}
	}
	s.t.Fatal("redis-server did not start")
}

// Stop kills the process (as a crash would).
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}
