package gateway

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/mockllm"
)

// silentUpstream reads each request and never answers: it reports on got
// that a request arrived and on left when the gateway closed the connection,
// the only way an HTTP/1.1 client can cancel a request.
func silentUpstream(t *testing.T) (url string, got, left <-chan time.Time) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gotc, leftc := make(chan time.Time, 16), make(chan time.Time, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := br.ReadString('\n'); err != nil { // the request line
					return
				}
				hdr, err := textproto.NewReader(br).ReadMIMEHeader()
				if err != nil {
					return
				}
				n, _ := strconv.Atoi(hdr.Get("Content-Length"))
				if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
					return
				}
				gotc <- time.Now()
				_, _ = io.Copy(io.Discard, br) // until the gateway closes
				leftc <- time.Now()
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return "http://" + ln.Addr().String() + "/v1", gotc, leftc
}

// A client that leaves cancels its upstream call promptly, whatever the
// request: non-streamed (with and without server tools), streamed and still
// waiting for the upstream's first byte, or a pass-through call. The
// upstream never answers, so only a cancelled call ends before its timeout
// (10 minutes for chat, first_byte_timeout for the pass-through).
func TestClientLeavingCancelsEveryUpstreamCall(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, config, body string
		path               string // default: the chat route
	}{
		{"non-stream", baseConfig, `{"model":"gpt-x","messages":[{"role":"user","content":"go"}]}`, ""},
		{"stream before its first byte", baseConfig, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"go"}]}`, ""},
		{"non-stream with server tools", toolConfig, `{"model":"gpt-x","messages":[{"role":"user","content":"go"}]}`, ""},
		{"stream with server tools", toolConfig, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"go"}]}`, ""},
		{"pass-through before its first byte", baseConfig, `{"model":"gpt-x","input":"go"}`, "/v1/embeddings"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up, got, left := silentUpstream(t)
			cfg := strings.ReplaceAll(strings.ReplaceAll(c.config, "{{MOCK}}", up), "{{HTTP}}", "http://127.0.0.1:1/")
			h := newHarness(t, cfg, mockllm.Options{})
			conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(h.base, "/v1"), "http://"))
			if err != nil {
				t.Fatal(err)
			}
			path := cmp.Or(c.path, "/v1/chat/completions")
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(c.body), c.body)
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the request never reached the upstream")
			}
			closed := time.Now()
			_ = conn.Close()
			select {
			case at := <-left:
				d := at.Sub(closed)
				t.Logf("the upstream saw the cancellation %v after the client left", d)
				// The design takes about 200 ms (two cancel graces); a CI
				// machine busy with other tests has taken 1.7 s. An upstream
				// call that is not cancelled runs for 10 minutes.
				if d > 3*time.Second {
					t.Fatalf("the upstream saw the cancellation only %v after the client left; want within 3s", d)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the client left, but its upstream call kept running")
			}
		})
	}
}

// The fallback deadline interrupts a non-streamed call that the upstream
// never answers: the client gets a 504 soon after the deadline and the
// upstream sees its connection closed. Nothing waits on the call's context
// until the connection sweep registers it one grace period in, so this is
// the path where the deadline's context is made real late.
func TestFallbackDeadlineInterruptsSilentUpstream(t *testing.T) {
	t.Parallel()
	up, got, left := silentUpstream(t)
	cfg := strings.ReplaceAll(baseConfig, "{{MOCK}}", up) + "\n[middleware.fallback]\ndeadline = \"300ms\"\n"
	h := newHarness(t, cfg, mockllm.Options{})
	start := time.Now()
	type answer struct {
		status int
		body   []byte
	}
	done := make(chan answer, 1)
	go func() {
		status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"go"}]}`, nil)
		done <- answer{status, body}
	}()
	var a answer
	select {
	case a = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer 5 s after a 300 ms deadline")
	}
	took, status, body := time.Since(start), a.status, a.body
	if status != 504 {
		t.Fatalf("status %d %s, want 504 from the deadline", status, body)
	}
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Fatalf("answered after %v; want soon after the 300 ms deadline", took)
	}
	select {
	case <-got:
	default:
		t.Fatal("the request never reached the upstream")
	}
	select {
	case <-left:
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline passed, but the upstream call kept its connection")
	}
}
