package proxy

import (
	"bufio"
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
)

// burstUpstream serves every request with a chunked event stream of three
// content events and [DONE]. It sends the whole answer, the body's last
// chunk included, in one write, or, with a split, the part before it first
// and the rest later (50 ms, or late): split "end" sends the body's last
// chunk later (as servers do that end the body after the handler returns),
// split "done" [DONE] too, split "first" everything after the first
// event. It counts the connections it accepted in conns (may be nil).
func burstUpstream(t *testing.T, split string, late time.Duration, conns *atomic.Int32) string {
	return burstUpstreamOf(t, []string{"one", "two", "three"}, split, "", late, conns)
}

// burstUpstreamOf is burstUpstream with an event for each of words, and
// junk sent right after the body's end, in the same write.
func burstUpstreamOf(t *testing.T, words []string, split, junk string, late time.Duration, conns *atomic.Int32) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	event := func(s string) string { return "data: " + s + "\n\n" }
	var events strings.Builder
	for _, w := range words {
		events.WriteString(event(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"` + w + `"},"finish_reason":null}]}`))
	}
	chunk := func(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if conns != nil {
				conns.Add(1)
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = req.Body.Read(make([]byte, 1<<16))
					_ = req.Body.Close()
					all := head + chunk(events.String()) + chunk(event("[DONE]")) + "0\r\n\r\n" + junk
					at := len(all)
					switch split {
					case "end":
						at = strings.LastIndex(all, "0\r\n")
					case "done":
						at = strings.Index(all, "[DONE]")
					case "first":
						at = strings.Index(all, "data: ") + len(event("{}"))
						at += strings.Index(all[at:], "data: ")
					}
					_, _ = c.Write([]byte(all[:at]))
					if at < len(all) {
						time.Sleep(cmp.Or(late, 50*time.Millisecond))
						_, _ = c.Write([]byte(all[at:]))
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1"
}

// TestCompleteStreamIsNotHandedOver: a stream whose whole upstream answer,
// to its [DONE] or the end of its body, is already here when its head is
// written (a short answer the upstream sent in one burst) is written by
// fasthttp, content first, without a goroutine of its own: none of its
// events waits for the network, and the hand-over would cost more than the
// stream. A stream whose [DONE] is still to come is handed over. An answer
// larger than the upstream connection's read buffer (4 KiB by default) is
// seen whole too, through the bytes the connection reads ahead of
// fasthttp's reader. All reach the client whole, and the upstream
// connection is used again; bytes an upstream sent past the body's end
// (junk) are not taken for the next answer: that connection is not.
func TestCompleteStreamIsNotHandedOver(t *testing.T) {
	t.Parallel()
	short := []string{"one", "two", "three"}
	var long []string
	for i := range 60 { // about 8 KB of events
		long = append(long, "w"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name, split, junk string
		words             []string
		handovers         int64
		conns             int32
	}{
		{"whole answer here", "", "", short, 0, 1},
		{"body's end a moment later", "end", "", short, 0, 1},
		{"[DONE] still to come", "done", "", short, 2, 1},
		{"larger than the read buffer", "", "", long, 0, 1},
		// An answer of its own, larger than the reader's buffer: some of it
		// is still read ahead when the stream ends.
		{"junk after the body", "", "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("x", 5000), long, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if len(tc.words) > len(short) && !readsAhead {
				t.Skip("upstream connections read nothing ahead here")
			}
			var conns atomic.Int32
			cfg, u := testUpstream(t, burstUpstreamOf(t, tc.words, tc.split, tc.junk, 0, &conns), "")
			addr, srv := serveRuntime(t, cfg, u, u)
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
			for range 2 {
				var got strings.Builder
				testproc.StreamChunks(t, addr, body, func(p []byte) { got.Write(p) })
				s := got.String()
				for _, w := range tc.words {
					if !strings.Contains(s, `"content":"`+w+`"`) {
						t.Fatalf("event %s missing from %q", w, s)
					}
				}
				if !strings.HasSuffix(s, "data: [DONE]\n\n") {
					t.Fatalf("stream %q", s)
				}
			}
			if h := srv.handovers.Load(); h != tc.handovers {
				t.Fatalf("%d streams handed over, want %d", h, tc.handovers)
			}
			if n := conns.Load(); n != tc.conns {
				t.Fatalf("%d upstream connections for two sequential streams, want %d", n, tc.conns)
			}
		})
	}
}

// TestStreamTailLeavesInOneWrite: once a stream is handed over, the rest
// of its answer arriving in one burst, [DONE] and the body's end with it,
// leaves in one write, [DONE] and the final chunk with the last events:
// nothing of it waits for the network (no layer's end says it may:
// EndWaits), and the client is woken once, not twice.
func TestStreamTailLeavesInOneWrite(t *testing.T) {
	t.Parallel()
	cfg, u := testUpstream(t, burstUpstream(t, "first", 300*time.Millisecond, nil), "")
	addr, srv := serveRuntime(t, cfg, u, u)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
	var chunks []string
	testproc.StreamChunks(t, addr, body, func(p []byte) { chunks = append(chunks, string(p)) })
	if h := srv.handovers.Load(); h != 1 {
		t.Fatalf("%d streams handed over, want 1", h)
	}
	if len(chunks) != 2 || !strings.Contains(chunks[0], `"one"`) || strings.Contains(chunks[0], `"two"`) ||
		!strings.Contains(chunks[1], `"two"`) || !strings.Contains(chunks[1], `"three"`) || !strings.HasSuffix(chunks[1], "}\n\ndata: [DONE]\n\n") {
		t.Fatalf("chunks %q, want the first event, then the rest with [DONE]", chunks)
	}
}

// TestStreamTailDoesNotWaitForTheEndsWork: when the stream's end does work
// that may wait on the network (a layer that says so, here one whose end
// takes 200 ms; a Responses response stored at the end), the tail's events
// leave before that work, and [DONE] (response.completed) after it, in a
// write of its own; a Responses stream not stored keeps the one write.
func TestStreamTailDoesNotWaitForTheEndsWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body, three, end string
		waits, apart                 bool
	}{
		{"layer", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, `"content":"three"`, "data: [DONE]", true, true},
		{"responses stored", "/v1/responses", `{"model":"m","stream":true,"input":"x"}`, `"delta":"three"`, "response.completed", false, true},
		{"responses not stored", "/v1/responses", `{"model":"m","stream":true,"store":false,"input":"x"}`, `"delta":"three"`, "response.completed", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, u := testUpstream(t, burstUpstream(t, "first", 300*time.Millisecond, nil), "")
			chat := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				resp, err := u.Chat(ctx, r)
				if err != nil || resp.Stream == nil || !tc.waits {
					return resp, err
				}
				r.Lookahead.EndWaits()
				up := resp.Stream
				return &pipeline.Response{Stream: &pipeline.StreamFunc{
					NextFunc: func() ([]byte, error) {
						chunk, err := up.Next()
						if err == io.EOF {
							time.Sleep(200 * time.Millisecond) // the end's work
						}
						return chunk, err
					},
					CloseFunc: up.Close,
				}}, nil
			})
			routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
			st := &responses.Store{KV: caching.NewMemoryStore(1 << 20), MaxBytes: 1 << 20}
			srv := NewServer(&Runtime{Config: cfg, Routes: routes, Upstream: u, Responses: st, Chat: chat}, zerolog.Nop())
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			var chunks []string
			testproc.StreamChunksAt(t, ln.Addr().String(), tc.path, tc.body, func(p []byte) { chunks = append(chunks, string(p)) })
			last := -1
			for i, c := range chunks {
				if strings.Contains(c, tc.three) {
					last = i
				}
			}
			if last < 0 || !strings.Contains(chunks[len(chunks)-1], tc.end) {
				t.Fatalf("chunks %q", chunks)
			}
			if apart := !strings.Contains(chunks[last], tc.end); apart != tc.apart {
				t.Fatalf("the last events and %s apart: %v, want %v; chunks %q", tc.end, apart, tc.apart, chunks)
			}
		})
	}
}

// TestTailKeepsLastBytes: tail holds the last bytes of everything added,
// whatever the pieces' sizes.
func TestTailKeepsLastBytes(t *testing.T) {
	t.Parallel()
	var all []byte
	var last tail
	for i, n := range []int{0, 3, 30, 1, 0, 23, 24, 25, 2, 7, 100, 5} {
		piece := []byte(strings.Repeat(string(rune('a'+i)), n))
		all = append(all, piece...)
		last.add(piece)
		want := all[max(0, len(all)-len(last.buf)):]
		if string(last.bytes()) != string(want) {
			t.Fatalf("after %d pieces: %q, want %q", i+1, last.bytes(), want)
		}
	}
}

// rawStream sends one stream request (and, if given, requests pipelined
// behind it) on a connection of its own and returns what it read until
// the stream's last chunk, the connection's end or a 5 s guard, and when
// [DONE] and the last chunk came.
func rawStream(t *testing.T, addr string, pipelined ...string) (got string, doneAt, endAt time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := func(body string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	out := req(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	for _, b := range pipelined {
		out += req(b)
	}
	start := time.Now()
	_, _ = io.WriteString(conn, out)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		b = append(b, buf[:n]...)
		if doneAt == 0 && strings.Contains(string(b), "data: [DONE]") {
			doneAt = time.Since(start)
		}
		if strings.Contains(string(b), "\r\n0\r\n\r\n") {
			return string(b), doneAt, time.Since(start)
		}
		if err != nil {
			return string(b), doneAt, 0
		}
	}
}

// TestCompleteStreamWriteDeadlineIsPerWrite: each write of a stream
// fasthttp writes whole is bounded by write_timeout, as on a connection of
// the stream's own, not the stream as a whole: the time the layers take
// between writes (here the drain after [DONE], waiting for an upstream's
// late body end) is not the client's. With one deadline for the whole
// stream, a client reading at once lost its [DONE] and last chunk.
func TestCompleteStreamWriteDeadlineIsPerWrite(t *testing.T) {
	t.Parallel()
	cfg, u := testUpstream(t, burstUpstream(t, "end", 1500*time.Millisecond, nil), "")
	cfg.Server.WriteTimeout = config.Duration(300 * time.Millisecond)
	addr, srv := serveRuntime(t, cfg, u, u)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	got, _, end := rawStream(t, addr)
	if !strings.Contains(got, `"three"`) || !strings.Contains(got, "data: [DONE]") || end == 0 {
		t.Fatalf("a client reading at once got a cut stream:\n%q", got)
	}
	if h := srv.handovers.Load(); h != 0 {
		t.Fatalf("%d hand-overs: the stream was not written by fasthttp", h)
	}
}

// TestCompleteStreamEndNotHeldBehindPipelined: without a write_timeout,
// the last chunk of a stream fasthttp writes whole still leaves with it,
// not when the answer to a request the client pipelined behind it is
// written (fasthttp holds its writer's bytes while a pipelined request is
// buffered, unless the handler set a write deadline).
func TestCompleteStreamEndNotHeldBehindPipelined(t *testing.T) {
	t.Parallel()
	cfg, u := testUpstream(t, burstUpstream(t, "", 0, nil), "")
	cfg.Server.WriteTimeout = 0
	release := make(chan struct{})
	chat := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if r.Stream {
			return u.Chat(ctx, r)
		}
		<-release // the pipelined request is answered only once the stream has ended
		return &pipeline.Response{Body: []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)}, nil
	})
	addr, srv := serveRuntime(t, cfg, u, chat)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	defer close(release)
	got, _, end := rawStream(t, addr, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	if end == 0 {
		t.Fatalf("the stream's last chunk never came while the pipelined request waited:\n%q", got)
	}
}

// TestCompleteStreamPanics: a layer that panics in a stream fasthttp
// writes whole (in Next, or in its Close) is handled as on a stream's own
// goroutine: the panic is counted and logged, the request finished as a
// 500, the connection closed; the process goes on. fasthttp recovers a
// panic in a body's WriteTo on its own (the request was then logged as a
// client that left, the panic nowhere), and calls the body's Close outside
// any recovery (a panicking Close ended the process: run in a child).
func TestCompleteStreamPanics(t *testing.T) {
	if os.Getenv("LLMGW_PANIC_CHILD") != "" {
		completeStreamPanic(t, os.Getenv("LLMGW_PANIC_CHILD"))
		return
	}
	t.Parallel()
	for _, where := range []string{"next", "close"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCompleteStreamPanics$", "-test.v")
		cmd.Env = append(os.Environ(), "LLMGW_PANIC_CHILD="+where)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("a panic in a layer's %s: %v\n%.3000s", where, err, out)
		}
	}
}

// completeStreamPanic is TestCompleteStreamPanics's child, whose layer
// panics where says.
func completeStreamPanic(t *testing.T, where string) {
	cfg, u := testUpstream(t, burstUpstream(t, "", 0, nil), "")
	chat := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		resp, err := u.Chat(ctx, r)
		if err != nil || resp.Stream == nil {
			return resp, err
		}
		up := resp.Stream
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{
			NextFunc: func() ([]byte, error) {
				if n++; where == "next" && n == 4 { // the Next that reads [DONE], in WriteTo
					panic("a bug in a stream layer")
				}
				return up.Next()
			},
			CloseFunc: func() {
				up.Close()
				if where == "close" {
					panic("a bug in a layer's Close")
				}
			},
		}}, nil
	})
	before := testutil.ToFloat64(panics)
	logs := &lockedBuffer{}
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Chat: chat, Upstream: u}, zerolog.New(logs))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	_, _, _ = rawStream(t, ln.Addr().String())
	waitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), `"status":500`) })
	if d := testutil.ToFloat64(panics) - before; d != 1 {
		t.Fatalf("%v panics counted, want 1\n%s", d, logs)
	}
	if h := srv.handovers.Load(); h != 0 {
		t.Fatalf("%d hand-overs: the stream was not written by fasthttp", h)
	}
}
