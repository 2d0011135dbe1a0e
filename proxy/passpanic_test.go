package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// panicPolicy is meterPolicy whose Call panics in Charge (a bug in the
// metering), the first times: Charge runs in the pass-through's body copy,
// which fasthttp runs on a goroutine of its own (SetBodyStreamWriter), or
// on the hijacked connection's for an HTTP/1.0 client.
type panicPolicy struct {
	meterPolicy
	panics atomic.Int64 // how many Charges are still to panic
	ended  atomic.Int64
}

func (p *panicPolicy) Limit(*pipeline.Request) (Call, error) { return p, nil }
func (p *panicPolicy) End()                                  { p.ended.Add(1) }
func (p *panicPolicy) Charge(wire.ChatUsage, bool) {
	if p.panics.Add(-1) >= 0 {
		panic("a bug in the pass-through's metering")
	}
}

// TestPassthroughCopyPanicIsRecovered: a panic in a pass-through answer's
// body copy (here its metering, where an upstream's negative usage made
// Prometheus panic) ends that answer, cut (no clean final chunk, or the
// connection closed for an HTTP/1.0 client), and is logged and counted
// (gateway_panics_total); the request is finished (its slot freed), the
// process and the next request are not affected. Without the recovery the
// panic ends the test binary.
func TestPassthroughCopyPanicIsRecovered(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"embedding":[0.5]}],"usage":{"prompt_tokens":-3,"total_tokens":-3}}`)
	}))
	t.Cleanup(up.Close)
	cfg, u := testUpstream(t, up.URL+"/v1", "")
	pol := &panicPolicy{}
	pol.panics.Store(2)
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Upstream: u, Policy: pol}, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	before := testutil.ToFloat64(panics)

	body := `{"model":"m","input":"x"}`
	send := func(proto string) []byte {
		t.Helper()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST /v1/embeddings %s\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", proto, len(body), body)
		got, err := io.ReadAll(bufio.NewReader(conn)) // ends when the gateway closes the connection
		if err != nil {
			t.Fatalf("%s: the answer did not end with its connection: %v (read %q)", proto, err, got)
		}
		return got
	}
	// HTTP/1.1: fasthttp's stream-writer goroutine.
	if got := send("HTTP/1.1"); bytes.HasSuffix(got, []byte("0\r\n\r\n")) {
		t.Fatalf("the answer whose copy panicked ended cleanly: %q", got)
	}
	// HTTP/1.0: the hijacked connection.
	send("HTTP/1.0")
	if n := testutil.ToFloat64(panics) - before; n != 2 {
		t.Fatalf("gateway_panics_total rose by %v, want 2", n)
	}
	// The gateway is still up, and the next answer whole.
	if got := send("HTTP/1.1"); !bytes.HasSuffix(got, []byte("0\r\n\r\n")) || !strings.Contains(string(got), `"embedding":[0.5]`) {
		t.Fatalf("the answer after the panics: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown after the panics: %v (a request was never finished)", err)
	}
	if n := pol.ended.Load(); n != 3 {
		t.Fatalf("%d calls ended, want 3: a request whose copy panicked keeps its slot", n)
	}
}
