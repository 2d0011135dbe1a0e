package mcpclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
)

// A stdio server never inherits the gateway's environment (API keys),
// even when none of the safe variables is set.
func TestStdioEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-should-not-leak")
	for _, k := range inheritedEnv { // none of the safe variables set
		if v, ok := os.LookupEnv(k); ok {
			t.Cleanup(func() { _ = os.Setenv(k, v) })
			_ = os.Unsetenv(k)
		}
	}
	tr, ok := transport(&config.MCPServer{Command: "true"}).(*stdioTransport)
	if !ok {
		t.Fatal("not a command transport")
	}
	if tr.cmd.Env == nil {
		t.Fatal("nil Env: the child would inherit everything")
	}
	for _, kv := range tr.cmd.Env {
		if strings.HasPrefix(kv, "OPENAI_API_KEY=") {
			t.Fatalf("secret passed to the MCP child: %q", kv)
		}
	}
}

// Configured headers (credentials) never follow a redirect to another host.
func TestHTTPHeadersDoNotFollowRedirects(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	tr, ok := transport(&config.MCPServer{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer secret"}}).(*mcp.StreamableClientTransport)
	if !ok {
		t.Fatal("not a streamable transport")
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, strings.NewReader("{}"))
	resp, err := tr.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case a := <-got:
		t.Fatalf("the redirect target received Authorization %q", a)
	default:
	}
}

// A stdio server that fails to start is logged with the last of what it
// wrote to its standard error (node's "Cannot find module", a traceback),
// its secrets masked: the log said only that the pipe closed.
func TestStdioStartFailureLogsItsStderr(t *testing.T) {
	t.Parallel()
	const secret = "sk-stderr-tail-secret-42"
	observe.Secrets.Add(secret)
	lines := make(logLines, 64)
	m := Start(Options{Servers: defaulted(config.MCPServer{Name: "broken", Command: "sh",
		Args: []string{"-c", "echo 'Error: Cannot find module /srv/mcp.mjs' >&2; echo 'key " + secret + "' >&2; exit 1"}}),
		MaxBackoff: time.Hour, Logger: zerolog.New(lines)})
	defer m.Close()
	for {
		select {
		case line := <-lines:
			if !strings.Contains(line, "connect failed") {
				continue
			}
			if !strings.Contains(line, "Cannot find module /srv/mcp.mjs") || strings.Contains(line, secret) {
				t.Fatalf("log: %s", line)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("no log line for the failed start")
		}
	}
}

// logLines is a log writer that hands each line to the test (a full
// channel holds the logger up: size it for the lines expected).
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}

// The kept tail is bounded, whatever the server writes.
func TestStderrTailBound(t *testing.T) {
	t.Parallel()
	var tail stderrTail
	for i := range 3000 {
		_, _ = tail.Write([]byte(strings.Repeat("x", i%7) + "\n"))
	}
	_, _ = tail.Write([]byte(strings.Repeat("y", 3*maxStderr) + "end"))
	if len(tail.b) != maxStderr || !strings.HasSuffix(string(tail.b), "yend") {
		t.Fatalf("%d bytes kept, ending %q", len(tail.b), tail.b[len(tail.b)-8:])
	}
	// What is shown begins at a whole line: the kept bytes may begin
	// inside a secret, whose end alone would not be masked.
	var cut stderrTail
	_, _ = cut.Write([]byte("key sk-stderr-cut-secret-0123456789\nlast line\n"))
	_, _ = cut.Write([]byte(strings.Repeat("z", maxStderr-30) + "\nthe end\n"))
	tr := &stdioTransport{cmd: &exec.Cmd{Stderr: &cut}}
	if got := stderrOf(tr); strings.Contains(got, "0123456789") || !strings.HasPrefix(got, "last line\n") || !strings.HasSuffix(got, "the end") {
		t.Fatalf("shown %.80q", got)
	}
}
