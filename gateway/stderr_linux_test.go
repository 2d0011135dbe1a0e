package gateway

import (
	"io"
	"os"
	"syscall"
	"testing"
)

// captureStderr points the process's file descriptor 2 at a pipe, so that
// even writers that hold their own *os.File for stderr (go-redis's default
// logger does) are captured. The returned func restores fd 2, copies what
// was captured to the real stderr (a race report must not be lost) and
// returns it. The caller must not run in parallel with other tests.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(w.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	restored := false
	restore := func() string {
		if restored {
			return ""
		}
		restored = true
		_ = syscall.Dup3(saved, 2, 0)
		_ = syscall.Close(saved)
		_ = w.Close()
		out := <-done
		_ = r.Close()
		_, _ = os.Stderr.WriteString(out)
		return out
	}
	t.Cleanup(func() { restore() })
	return restore
}
