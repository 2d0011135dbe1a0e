package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// tlsUpstream is an https upstream client for srv, trusting its
// certificate.
func tlsUpstream(t *testing.T, srv *httptest.Server) *Upstream {
	t.Helper()
	_, u := testUpstream(t, srv.URL+"/v1", "")
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	u.provider("p").tls.RootCAs = roots
	return u
}

func chatReq(stream bool) *pipeline.Request {
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if stream {
		body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	return &pipeline.Request{Body: []byte(body), Model: "m", Stream: stream, Target: &pipeline.Target{Provider: "p", Upstream: "up"}}
}

// https providers: dial does the TLS handshake (so that calls can find their
// connection), fasthttp must not wrap it again, and connections are reused.
func TestUpstreamOverTLS(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(callHeader) == "" {
			http.Error(w, "no call token", 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"up","choices":[{"index":0}]}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u := tlsUpstream(t, srv)
	for i := range 3 {
		resp, err := u.Chat(context.Background(), chatReq(false))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !strings.Contains(string(resp.Body), `"model":"m"`) {
			t.Fatalf("call %d: %s", i, resp.Body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d TLS connections for 3 sequential calls; want 1 (pooled)", n)
	}
}

// A cancelled context ends a call blocked in fasthttp's Do at once, over
// TLS too (the call's token is read from the plaintext request head), and
// the connection is not pooled.
func TestUpstreamCancelInterruptsDo(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	u := tlsUpstream(t, srv)
	for _, stream := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := u.Chat(ctx, chatReq(stream))
			errc <- err
		}()
		<-arrived
		cancel()
		select {
		case err := <-errc:
			if err != context.Canceled {
				t.Fatalf("stream=%v: %v, want context.Canceled", stream, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("stream=%v: the call kept waiting for the upstream after its context was cancelled", stream)
		}
	}
	t2 := &u.provider("p").conns
	t2.mu.Lock()
	n := len(t2.calls)
	t2.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d calls still registered", n)
	}
}

// A server's watcher cancels a request whose client closes, not one whose
// client sends more bytes (a pipelined request), and stops with Shutdown.
func TestPeerWatcher(t *testing.T) {
	t.Parallel()
	pair := func() (client, server net.Conn) { return tcpPair(t) }
	srv := NewServer(&Runtime{Config: &config.Config{}}, zerolog.Nop())
	w := &srv.peers
	w.grace = 10 * time.Millisecond

	client, server := pair()
	gone := make(chan struct{}, 1)
	p := w.watch(server, func() { gone <- struct{}{} })
	_, _ = client.Write([]byte("POST / HTTP/1.1\r\n")) // pipelined: not gone
	select {
	case <-gone:
		t.Fatal("a client that sent more bytes was taken for gone")
	case <-time.After(100 * time.Millisecond):
	}
	w.unwatch(p)
	client.Close()
	server.Close()

	client, server = pair()
	p = w.watch(server, func() { gone <- struct{}{} })
	client.Close()
	select {
	case <-gone:
	case <-time.After(time.Second):
		t.Fatal("a client that closed was not noticed within 1s")
	}
	w.unwatch(p)
	server.Close()

	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	client, server = pair()
	defer server.Close()
	if p := w.watch(server, func() {}); p != (peerWatch{}) {
		t.Fatal("watching after Shutdown")
	}
	client.Close()
}

// A body over max_response_bytes is refused (by its Content-Length, or
// once the limit is passed) with an envelope that names no internals, and
// its connection is closed, never pooled; a body within the limit is read
// whole and its connection reused.
func TestResponseLimit(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		pad := 10
		id := r.Header.Get("X-Request-Id")
		if strings.HasPrefix(id, "big") {
			pad = 4096
		}
		if id == "big-chunked" {
			w.(http.Flusher).Flush() // no Content-Length
		}
		_, _ = w.Write([]byte(`{"model":"up","choices":[{"index":0}],"pad":"` + strings.Repeat("x", pad) + `"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	_, u := testUpstream(t, srv.URL+"/v1", "max_response_bytes = 1024")
	cases := []struct {
		id        string
		tooLarge  bool
		wantConns int32
	}{
		{"small", false, 1},
		{"small-again", false, 1}, // pooled
		{"big", true, 1},          // refused by Content-Length; closed
		{"small-after-big", false, 2},
		{"big-chunked", true, 2},
		{"small-after-chunked", false, 3},
	}
	for _, c := range cases {
		req := chatReq(false)
		req.ID = c.id
		resp, err := u.Chat(context.Background(), req)
		if c.tooLarge {
			env := mapError(err)
			if env.status != 502 || !strings.Contains(string(env.body), `"code":"upstream_response_too_large"`) || strings.Contains(string(env.body), "max_response_bytes") {
				t.Fatalf("%s: %v → %d %s", c.id, err, env.status, env.body)
			}
		} else if err != nil || !strings.Contains(string(resp.Body), `"model":"m"`) {
			t.Fatalf("%s: %v", c.id, err)
		}
		if n := conns.Load(); n != c.wantConns {
			t.Fatalf("after %s: %d connections, want %d", c.id, n, c.wantConns)
		}
	}
}

// An upstream error body in a shape other than OpenAI's envelope keeps its
// text: a string error (many OpenAI-compatible servers), FastAPI's detail
// (a string, or its validation errors' first, after where it was). A body
// with no text is the gateway's own message, and the status is kept.
func TestUpstreamErrorShapes(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"error":{"message":"bad messages","type":"invalid_request_error","param":"messages","code":null}}`: "bad messages",
		`{"error":"plain string error"}`: "plain string error",
		`{"detail":"Not Found"}`:         "Not Found",
		`{"detail":[{"loc":["body","messages",0],"msg":"field required","type":"missing"},{"msg":"x"}]}`: "body.messages[0]: field required",
		`{"detail":[{"msg":"no place"}]}`: "no place",
		`{"detail":[{"loc":"body"}]}`:     "upstream error",
		`Bad Request`:                     "upstream error",
		`{"error":7}`:                     "upstream error",
	} {
		env := mapUpstream(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 422, Body: []byte(body)})
		if got := gjson.GetBytes(env.body, "error.message").Str; got != want || env.status != 422 {
			t.Errorf("%s: %d %q, want %q", body, env.status, got, want)
		}
	}
}

// An answer whose head is over the provider's read_buffer is the
// upstream's malformed answer, not an unreachable upstream: it was counted
// and answered as upstream_unreachable, which sends an operator looking
// at the network rather than at read_buffer (a pass-through probe).
func TestOversizedAnswerHeadIsMalformed(t *testing.T) {
	t.Parallel()
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Big", strings.Repeat("x", 16<<10))
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"choices":[]}`)
	})
	_, u := testUpstream(t, base, "read_buffer = 4096")
	_, err := u.Chat(context.Background(), &pipeline.Request{Body: []byte(`{"model":"m","messages":[]}`), Model: "m",
		Target: &pipeline.Target{Provider: "p", Upstream: "up"}})
	var ue *pipeline.UpstreamError
	if !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamMalformed {
		t.Fatalf("err %v, want an upstream_malformed error", err)
	}
}

// A JSON request answered with an event stream fails or finishes as the
// same stream relayed does (a review of the first version, which built a
// 200 of whatever came): a body of JSON labelled as an event stream is the
// JSON answer; a stream of no content is ErrNoContent (fallback retries
// it); one cut before its finish and [DONE] is cut; calls without a finish
// end "tool_calls".
func TestStreamedAnswerEndsAsTheRelayDoes(t *testing.T) {
	t.Parallel()
	const role = `data: {"id":"a","choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n"
	const call = `data: {"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}` + "\n\n"
	const text = `data: {"id":"a","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"
	const usage = `data: {"id":"a","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}` + "\n\n"
	const done = "data: [DONE]\n\n"
	for _, tc := range []struct {
		name, body string
		kind       pipeline.UpstreamKind // the failure's, when no finish is wanted
		finish     string                // the answer's: "" wants a failure
	}{
		{"JSON labelled a stream", `{"id":"a","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, 0, "stop"},
		{"JSON after a newline", "\n" + `{"id":"a","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, 0, "stop"},
		{"role only", role + done, pipeline.UpstreamCut, ""},
		{"usage only", usage + done, pipeline.UpstreamCut, ""},
		{"cut after content", role + text, pipeline.UpstreamCut, ""},
		{"calls without a finish", role + call + done, 0, "tool_calls"},
		{"text without a finish", role + text + done, 0, "stop"},
	} {
		base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString(tc.body)
		})
		_, u := testUpstream(t, base, "")
		resp, err := u.Chat(context.Background(), &pipeline.Request{Body: []byte(`{"model":"m","messages":[]}`), Model: "m",
			Target: &pipeline.Target{Provider: "p", Upstream: "up"}})
		var ue *pipeline.UpstreamError
		switch {
		case tc.finish == "" && (!errors.As(err, &ue) || ue.Kind != tc.kind):
			t.Errorf("%s: %v, want a failure of kind %v", tc.name, err, tc.kind)
		case tc.finish != "" && (err != nil || gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str != tc.finish):
			t.Errorf("%s: %v, want finish %q", tc.name, err, tc.finish)
		}
	}
}

// A JSON request answered with an event stream: parallel calls whose
// fragments interleave keep their own arguments, and the answer's id and
// created are the first chunk's, not a keep-alive's or an Azure
// prompt-filter chunk's before it (a wire probe: the fragments went to the
// last call opened, a 200 with wrong arguments, in the tool loop too).
func TestStreamedAnswerInterleavedCalls(t *testing.T) {
	t.Parallel()
	frag := func(i int, s string) string {
		return `data: {"id":"q","created":7,"choices":[{"index":0,"delta":{"tool_calls":[{"index":` + strconv.Itoa(i) + `,` + s + `}]}}]}` + "\n\n"
	}
	body := "event: ping\ndata: {}\n\n" +
		`data: {"id":"","object":"","created":0,"choices":[],"prompt_filter_results":[{"prompt_index":0}]}` + "\n\n" +
		frag(0, `"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}`) +
		frag(1, `"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}`) +
		frag(0, `"function":{"arguments":"{\"city\":"}`) + frag(1, `"function":{"arguments":"{\"tz\":\"UTC\"}"}`) +
		frag(0, `"function":{"arguments":"\"Oslo\"}"}`) +
		`data: {"id":"q","created":7,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(body)
	})
	_, u := testUpstream(t, base, "")
	resp, err := u.Chat(context.Background(), &pipeline.Request{Body: []byte(`{"model":"m","messages":[]}`), Model: "m",
		Target: &pipeline.Target{Provider: "p", Upstream: "up"}})
	if err != nil {
		t.Fatal(err)
	}
	res := gjson.GetManyBytes(resp.Body, "id", "created", "choices.0.message.tool_calls.0.function.arguments", "choices.0.message.tool_calls.1.function.arguments", "choices.0.finish_reason")
	if res[0].Str != "q" || res[1].Int() != 7 || res[2].Str != `{"city":"Oslo"}` || res[3].Str != `{"tz":"UTC"}` || res[4].Str != "tool_calls" {
		t.Fatalf("answer %s", resp.Body)
	}
}
