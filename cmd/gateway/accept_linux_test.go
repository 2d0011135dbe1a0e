package main

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/gateway/internal/testproc"
)

// A process out of file descriptors keeps serving once some are free: an
// accept that fails with EMFILE is waited out. fasthttp ends Serve on any
// accept error but a timeout, and the gateway exited: anyone able to open
// connections (no key, no bytes) could stop it (an ingress probe did, with
// 700 connections under a limit of 600).
func TestOutOfDescriptorsKeepsServing(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	cmd, base := testproc.Start(t, bin, "../../config.toml")
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	pid := cmd.Process.Pid
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(fds) + 16)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 64 {
		c, err := net.DialTimeout("tcp", addr, time.Second) // the backlog takes those not accepted
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond) // the accepts fail meanwhile
	if st := procState(t, pid); st == "Z" || st == "" {
		t.Fatalf("the gateway exited while out of descriptors (%d connections open)", len(conns))
	}
	for _, c := range conns {
		_ = c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body, err := chat(addr, "demo", "")
		if err == nil && status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer once descriptors were free: %d %v %s", status, err, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// procState is the state letter of process pid ("" once it is gone).
func procState(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i > 0 && len(s) > i+2 {
		return s[i+2 : i+3]
	}
	t.Fatalf("stat %q", s)
	return ""
}
