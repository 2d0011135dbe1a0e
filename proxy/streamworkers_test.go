package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// TestStreamGoroutinesAreKept: the goroutine a stream is handed to (and
// that serves its connection's next request) is kept for the next stream,
// not started anew for each: a new goroutine grows its stack again for
// every request after a stream. Over sequential streams on one
// connection, fasthttp starts one goroutine per hand-over (Hijack); the
// gateway's own must come from the pool. Not parallel: it counts the
// goroutines the whole process creates.
func TestStreamGoroutinesAreKept(t *testing.T) {
	addr, srv := panicServer(t, pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
			if n++; n > 2 {
				return nil, io.EOF
			}
			return []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`), nil
		}, CloseFunc: func() {}}}, nil
	}))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	stream := func() {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		var got strings.Builder
		for !strings.HasSuffix(got.String(), "0\r\n\r\n") {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream: %v after %q", err, got.String())
			}
			got.WriteString(line)
		}
		if !strings.Contains(got.String(), "data: [DONE]") {
			t.Fatalf("stream %q", got.String())
		}
	}
	stream() // the first request: fasthttp's worker, then the first stream goroutine
	stream()
	const streams = 20
	before := goroutinesCreated()
	handovers := srv.handovers.Load()
	for range streams {
		stream()
	}
	if n := srv.handovers.Load() - handovers; n != streams {
		t.Fatalf("%d streams handed over, want %d", n, streams)
	}
	if created := goroutinesCreated() - before; created > streams*3/2 {
		t.Fatalf("%d goroutines started for %d streams: the stream goroutines are not kept", created, streams)
	}
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestIdleWorkersLetGo: once its streams are handed over, a burst of
// stream requests leaves no idle fasthttp workers behind for long. Each
// stream's request holds a worker until its first content (which a model
// may take seconds to send); after the hand-over the worker idles, and an
// idle worker keeps a stack grown to the request path's depth. With
// fasthttp's default of 10 s, a burst of N streams held 2N goroutines for
// that long. Not parallel: it counts the process's goroutines.
func TestIdleWorkersLetGo(t *testing.T) {
	const streams = 30
	gate := make(chan struct{})
	done := make(chan struct{})
	var arrived atomic.Int32
	addr, srv := panicServer(t, pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		// Every request waits in its own worker until all have arrived.
		arrived.Add(1)
		<-gate
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
			if n++; n > 1 {
				<-done
				return nil, io.EOF
			}
			return []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`), nil
		}, CloseFunc: func() {}}}, nil
	}))
	defer func() {
		close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	base := runtime.NumGoroutine()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for range streams {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, func() bool { return arrived.Load() == streams })
	close(gate)
	waitFor(t, 5*time.Second, func() bool { return srv.handovers.Load() >= streams })
	// One goroutine per open stream, and a few to spare; the idle workers
	// must be gone within a second (fasthttp looks for them every
	// idleWorkerTime and lets go of those idle that long), not after the
	// 10 s fasthttp keeps them by default, nor the 1 s the gateway kept
	// them before.
	const slack = 5
	deadline := time.Now().Add(900 * time.Millisecond) // about 200 ms unloaded
	for runtime.NumGoroutine()-base > streams+slack {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines over the %d before, with %d streams open: idle workers are kept", runtime.NumGoroutine()-base, base, streams)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
