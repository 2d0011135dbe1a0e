package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/observe"
)

// Load and memory bugs other gateways shipped; see toolcall_stream_test.go and
// observe/log_test.go.

// stuckSink is a log sink whose Write blocks until unblock; it counts the
// lines it finally receives and which of them are access-log lines.
type stuckSink struct {
	gate     chan struct{}
	once     sync.Once
	lines    atomic.Int64
	requests atomic.Int64
}

// Write counts every line of p: the logger batches the lines that queued up
// while the sink was stuck into one write.
func (s *stuckSink) Write(p []byte) (int, error) {
	<-s.gate
	for line := range bytes.Lines(p) {
		s.lines.Add(1)
		if gjson.GetBytes(line, "message").Str == "request" {
			s.requests.Add(1)
		}
	}
	return len(p), nil
}

func (s *stuckSink) unblock() { s.once.Do(func() { close(s.gate) }) }

// stuckLogGateway starts a gateway (baseConfig, info level) whose process
// logger is the production one (observe.NewLogger, JSON) writing to a sink
// that accepts nothing until unblock. The returned close unblocks the sink
// and flushes the logger.
func stuckLogGateway(t *testing.T) (*harness, *stuckSink, func()) {
	mock := mockllm.New(mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{Text: "ok"}), MaxRecorded: -1})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg, err := config.Parse([]byte(strings.ReplaceAll(strings.Replace(baseConfig, `log_level = "warn"`, `log_level = "info"`, 1), "{{MOCK}}", mockURL)))
	if err != nil {
		t.Fatal(err)
	}
	sink := &stuckSink{gate: make(chan struct{})}
	log, flush := observe.NewLogger("info", "json", sink)
	var once sync.Once
	closeLog := func() { once.Do(func() { sink.unblock(); flush() }) }
	t.Cleanup(closeLog)
	srv, ln := serveBuilt(t, cfg, log)
	rt := srv.Runtime()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		rt.Close()
	})
	return &harness{t: t, mock: mock, mockURL: mockURL, srv: srv, base: "http://" + ln.Addr().String() + "/v1"}, sink, closeLog
}

// hammer sends n chat requests (streamed every other time) from 16
// goroutines and fails the test if they do not all finish within a
// hang-sized limit.
func hammer(t *testing.T, h *harness, n int) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var next, failed atomic.Int64
	var first atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					body := fmt.Sprintf(`{"model":"gpt-x","stream":%v,"messages":[{"role":"user","content":"request %d"}]}`, i%2 == 0, i)
					resp, err := client.Post(h.base+"/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						failed.Add(1)
						first.CompareAndSwap(nil, err.Error())
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"ok"`)) {
						failed.Add(1)
						first.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, b))
					}
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second): // a hang detector, not a latency bound
		t.Fatalf("%d requests did not finish: the request path waits on the stuck log sink", n)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", failed.Load(), n, first.Load())
	}
}

// Pitfall: latency climbing past a few tens of requests per second because
// access logging (and spend writes) ran synchronously in the request path.
// Latency under load is a benchmark matter (bench/: the stream, sweep and
// passthrough scenarios compare the gateway with a bare proxy); this gateway
// has no spend records. What a test can decide is the cause: with the log
// sink stuck, requests must still complete, and the access-log lines they
// produced must have gone to that logger (so the test can tell).
func TestPitfall_SyncLoggingLatency(t *testing.T) {
	t.Parallel()
	h, sink, closeLog := stuckLogGateway(t)
	hammer(t, h, 200)
	if n := sink.lines.Load(); n != 0 {
		t.Fatalf("the stuck sink received %d lines", n)
	}
	closeLog()
	if n := sink.requests.Load(); n == 0 {
		t.Fatal("no access-log line reached the sink after it moved again: the test did not exercise the logger")
	}
}

// Pitfall: memory that only grows: unbounded in-process queues for logs
// (and spend records) when their sink fails. With the sink stuck, the
// gateway logs more access lines than the logger's ring holds (4096); once
// the sink moves, only about a ring's worth may come out: the rest were
// dropped, not queued. The memory bound itself is asserted in
// observe.TestLoggerNeverBlocksAndStaysBounded; this gateway has no spend
// records.
func TestPitfall_UnboundedLogQueue(t *testing.T) {
	t.Parallel()
	const n = 5000
	h, sink, closeLog := stuckLogGateway(t)
	hammer(t, h, n)
	closeLog()
	if got := sink.requests.Load(); got == 0 || got > 4096+64 {
		t.Fatalf("%d of %d access-log lines were written after the sink recovered: they were queued, not dropped", got, n)
	} else {
		t.Logf("%d of %d access-log lines written after the sink recovered, the rest dropped", got, n)
	}
}
