// Package testproc builds the gateway binary and finds free loopback
// addresses for tests that run the gateway as its own OS process. For tests
// only.
package testproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
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
		root, err := moduleRoot()
		if err != nil {
			errBin = err
			return
		}
		if dir, errBin = os.MkdirTemp("", "llmgw-bin"); errBin != nil {
			return
		}
		bin = filepath.Join(dir, "gateway")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			errBin = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if errBin != nil {
		t.Fatal(errBin)
	}
	return bin
}

// Cleanup removes the binary Gateway built, if any.
func Cleanup() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// FreeAddr returns a loopback address that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", fmt.Errorf("testproc: no go.mod above the working directory")
		}
		d = p
	}
}
