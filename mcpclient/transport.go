package mcpclient

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/config"
)

// inheritedEnv are the variables a stdio server inherits from the gateway;
// everything else (API keys above all) must be passed explicitly in env.
var inheritedEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "LANG", "LC_ALL", "TZ", "NODE_PATH"}

// transport returns a fresh transport for one connection attempt: a child
// process for command, Streamable HTTP for url.
func transport(c *config.MCPServer) mcp.Transport {
	if c.Command != "" {
		cmd := exec.Command(c.Command, c.Args...)
		// Never nil: a nil Env would inherit the gateway's whole environment.
		cmd.Env = make([]string, 0, len(inheritedEnv)+len(c.Env))
		for _, k := range inheritedEnv {
			if v, ok := os.LookupEnv(k); ok {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		for k, v := range c.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		isolate(cmd)
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	hc := &http.Client{
		Transport: headerRT{base: http.DefaultTransport, headers: c.Headers},
		// The configured headers (credentials) go only to the configured
		// endpoint: redirects are not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &mcp.StreamableClientTransport{Endpoint: c.URL, HTTPClient: hc, MaxRetries: 1}
}

// headerRT adds the configured headers (e.g. Authorization) to every request.
type headerRT struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	// traceparent of the tool call's span, when traced.
	otel.GetTextMapPropagator().Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return h.base.RoundTrip(r)
}
