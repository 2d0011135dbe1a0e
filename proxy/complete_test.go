package proxy

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
)

// burstUpstream serves every request with a chunked event stream of three
// content events and [DONE]. It sends the whole answer, the body's last
// chunk included, in one write, or, with a split, the part before it first
// and the rest 50 ms later: split "end" sends the body's last chunk later
// (as servers do that end the body after the handler returns), split
// "done" [DONE] too. It counts the connections it accepted in conns.
func burstUpstream(t *testing.T, split string, conns *atomic.Int32) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	event := func(s string) string { return "data: " + s + "\n\n" }
	var events strings.Builder
	for _, w := range []string{"one", "two", "three"} {
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
			conns.Add(1)
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
					all := head + chunk(events.String()) + chunk(event("[DONE]")) + "0\r\n\r\n"
					at := len(all)
					switch split {
					case "end":
						at = strings.LastIndex(all, "0\r\n")
					case "done":
						at = strings.Index(all, "[DONE]")
					}
					_, _ = c.Write([]byte(all[:at]))
					if at < len(all) {
						time.Sleep(50 * time.Millisecond)
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
// stream. A stream whose [DONE] is still to come is handed over. All reach
// the client whole, and the upstream connection is used again.
func TestCompleteStreamIsNotHandedOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		split     string
		handovers int64
	}{
		{"", 0},     // the whole answer here
		{"end", 0},  // the body's end a moment later
		{"done", 2}, // [DONE] still to come
	} {
		t.Run("split="+tc.split, func(t *testing.T) {
			t.Parallel()
			var conns atomic.Int32
			cfg, u := testUpstream(t, burstUpstream(t, tc.split, &conns), "")
			addr, srv := serveRuntime(t, cfg, u, u)
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
			for range 2 {
				var got strings.Builder
				testproc.StreamChunks(t, addr, body, func(p []byte) { got.Write(p) })
				s := got.String()
				if !strings.Contains(s, `"one"`) || !strings.Contains(s, `"three"`) || !strings.HasSuffix(s, "data: [DONE]\n\n") {
					t.Fatalf("stream %q", s)
				}
			}
			if h := srv.handovers.Load(); h != tc.handovers {
				t.Fatalf("%d streams handed over, want %d", h, tc.handovers)
			}
			if n := conns.Load(); n != 1 {
				t.Fatalf("%d upstream connections for two sequential streams: the connection was not reused", n)
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
