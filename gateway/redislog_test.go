package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testredis"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/proxy"
)

// TestRedisOutageLogsThroughZerologRateLimited: while Redis is down, every
// request makes go-redis report a failed dial. Those reports must reach the
// gateway's logger (JSON, like every other line), a bounded number of them,
// and nothing may go to the process's stderr on its own.
//
// Not parallel: go-redis's logger and the process's stderr are global, and
// a test that runs beside others would capture their output too.
func TestRedisOutageLogsThroughZerologRateLimited(t *testing.T) {
	rs := testredis.Start(t)

	mock := mockllm.New(mockllm.Options{Respond: numbered})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg, err := config.Parse([]byte(strings.ReplaceAll(cacheConfig, "{{MOCK}}", mockURL) +
		"store = \"redis\"\n[redis]\naddr = \"" + rs.Addr() + "\"\ntimeout = \"100ms\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	sink := &lockedBuffer{}
	log := zerolog.New(sink).Level(zerolog.WarnLevel)
	srv, ln := serveBuilt(t, cfg, log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		srv.Runtime().Close()
	})
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	chat := func() int {
		resp, err := http.Post(url, "application/json",
			strings.NewReader(`{"model":"gpt-x","temperature":0,"messages":[{"role":"user","content":"q"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := chat(); s != http.StatusOK {
		t.Fatalf("status %d with Redis up", s)
	}

	suppressed0 := counterValue(t, redisLinesSuppressed)
	stderr := captureStderr(t)
	rs.Stop()
	requests := 0
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); requests++ {
		if s := chat(); s != http.StatusOK {
			t.Fatalf("status %d with Redis down: the cache must fail open", s)
		}
	}
	leaked := stderr()
	suppressed := counterValue(t, redisLinesSuppressed) - suppressed0

	var ours int
	for _, line := range strings.Split(strings.TrimSpace(sink.String()), "\n") {
		if strings.Contains(line, `"source":"go-redis"`) {
			ours++
		}
	}
	t.Logf("%d requests during the outage: %d go-redis lines logged, %v suppressed", requests, ours, suppressed)
	if strings.Contains(leaked, "redis") {
		t.Errorf("go-redis wrote to stderr on its own:\n%s", leaked)
	}
	if ours+int(suppressed) == 0 {
		t.Errorf("no go-redis message reached the gateway's logger in a %d-request outage:\n%s", requests, sink.String())
	}
	if ours > redisLogBurst {
		t.Errorf("%d go-redis lines in 2s, want at most %d:\n%s", ours, redisLogBurst, sink.String())
	}
}

func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestTraceExportFailuresLogThroughZerolog: with the trace collector down,
// each failed export is reported by OpenTelemetry's global error handler,
// which wrote to stderr on its own ("traces export: ... connection
// refused") among the JSON lines. The reports reach the gateway's logger,
// rate limited, and nothing goes to stderr.
//
// Not parallel: the error handler and stderr are the process's.
func TestTraceExportFailuresLogThroughZerolog(t *testing.T) {
	mock := mockllm.New(mockllm.Options{Respond: numbered})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	collector := dead.Addr().String()
	_ = dead.Close() // nothing listens there now
	cfg, err := config.Parse([]byte(strings.ReplaceAll(cacheConfig, "{{MOCK}}", mockURL) +
		"\n[tracing]\nenabled = true\nendpoint = \"http://" + collector + "\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	sink := &lockedBuffer{}
	log := zerolog.New(sink).Level(zerolog.WarnLevel)
	stderr := captureStderr(t)
	srv, ln := serveBuilt(t, cfg, log)
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	for range 3 {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"q"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// The batch goes out within a second; its export fails at once.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(sink.String(), `"source":"otel"`); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	srv.Runtime().Close()
	leaked := stderr()
	if strings.Contains(leaked, "export") {
		t.Errorf("OpenTelemetry wrote to stderr on its own:\n%s", leaked)
	}
	if !strings.Contains(sink.String(), `"source":"otel"`) {
		t.Errorf("no failed export reached the gateway's logger:\n%s", sink.String())
	}
}

// serveBuilt builds cfg's runtime with log and serves it on a loopback
// listener that remembers its connections (connsListener); the caller
// shuts the server down, the test's end closes the runtime.
func serveBuilt(t *testing.T, cfg *config.Config, log zerolog.Logger) (*proxy.Server, *connsListener) {
	t.Helper()
	rt, err := Build(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	srv := proxy.NewServer(rt, log)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &connsListener{Listener: inner}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln
}
