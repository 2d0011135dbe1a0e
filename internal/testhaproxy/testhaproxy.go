// Package testhaproxy runs a real HAProxy (the Debian haproxy package) on a
// loopback port in front of gateway replicas for a test, and skips the test
// (saying why) when haproxy is not installed. .ci/run installs it. For
// tests only.
package testhaproxy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
)

// ServedBy is the response header naming the backend server (r0, r1, ...,
// in the order of the addresses given to Start) that answered.
const ServedBy = "X-Served-By"

// Start runs haproxy in front of the replicas at backends (host:port),
// round robin, health-checking /readyz every 200 ms, and returns its base
// URL (".../v1"). A connection refused by a replica is retried on another.
// The process is killed when the test ends.
func Start(t testing.TB, backends []string) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed: skipping (install haproxy to run this test)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4096
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch 1
frontend llm
    bind %s
    default_backend gateways
backend gateways
    balance roundrobin
    option httpchk GET /readyz
    http-response set-header %s %%s
    default-server check inter 200ms fall 1 rise 1
`, addr, ServedBy)
	for i, be := range backends {
		fmt.Fprintf(&b, "    server r%d %s\n", i, be)
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := testproc.WaitListening(addr, 10*time.Second, nil); err != nil {
		t.Fatalf("haproxy: %v", err)
	}
	return "http://" + addr + "/v1"
}
