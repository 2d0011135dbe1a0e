package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
)

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// accessLines counts the access-log lines of request id.
// accessLine returns the access-log line of request id ("" if none).
func (l *lockedBuffer) accessLine(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range bytes.Split(l.b.Bytes(), []byte("\n")) {
		if gjson.GetBytes(line, "message").Str == "request" && gjson.GetBytes(line, "request_id").Str == id {
			return string(line)
		}
	}
	return ""
}

func (l *lockedBuffer) accessLines(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range bytes.Split(l.b.Bytes(), []byte("\n")) {
		if gjson.GetBytes(line, "message").Str == "request" && gjson.GetBytes(line, "request_id").Str == id {
			n++
		}
	}
	return n
}

// requestCount sums gateway_requests_total over every label set.
func requestCount(t *testing.T) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 256)
	go func() { requestsTotal.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}

// finishGateway serves a gateway on loopback TCP whose chat pipeline is
// chat and whose pass-through provider answers every request with
// "upstream-body". It returns the server, the runtime, the log and the
// gateway's address.
func finishGateway(t *testing.T, chat pipeline.HandlerFunc) (*Server, *Runtime, *lockedBuffer, string) {
	t.Helper()
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString("upstream-body")
	})
	cfg, u := testUpstream(t, base, "")
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	rt := &Runtime{Config: cfg, Routes: routes, Chat: chat, Upstream: u}
	logs := &lockedBuffer{}
	srv := NewServer(rt, zerolog.New(logs).Level(zerolog.InfoLevel))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv, rt, logs, ln.Addr().String()
}

// TestEveryRequestFinishesOnce sends one request of each kind (chat JSON
// and stream, pass-through, models, operator routes, errors of each route,
// clients that leave) and checks that each counts once in
// gateway_requests_total, logs one access line, and leaves nothing in
// flight, and that Drain returns as soon as the last request ends. Not
// parallel: it reads the process-wide request counter.
func TestEveryRequestFinishesOnce(t *testing.T) {
	// release["slow-N"] lets the "slow-N" request end: one per trial of
	// the drain subtest.
	release := map[string]chan struct{}{}
	for i := range drainTrials {
		release["slow-"+strconv.Itoa(i)] = make(chan struct{})
	}
	chat := func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		content := gjson.GetBytes(r.Body, "messages.0.content").Str
		switch content {
		case "fail":
			return nil, errors.New("boom")
		case "hold": // until the client leaves (the request is cancelled)
			<-ctx.Done()
			return nil, ctx.Err()
		case "stream-hold": // a stream that ends when the client leaves
			return &pipeline.Response{Stream: &pipeline.StreamFunc{
				NextFunc: func() ([]byte, error) {
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(5 * time.Millisecond):
						return []byte(`{"id":"c","object":"chat.completion.chunk","choices":[]}`), nil
					}
				},
				CloseFunc: func() {},
			}}, nil
		case "stream-fail":
			n := 0
			return &pipeline.Response{Stream: &pipeline.StreamFunc{
				NextFunc: func() ([]byte, error) {
					if n++; n > 1 {
						return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Err: io.ErrUnexpectedEOF}
					}
					return []byte(`{"id":"c","object":"chat.completion.chunk","choices":[]}`), nil
				},
				CloseFunc: func() {},
			}}, nil
		default:
			if c, ok := release[content]; ok {
				<-c
			}
		}
		if r.Stream {
			n := 0
			return &pipeline.Response{Stream: &pipeline.StreamFunc{
				NextFunc: func() ([]byte, error) {
					if n++; n > 2 {
						return nil, io.EOF
					}
					return []byte(`{"id":"c","object":"chat.completion.chunk","choices":[]}`), nil
				},
				CloseFunc: func() {},
			}}, nil
		}
		return &pipeline.Response{Body: []byte(`{"id":"c","object":"chat.completion","usage":{"prompt_tokens":1}}`)}, nil
	}
	srv, rt, logs, addr := finishGateway(t, chat)
	body := func(content string, stream bool) string {
		s := `{"model":"m","messages":[{"role":"user","content":"` + content + `"}]`
		if stream {
			s += `,"stream":true`
		}
		return s + "}"
	}
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		leave  bool   // the client reads the headers (or nothing) and leaves
		status int    // 0: not checked (the client left)
		raw    string // the request's bytes, for one fasthttp cannot or will not read
	}{
		{name: "chat json", method: "POST", path: "/v1/chat/completions", body: body("hi", false), status: 200},
		{name: "chat stream", method: "POST", path: "/v1/chat/completions", body: body("hi", true), status: 200},
		{name: "chat bad body", method: "POST", path: "/v1/chat/completions", body: "{", status: 400},
		{name: "chat unknown model", method: "POST", path: "/v1/chat/completions", body: `{"model":"x","messages":[{"role":"user","content":"a"}]}`, status: 404},
		{name: "chat pipeline error", method: "POST", path: "/v1/chat/completions", body: body("fail", false), status: 500},
		{name: "chat stream error", method: "POST", path: "/v1/chat/completions", body: body("stream-fail", true), status: 200},
		{name: "chat wrong method", method: "GET", path: "/v1/chat/completions", status: 405},
		{name: "chat client gone", method: "POST", path: "/v1/chat/completions", body: body("hold", false), leave: true},
		{name: "chat stream client gone", method: "POST", path: "/v1/chat/completions", body: body("stream-hold", true), leave: true},
		{name: "pass-through", method: "POST", path: "/v1/embeddings", body: `{"input":"a"}`, status: 200},
		{name: "pass-through error", method: "POST", path: "/v1/embeddings", body: `{"model":"nope"}`, status: 404},
		{name: "pass-through client gone", method: "POST", path: "/v1/embeddings", body: `{"input":"a"}`, leave: true},
		{name: "models", method: "GET", path: "/v1/models", status: 200},
		{name: "model unknown", method: "GET", path: "/v1/models/nope", status: 404},
		{name: "model id too long", method: "GET", path: "/v1/models/" + strings.Repeat("m", maxModelField+1), status: 400},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "metrics", method: "GET", path: "/metrics", status: 200},
		{name: "metrics wrong method", method: "DELETE", path: "/metrics", status: 405},
		{name: "readyz any method", method: "OPTIONS", path: "/readyz", status: 200},
		{name: "unknown url", method: "GET", path: "/nope", status: 404},
		{name: "bad path", method: "GET", path: "/v1/../x", status: 400},
		{name: "usage unavailable", method: "GET", path: "/v1/gateway/usage", status: 404},
		// Answered before a handler runs (readError, expect): their id is
		// the gateway's, read from the answer.
		{name: "head too large", raw: "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", status: 431},
		{name: "malformed request line", raw: "NOT A REQUEST\r\n\r\n", status: 400},
		{name: "expected body too large", raw: "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 99999999999\r\n\r\n", status: 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := "finish-" + strings.ReplaceAll(tc.name, " ", "-")
			before := requestCount(t)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			req := tc.method + " " + tc.path + " HTTP/1.1\r\nHost: gw\r\nX-Request-Id: " + id + "\r\nContent-Type: application/json\r\n"
			req += "Content-Length: " + strconv.Itoa(len(tc.body)) + "\r\n\r\n" + tc.body
			if tc.raw != "" {
				req = tc.raw
			}
			go func() { _, _ = io.WriteString(conn, req) }() // a head too large is answered before it is all written
			if tc.leave {
				time.Sleep(50 * time.Millisecond) // the request is running
				_ = conn.Close()
			} else {
				var resp fasthttp.Response
				if err := resp.Read(bufio.NewReader(conn)); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode() != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode(), tc.status, resp.Body())
				}
				if tc.raw != "" {
					id = string(resp.Header.Peek("X-Request-Id"))
				}
			}
			if !rt.Drain(5 * time.Second) {
				t.Fatalf("%d requests still in flight after the response", rt.inflight.count())
			}
			if n := srv.chats.count(); n != 0 {
				t.Fatalf("%d chat requests still counted", n)
			}
			if got := requestCount(t) - before; got != 1 {
				t.Errorf("gateway_requests_total grew by %v, want 1", got)
			}
			if got := logs.accessLines(id); got != 1 {
				t.Errorf("%d access-log lines for the request, want 1", got)
			}
			// A head fasthttp could not read is not logged as its
			// defaults, GET /; one it read is logged as it was.
			if tc.raw != "" {
				line := logs.accessLine(id)
				want := "- -"
				if tc.status == 413 {
					want = "POST /v1/chat/completions"
				}
				if got := gjson.Get(line, "method").Str + " " + gjson.Get(line, "path").Str; got != want {
					t.Errorf("logged %q, want %q: %s", got, want, line)
				}
			}
		})
	}

	// Best of drainTrials, each with its own slow request: a correct Drain
	// wakes on the zero channel, but on a loaded CI machine (-race, 2 cores)
	// the goroutines that end the request and wake Drain can be kept off
	// the CPU past 30 ms now and then. A broken Drain (a poll of 50 ms)
	// is late by some 45 ms in every trial, so it still fails; a correct
	// one fails only if all three trials are stalled.
	t.Run("drain returns when the last request ends", func(t *testing.T) {
		var late []time.Duration
		for i := range drainTrials {
			d := drainAfterRelease(t, rt, addr, body("slow-"+strconv.Itoa(i), false), release["slow-"+strconv.Itoa(i)])
			if d <= 30*time.Millisecond {
				return
			}
			late = append(late, d)
		}
		t.Fatalf("Drain returned %v after the last request ended in each trial; want it at once", late)
	})
}

// drainTrials is how many tries the drain subtest of
// TestEveryRequestFinishesOnce gets to see Drain return at once.
const drainTrials = 3

// drainAfterRelease sends the chat request body, which holds until release
// closes, and returns how long after closing release a waiting Drain
// returned.
func drainAfterRelease(t *testing.T, rt *Runtime, addr, b string, release chan struct{}) time.Duration {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+b)
	deadline := time.Now().Add(5 * time.Second)
	for rt.inflight.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rt.Drain(20 * time.Millisecond) {
		t.Fatal("Drain reported drained with a request running")
	}
	drained := make(chan time.Time, 1)
	go func() {
		if rt.Drain(10 * time.Second) {
			drained <- time.Now()
		}
		close(drained)
	}()
	// Released just after Drain began waiting: a poll of 50 ms would
	// notice some 45 ms late.
	time.Sleep(5 * time.Millisecond)
	ended := time.Now()
	close(release)
	at, ok := <-drained
	if !ok {
		t.Fatal("Drain timed out")
	}
	return at.Sub(ended)
}

// The access line of a JSON answer carries the answer's token counts.
func TestAccessLogUsage(t *testing.T) {
	t.Parallel()
	answer := []byte(`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"\"usage\":{\"prompt_tokens\":99}"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}`)
	_, _, logs, addr := finishGateway(t, func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: answer}, nil
	})
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + "/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.Set("X-Request-Id", "usage-1")
	req.SetBodyString(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if err := fasthttp.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
	}
	var line []byte
	for deadline := time.Now().Add(5 * time.Second); line == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		logs.mu.Lock()
		for _, l := range bytes.Split(logs.b.Bytes(), []byte("\n")) {
			if gjson.GetBytes(l, "request_id").Str == "usage-1" {
				line = append([]byte(nil), l...)
			}
		}
		logs.mu.Unlock()
	}
	for field, want := range map[string]int64{"prompt_tokens": 12, "completion_tokens": 3, "cached_tokens": 8} {
		if got := gjson.GetBytes(line, field); got.Int() != want {
			t.Errorf("%s = %s, want %d in %s", field, got.Raw, want, line)
		}
	}
}

// activity's zero channel closes when the count drops to zero, for every
// waiter that took it while requests ran, and is closed at once when none
// runs.
func TestActivityZero(t *testing.T) {
	t.Parallel()
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	var a activity
	if !closed(a.zero()) {
		t.Fatal("zero of an unused activity is open")
	}
	a.add()
	a.add()
	z1 := a.zero()
	if closed(z1) {
		t.Fatal("zero is closed with two requests running")
	}
	a.done()
	z2 := a.zero()
	if closed(z1) || closed(z2) {
		t.Fatal("zero is closed with one request running")
	}
	a.done()
	if !closed(z1) || !closed(z2) || !closed(a.zero()) || a.count() != 0 {
		t.Fatal("zero is open with no request running")
	}
	a.add()
	if z3 := a.zero(); closed(z3) {
		t.Fatal("a new request reopens nothing: zero is closed")
	}
	if a.wait(10 * time.Millisecond) {
		t.Fatal("wait reported idle with a request running")
	}
	a.done()
	if !a.wait(time.Second) {
		t.Fatal("wait did not report idle")
	}
}
