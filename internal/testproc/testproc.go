// Package testproc builds the gateway binary, finds free loopback
// addresses for tests that run the gateway as its own OS process, and reads
// a streamed answer off the wire chunk by chunk. For tests and the bench
// harness only.
package testproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/internal/modroot"
)

var (
	once   sync.Once
	dir    string
	bin    string
	errBin error
)

// Gateway compiles ./cmd/gateway once per test binary and returns its path.
// Call Cleanup from TestMain to remove it.
func Gateway(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		root, err := modroot.Dir()
		if err != nil {
			errBin = err
			return
		}
		if dir, errBin = os.MkdirTemp("", "llmgw-bin"); errBin != nil {
			return
		}
		bin = filepath.Join(dir, "gateway")
		errBin = Build(root, bin, "./cmd/gateway")
	})
	if errBin != nil {
		t.Fatal(errBin)
	}
	return bin
}

// Build compiles the packages pkgs of the module at root with one go build
// (the toolchain builds them in parallel) into out: a file for one package,
// or a directory (ending in a path separator) for several. It builds with
// the environment's cgo setting and -trimpath: the compiled packages then
// do not depend on where the checkout is, so a fresh clone of code built
// before (a CI run, another worktree) reuses them from the build cache
// instead of compiling the module again (about 40 s on 2 cores).
func Build(root, out string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-o", out}, pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}

// Cleanup removes the binary Gateway built, if any.
func Cleanup() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// Loopback returns a loopback address (host:port) that was free a moment
// ago: a process started on it may still find it taken.
func Loopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WaitListening returns nil once addr accepts a TCP connection; an error
// when exited (the process's end, may be nil) closes first or when timeout
// passes.
func WaitListening(addr string, timeout time.Duration, exited <-chan struct{}) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("the process exited before it listened on " + addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listened on %s within %s", addr, timeout)
		}
	}
}

// FreeAddr is Loopback for a test: it fails t when no port is free.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Start runs the gateway binary with the config file at path on a port the
// kernel picks (127.0.0.1:0), and returns the running command and the
// gateway's base URL (".../v1") once it has logged the address it listens
// on. Choosing the port this way, instead of probing for a free one first,
// means no other process can take it in between (a health check could then
// reach that process instead). The process is killed when the test ends.
// args are added to the command line. The gateway runs without the test's
// GOGC and GOMEMLIMIT: its config decides how it collects.
func Start(t testing.TB, bin, path string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	return StartThen(t, bin, path, nil, args...)
}

// StartThen is Start, calling started (when not nil) with the process as
// soon as it runs, before it listens: to signal a gateway that starts.
func StartThen(t testing.TB, bin, path string, started func(*exec.Cmd), args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-config", path, "-listen", "127.0.0.1:0", "-log-level", "info", "-log-format", "json"}, args...)...)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=")
	})
	cmd.Env = append(env, "OPENAI_API_KEY=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	if started != nil {
		started(cmd)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Bytes()
			if testing.Verbose() {
				fmt.Fprintln(os.Stderr, string(line))
			}
			if !sent && gjson.GetBytes(line, "message").Str == "gateway started" {
				found <- gjson.GetBytes(line, "listen").Str
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case addr, ok := <-found:
		if !ok || addr == "" {
			t.Fatal("the gateway exited before it listened")
		}
		return cmd, "http://" + addr + "/v1"
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not start within 30 s")
	}
	return nil, ""
}

// StreamChunks sends body as a chat completion request to the gateway at
// addr (host:port) over a plain TCP connection and calls chunk with the
// payload of each HTTP chunk of the answer as it arrives: each chunk is one
// write (one flush) of the gateway. The answer must be a chunked 200.
func StreamChunks(t testing.TB, addr, body string, chunk func(payload []byte)) {
	t.Helper()
	StreamChunksAt(t, addr, "/v1/chat/completions", body, chunk)
}

// StreamChunksAt is StreamChunks for a POST to path.
func StreamChunksAt(t testing.TB, addr, path, body string, chunk func(payload []byte)) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("status %q: %v", status, err)
	}
	chunked := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
		if strings.EqualFold(strings.TrimSpace(line), "Transfer-Encoding: chunked") {
			chunked = true
		}
	}
	if !chunked {
		t.Fatal("the stream is not chunked")
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size %q", line)
		}
		if n == 0 {
			return
		}
		p := make([]byte, n+2)
		if _, err := io.ReadFull(br, p); err != nil {
			t.Fatal(err)
		}
		chunk(p[:n])
	}
}
