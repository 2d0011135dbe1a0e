package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// panicServer serves the chat route with chat as the whole pipeline.
func panicServer(t *testing.T, chat pipeline.Handler) (addr string, srv *Server) {
	t.Helper()
	return serveGateway(t, "http://127.0.0.1:1", chat)
}

// serveGateway serves a gateway whose provider p is at base and whose chat
// pipeline is chat.
func serveGateway(t *testing.T, base string, chat pipeline.Handler) (addr string, srv *Server) {
	t.Helper()
	cfg, u := testUpstream(t, base, "")
	return serveRuntime(t, cfg, u, chat)
}

// serveRuntime serves a gateway of cfg and u (model m on provider p) whose
// chat pipeline is chat.
func serveRuntime(t *testing.T, cfg *config.Config, u *Upstream, chat pipeline.Handler, set ...func(*Server)) (addr string, srv *Server) {
	t.Helper()
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	srv = NewServer(&Runtime{Config: cfg, Routes: routes, Chat: chat, Upstream: u}, zerolog.Nop())
	for _, f := range set { // before Serve: the server's goroutines read what f sets
		f(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), srv
}

// TestPanicIsAnsweredNotFatal: a layer that panics (a bug) costs its
// request a 500 in the OpenAI envelope, or a streamed request its
// connection; the process, the next request and a clean shutdown are not
// affected. Without the recovery the panic ends the test binary. A stream
// all here (a replay) whose Close panics, which ends before anything is
// written, is answered 500 too, its Close called once (a second call, from
// the recovery, panicked again and left the request unfinished).
func TestPanicIsAnsweredNotFatal(t *testing.T) {
	before := testutil.ToFloat64(panics)
	calls, closes := 0, 0
	addr, srv := panicServer(t, pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		calls++
		if !r.Stream {
			panic("a bug in a layer")
		}
		if strings.Contains(string(r.Body), "replay") {
			r.Lookahead.Set(alwaysBuffered{})
			n := 0
			return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
				if n++; n > 2 {
					return nil, io.EOF
				}
				return []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`), nil
			}, CloseFunc: func() {
				closes++
				panic("a bug in a layer's Close")
			}}}, nil
		}
		if strings.Contains(string(r.Body), "early") {
			return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
				panic("a bug before the first event")
			}, CloseFunc: func() {}}}, nil
		}
		sent := false
		return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
			if !sent {
				sent = true
				return []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`), nil
			}
			panic("a bug in a stream layer")
		}, CloseFunc: func() {}}}, nil
	}))
	c := &fasthttp.HostClient{Addr: addr}
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"early"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"replay"}]}`,
	} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://gw/v1/chat/completions")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyString(body)
		if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != 500 || gjson.GetBytes(resp.Body(), "error.type").Str != "server_error" || strings.Contains(string(resp.Body()), "a bug") {
			t.Fatalf("status %d, body %s: want a 500 envelope without the panic's text", resp.StatusCode(), resp.Body())
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	got, err := io.ReadAll(bufio.NewReader(conn)) // ends when the gateway closes the connection
	if err != nil {
		t.Fatalf("the stream did not end with its connection: %v (read %q)", err, got)
	}
	if !strings.Contains(string(got), `"content":"hi"`) {
		t.Fatalf("stream %q: the event before the panic is missing", got)
	}
	if n := testutil.ToFloat64(panics) - before; n != 5 {
		t.Fatalf("gateway_panics_total rose by %v, want 5", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown after the panics: %v (a request was never finished)", err)
	}
	if calls != 5 || closes != 1 {
		t.Fatalf("%d calls, the replay's Close called %d times", calls, closes)
	}
}

// TestUnreadableRequestsGetTheEnvelope: a request fasthttp cannot read (a
// head over the read buffer, a malformed request line) or will not read (a
// body over the limit that asks to be sent) is answered in the OpenAI error
// envelope with its request id and fasthttp's status, not in plain text.
func TestUnreadableRequestsGetTheEnvelope(t *testing.T) {
	t.Parallel()
	addr, _ := panicServer(t, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{}`)}, nil
	}))
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"head too large", "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", 431},
		{"malformed request line", "NOT A REQUEST\r\n\r\n", 400},
		// Asked before the body is sent: refused at once, by its length.
		{"expected body too large", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 99999999999\r\n\r\n", 413},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = io.WriteString(conn, tc.req) }()
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(conn)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		conn.Close()
		if resp.StatusCode() != tc.status || gjson.GetBytes(resp.Body(), "error.message").Str == "" || string(resp.Header.ContentType()) != "application/json" ||
			!strings.HasPrefix(string(resp.Header.Peek("X-Request-Id")), "req_") {
			t.Errorf("%s: %d %q %s, want %d and the envelope with a request id", tc.name, resp.StatusCode(), resp.Header.ContentType(), resp.Body(), tc.status)
		}
	}
}
