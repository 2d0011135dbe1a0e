package mcpclient

import (
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testmetrics"
)

// A server's up and tools series stay while any Manager (the runtime a
// reload built, or the one it replaces) runs it, and go with the last: a
// server a reload removed does not show up = 1 for good.
func TestServerSeriesGoWithTheLastManager(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const name = "series-stdio"
	start := func() *Manager {
		m := Start(Options{
			Servers: defaulted(config.MCPServer{Name: name, Command: exe, Env: map[string]string{answersServerEnv: "1"}}),
			Logger:  testLogger(t),
		})
		waitFor(t, "the server's tools", 10*time.Second, nil, func() bool { return toolNames(m) != "" })
		return m
	}
	old := start()
	if got := testutil.ToFloat64(metricUp.WithLabelValues(name)); got != 1 || !hasSeries(t, name) {
		t.Fatalf("up %v", got)
	}
	next := start()
	old.Close()
	if got := testutil.ToFloat64(metricUp.WithLabelValues(name)); got != 1 {
		t.Fatalf("after the old Manager closed, up %v; want the new one's 1", got)
	}
	next.Close()
	if hasSeries(t, name) {
		t.Fatal("the up or tools series stayed after the last Manager closed")
	}
}

// hasSeries reports whether gateway_mcp_server_up or _tools has a series
// for server.
func hasSeries(t *testing.T, server string) bool {
	t.Helper()
	l := map[string]string{"server": server}
	return testmetrics.HasSeries(t, "gateway_mcp_server_up", l) || testmetrics.HasSeries(t, "gateway_mcp_server_tools", l)
}
