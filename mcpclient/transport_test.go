package mcpclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/config"
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
	tr, ok := transport(&config.MCPServer{Command: "true"}).(*mcp.CommandTransport)
	if !ok {
		t.Fatal("not a command transport")
	}
	if tr.Command.Env == nil {
		t.Fatal("nil Env: the child would inherit everything")
	}
	for _, kv := range tr.Command.Env {
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
