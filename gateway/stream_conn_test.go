package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/mockllm"
)

// A stream runs on its client connection apart from fasthttp's worker
// (proxy/hijack.go); these tests hold the connection-level behaviour that
// fasthttp gave for free: the bytes of the response, keep-alive after a
// stream, pipelined requests, Connection: close, HTTP/1.0 and shutdown.

const (
	connStreamBody = `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	connPlainBody  = `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`
)

// connChunkDelay spaces the mock's events, so that each stream is still
// open when its head is written and is handed over (a stream all buffered
// by then is written by fasthttp: TestStreamHandOverOnlyWhileOpen).
const connChunkDelay = 5 * time.Millisecond

func connHarness(t *testing.T) (*harness, string) {
	t.Helper()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Text: "a streamed answer in a few chunks"}
	}, Chunking: mockllm.Chunking{TextRunes: 5}, ChunkDelay: connChunkDelay})
	u, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	return h, u.Host
}

// rawRequest is an HTTP request as a client writes it.
func rawRequest(proto, body string, extra ...string) string {
	var b strings.Builder
	b.WriteString("POST /v1/chat/completions " + proto + "\r\nHost: gw\r\nContent-Type: application/json\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	return b.String()
}

// readStream reads one streamed response off br and checks its head and
// body: chunked, the SSE headers, events that end with [DONE].
func readStream(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	return readStreamFramed(t, br, true)
}

// readStreamFramed is readStream for a response chunked or, for an HTTP/1.0
// client, not framed at all (its body ends with the connection).
func readStreamFramed(t *testing.T, br *bufio.Reader, chunked bool) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the stream's response: %v", err)
	}
	body, err := io.ReadAll(resp.Body) // net/http's chunked reader checks the framing
	if err != nil {
		t.Fatalf("reading the stream's body: %v", err)
	}
	if resp.StatusCode != 200 || chunked && (len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked") ||
		!chunked && (len(resp.TransferEncoding) != 0 || resp.ContentLength != -1 && resp.ContentLength != int64(len(body))) {
		t.Fatalf("status %d, transfer encoding %v, content length %d", resp.StatusCode, resp.TransferEncoding, resp.ContentLength)
	}
	for k, v := range map[string]string{"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("Date") == "" {
		t.Errorf("head lacks X-Request-Id or Date: %v", resp.Header)
	}
	if !strings.Contains(string(body), `"content":"a str`) || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("body %q", body)
	}
	return resp
}

func readPlain(t *testing.T, br *bufio.Reader) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), `"object":"chat.completion"`) {
		t.Fatalf("answer %d %q, %v", resp.StatusCode, body, err)
	}
}

func dialGateway(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// TestStreamConnectionServesNextRequests: after a stream, its connection
// answers the next requests (a body, another stream, a body again), and a
// request the client pipelined behind a stream's request is answered after
// the stream, in order.
func TestStreamConnectionServesNextRequests(t *testing.T) {
	t.Parallel()
	_, addr := connHarness(t)
	c, br := dialGateway(t, addr)
	write(t, c, rawRequest("HTTP/1.1", connStreamBody))
	if resp := readStream(t, br); resp.Close {
		t.Fatal("a keep-alive stream's response says Connection: close")
	}
	write(t, c, rawRequest("HTTP/1.1", connPlainBody))
	readPlain(t, br)
	write(t, c, rawRequest("HTTP/1.1", connStreamBody))
	readStream(t, br)
	write(t, c, rawRequest("HTTP/1.1", connPlainBody))
	readPlain(t, br)

	// Pipelined: two requests in one write, the first a stream; then a
	// body in front of a stream (its answer, which fasthttp holds while the
	// next request is buffered, must leave before the stream's head).
	write(t, c, rawRequest("HTTP/1.1", connStreamBody)+rawRequest("HTTP/1.1", connPlainBody))
	readStream(t, br)
	readPlain(t, br)
	write(t, c, rawRequest("HTTP/1.1", connPlainBody)+rawRequest("HTTP/1.1", connStreamBody))
	readPlain(t, br)
	readStream(t, br)
}

// TestStreamConnectionIdlesLikeKeepAlive: a connection idle after a stream
// waits for its next request as long as any keep-alive connection
// (idle_timeout), not the read timeout of a new connection's first request,
// and is never answered 408 for a request it did not send.
func TestStreamConnectionIdlesLikeKeepAlive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(baseConfig, "[server]", "[server]\nread_timeout = \"300ms\"\nidle_timeout = \"20s\"", 1),
		mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn { return mockllm.Turn{Text: "a streamed answer in a few chunks"} },
			Chunking: mockllm.Chunking{TextRunes: 5}, ChunkDelay: connChunkDelay})
	u, _ := url.Parse(h.base)
	c, br := dialGateway(t, u.Host)
	write(t, c, rawRequest("HTTP/1.1", connStreamBody))
	readStream(t, br)
	time.Sleep(time.Second) // past the read timeout, within the idle timeout
	write(t, c, rawRequest("HTTP/1.1", connPlainBody))
	readPlain(t, br)
}

// TestShutdownDeadlineEndsStreams: streams still running at shutdown's
// deadline are cancelled (event: error), their connections closed, and
// Shutdown reports the deadline.
func TestShutdownDeadlineEndsStreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{
		Respond:    func(*mockllm.Call) mockllm.Turn { return mockllm.Turn{Text: strings.Repeat("slow words ", 200)} },
		Chunking:   mockllm.Chunking{TextRunes: 4},
		ChunkDelay: 50 * time.Millisecond,
	})
	u, _ := url.Parse(h.base)
	c, br := dialGateway(t, u.Host)
	write(t, c, rawRequest("HTTP/1.1", connStreamBody))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 64)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := h.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown with a stream running past its deadline returned %v", err)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(rest), "event: error") {
		t.Fatalf("the cut stream ended with %v and %q", err, rest[max(0, len(rest)-200):])
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the stream's connection is still open after shutdown")
	}
}

// TestStreamConnectionCloses: a client that asks to close, or speaks
// HTTP/1.0, gets Connection: close and the connection ends after the
// stream. HTTP/1.0 knows no chunked framing: its stream is not framed, its
// end is the connection's, and a replay from the cache is sized.
func TestStreamConnectionCloses(t *testing.T) {
	t.Parallel()
	_, addr := connHarness(t)
	cached := newHarness(t, baseConfig+"[middleware.cache]\nenabled = true\nstore = \"memory\"\n", mockllm.Options{Respond: func(*mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Text: "a streamed answer in a few chunks"}
	}, Chunking: mockllm.Chunking{TextRunes: 5}})
	u, err := url.Parse(cached.base)
	if err != nil {
		t.Fatal(err)
	}
	replayBody := strings.Replace(connStreamBody, `"stream":true`, `"stream":true,"temperature":0`, 1)
	for _, tc := range []struct {
		addr, req, cache string
		chunked          bool
	}{
		{addr, rawRequest("HTTP/1.1", connStreamBody, "Connection: close"), "", true},
		{addr, rawRequest("HTTP/1.0", connStreamBody), "", false},
		{u.Host, rawRequest("HTTP/1.0", replayBody), "miss", false},
		{u.Host, rawRequest("HTTP/1.0", replayBody), "hit", false}, // written by fasthttp: all here
	} {
		req := tc.req
		c, br := dialGateway(t, tc.addr)
		write(t, c, req)
		resp := readStreamFramed(t, br, tc.chunked)
		if got := resp.Header.Get("X-Gateway-Cache"); tc.cache != "" && got != tc.cache {
			t.Errorf("cache %q, want %q", got, tc.cache)
		}
		if !resp.Close {
			t.Errorf("%q: the response does not say Connection: close", strings.SplitN(req, "\r\n", 2)[0])
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%q: after the stream the connection gave %v, want EOF", strings.SplitN(req, "\r\n", 2)[0], err)
		}
	}
}

// TestShutdownClosesConnectionKeptAfterStream: a connection idle after a
// stream (fasthttp counts a connection active until its first request) does
// not hold shutdown until its deadline, and is closed.
func TestShutdownClosesConnectionKeptAfterStream(t *testing.T) {
	t.Parallel()
	h, addr := connHarness(t)
	c, br := dialGateway(t, addr)
	write(t, c, rawRequest("HTTP/1.1", connStreamBody))
	readStream(t, br)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("shutdown: %v (its deadline: %v)", err, ctx.Err())
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection kept after the stream is still open after shutdown")
	}
}

// TestPassthroughToHTTP10: a pass-through answer to an HTTP/1.0 client, an
// event stream or JSON, is not chunked (HTTP/1.0 knows no chunks: fasthttp
// chunked it all the same) but ends with the connection; and the request
// goes upstream as HTTP/1.1, where it went as the client's HTTP/1.0 and
// closed the provider's connection after every answer.
func TestPassthroughToHTTP10(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	u, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-x","input":"hi"}`
	for _, q := range []string{"sse=3&usage=2", "usage=2"} {
		c, br := dialGateway(t, u.Host)
		write(t, c, "POST /v1/embeddings?"+q+" HTTP/1.0\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: "+
			strconv.Itoa(len(body))+"\r\n\r\n"+body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || len(resp.TransferEncoding) != 0 || !resp.Close {
			t.Fatalf("%s: status %d, transfer encoding %v, close %v, %v", q, resp.StatusCode, resp.TransferEncoding, resp.Close, err)
		}
		if bytes.Contains(got, []byte("\r\n")) || !bytes.Contains(got, []byte(`"proto":"HTTP/1.1"`)) || !bytes.Contains(got, []byte(`"usage":{"prompt_tokens":2`)) {
			t.Fatalf("%s: body %q", q, got)
		}
		if strings.HasPrefix(q, "sse") && !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
			t.Fatalf("%s: the stream's body %q", q, got)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: after the answer the connection gave %v, want EOF", q, err)
		}
	}
}

// An HTTP/1.0 pass-through answer whose body is empty still gets its head
// (it was written only with the body's first bytes), and a shutdown waits
// for an HTTP/1.0 answer still being copied, as it waits for a chat stream:
// an unframed body cut short would look complete.
func TestPassthroughToHTTP10EmptyAndShutdown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") == "" {
			w.WriteHeader(200) // no body
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":0}\n\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	u, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-x","input":"hi"}`
	req := func(q string) string {
		return "POST /v1/embeddings" + q + " HTTP/1.0\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	c, br := dialGateway(t, u.Host)
	write(t, c, req(""))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("an empty answer: %v", err)
	}
	c, br = dialGateway(t, u.Host)
	write(t, c, req("?slow=1"))
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("data: {\"n\":0}\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- h.srv.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		t.Fatalf("shutdown returned (%v) with an answer still being copied", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the answer's rest %q, %v", rest, err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
