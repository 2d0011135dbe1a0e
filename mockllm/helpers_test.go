package mockllm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// start serves opts on loopback for the test's lifetime and returns the
// server and its host:port.
func start(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	s := New(opts)
	base, err := s.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	return s, addr
}

// rawResp is a response read byte for byte from a socket.
type rawResp struct {
	status  int
	header  map[string]string // lower-case keys
	body    []byte            // de-chunked
	chunks  [][]byte          // HTTP chunks, in order, when chunked
	ended   bool              // terminating chunk (or full Content-Length) seen
	readErr error             // how the connection ended (io.EOF for a clean close)
	raw     []byte
}

// do sends one HTTP/1.1 request with Connection: close on a fresh socket and
// reads until the server closes it.
func do(t testing.TB, addr, method, path string, body string, headers ...string) *rawResp {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var req strings.Builder
	req.WriteString(method + " " + path + " HTTP/1.1\r\nHost: mock\r\nConnection: close\r\n")
	req.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	for i := 0; i+1 < len(headers); i += 2 {
		req.WriteString(headers[i] + ": " + headers[i+1] + "\r\n")
	}
	req.WriteString("\r\n" + body)
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var raw []byte
	buf := make([]byte, 4096)
	var rerr error
	for {
		n, err := c.Read(buf)
		raw = append(raw, buf[:n]...)
		if err != nil {
			rerr = err
			break
		}
	}
	r := parseRaw(raw)
	r.readErr = rerr
	return r
}

// parseRaw decodes a raw HTTP/1.1 response, tolerating truncation.
func parseRaw(raw []byte) *rawResp {
	r := &rawResp{raw: raw, header: map[string]string{}}
	head, rest, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		return r
	}
	lines := strings.Split(string(head), "\r\n")
	if f := strings.Fields(lines[0]); len(f) >= 2 {
		r.status, _ = strconv.Atoi(f[1])
	}
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		r.header[strings.ToLower(k)] = strings.TrimSpace(v)
	}
	if r.header["transfer-encoding"] != "chunked" {
		r.body = rest
		if cl, err := strconv.Atoi(r.header["content-length"]); err == nil {
			r.ended = len(rest) >= cl
		}
		return r
	}
	for {
		line, after, ok := bytes.Cut(rest, []byte("\r\n"))
		if !ok {
			return r
		}
		n, err := strconv.ParseInt(string(line), 16, 64)
		if err != nil {
			return r
		}
		if n == 0 {
			r.ended = true
			return r
		}
		if int64(len(after)) < n+2 {
			r.body = append(r.body, after...)
			return r
		}
		r.chunks = append(r.chunks, after[:n])
		r.body = append(r.body, after[:n]...)
		rest = after[n+2:]
	}
}

// sse splits an SSE body into events (without the trailing blank line).
func sse(body []byte) []string {
	var out []string
	for _, ev := range strings.Split(string(body), "\n\n") {
		if ev != "" {
			out = append(out, ev)
		}
	}
	return out
}

// dataOf returns the payloads of data events, in order.
func dataOf(events []string) []string {
	var out []string
	for _, ev := range events {
		if d, ok := strings.CutPrefix(ev, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// chatBody builds a chat request body.
func chatBody(model string, stream, usage bool, messages string, tools ...string) string {
	var b strings.Builder
	b.WriteString(`{"model":"` + model + `","messages":` + messages)
	if stream {
		b.WriteString(`,"stream":true`)
	}
	if usage {
		b.WriteString(`,"stream_options":{"include_usage":true}`)
	}
	if len(tools) > 0 {
		b.WriteString(`,"tools":[`)
		for i, name := range tools {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"type":"function","function":{"name":"` + name + `","parameters":{"type":"object"}}}`)
		}
		b.WriteString(`]`)
	}
	b.WriteString(`}`)
	return b.String()
}

const userHi = `[{"role":"user","content":"hi"}]`

// isReset reports whether err is a connection reset or an abrupt EOF.
func isReset(err error) bool {
	var ne *net.OpError
	return errors.Is(err, io.EOF) || errors.As(err, &ne)
}

// readEvents reads SSE events from r until n data events were read.
func readEvents(t testing.TB, br *bufio.Reader, n int) {
	t.Helper()
	got := 0
	for got < n {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		if strings.HasPrefix(line, "data: ") {
			got++
		}
	}
}

// dialStream posts body with net/http and returns a reader on the de-chunked
// SSE body; the response is closed at cleanup.
func dialStream(t testing.TB, addr, body string) *bufio.Reader {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return bufio.NewReader(resp.Body)
}
