// Package testproc builds the gateway binary and finds free loopback
// addresses for tests that run the gateway as its own OS process. For tests
// and the bench harness only.
package testproc

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
// the environment's cgo setting, as `go run` and `go build` there do, so
// that the packages they compiled already are reused from the build cache.
func Build(root, out string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, pkgs...)...)
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
func Start(t testing.TB, bin, path string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, "-config", path, "-listen", "127.0.0.1:0", "-log-level", "info", "-log-format", "json")
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
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
