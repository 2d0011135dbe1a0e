package mcpclient

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
)

// TestWedgedStdioServerIsReopened: calls to a stdio server that stopped
// reading its stdin return at their deadline (TestStuckStdioServer), but
// each one left a goroutine blocked in the SDK's write, holding its
// arguments, for as long as the server lived: the keep-alive ping waits on
// the same write lock, so the server stayed "up" and every later call
// leaked one more. A call still blocked StuckGrace after its deadline now
// ends the connection (the process is killed, which fails the blocked
// writes) and the server is connected again. Not parallel: it counts the
// package's call goroutines.
func TestWedgedStdioServerIsReopened(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := Start(Options{
		Servers:    defaulted(config.MCPServer{Name: "stuck", Command: exe, Env: map[string]string{stuckServerEnv: "1"}}),
		Logger:     testLogger(t),
		StuckGrace: 200 * time.Millisecond,
	})
	defer m.Close()
	if tools := toolNames(m); tools != "stuck" {
		t.Fatalf("tools %q (status %v)", tools, m.Status())
	}
	args := []byte(`{"pad":"` + strings.Repeat("x", 1<<20) + `"}`) // over the pipe's buffer
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, _, err := m.Call(ctx, "stuck", args)
		cancel()
		if err == nil { // its deadline, or the connection's end (EOF, unavailable) once it is found wedged
			t.Fatal("a call to the wedged server succeeded")
		}
	}
	waitFor(t, "the calls blocked on the wedged server to end", 15*time.Second, nil, func() bool {
		return blockedCalls() == 0
	})
	waitFor(t, "the server to be connected again", 15*time.Second, nil, func() bool {
		return toolNames(m) == "stuck"
	})
}

// blockedCalls counts the goroutines still in a callTool's SDK call.
func blockedCalls() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "mcpclient.bounded[")
}
