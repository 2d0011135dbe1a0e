package mcpclient

import (
	"bytes"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/observe"
)

// maxStderr bounds what the gateway keeps of a stdio server's standard
// error: its last lines, enough for the reason it did not start (a module
// not found, a traceback's end, a missing variable).
const maxStderr = 2 << 10

// stderrTail keeps the last maxStderr bytes a stdio server wrote to its
// standard error, for the log line of a connection that failed: without
// it, a server that cannot start says only that its pipe closed.
type stderrTail struct {
	mu  sync.Mutex
	b   []byte
	cut bool // b lost its start: it may begin inside a line (a secret)
}

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= maxStderr {
		t.b, t.cut = append(t.b[:0], p[len(p)-maxStderr:]...), true
		return len(p), nil
	}
	if over := len(t.b) + len(p) - maxStderr; over > 0 {
		t.b, t.cut = append(t.b[:0], t.b[over:]...), true
	}
	t.b = append(t.b, p...)
	return len(p), nil
}

// stderrOf returns what the stdio server of tr last wrote to its standard
// error, with the configured secrets masked (it may print its own
// environment), or "" for none or another transport.
func stderrOf(tr mcp.Transport) string {
	st, ok := tr.(*stdioTransport)
	if !ok {
		return ""
	}
	t, ok := st.cmd.Stderr.(*stderrTail)
	if !ok {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if t.cut {
		// From the first whole line: a secret cut at the start would be
		// a part no longer masked.
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		} else {
			b = nil
		}
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(observe.Secrets.Redact(b)), "\uFFFD"))
}
