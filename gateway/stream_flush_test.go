package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/mockllm"
)

// rawChunks sends a streamed chat request to h over a plain TCP connection
// and calls chunk with the payload of each HTTP chunk (each one write of
// the gateway) as it arrives.
func rawChunks(t *testing.T, h *harness, chunk func(payload []byte)) {
	t.Helper()
	addr := strings.TrimSuffix(strings.TrimPrefix(h.base, "http://"), "/v1")
	testproc.StreamChunks(t, addr, `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, chunk)
}

// A burst of events that reach the gateway together leaves in fewer writes
// than events: the sink holds its flush while the next upstream event is
// already buffered.
func TestStreamBurstCoalesces(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{
		Text: strings.Repeat("burst ", 40), Chunking: &mockllm.Chunking{TextRunes: 4, Burst: true}})})
	chunks, events := 0, 0
	var all []byte
	rawChunks(t, h, func(p []byte) {
		chunks++
		events += bytes.Count(p, []byte("data: "))
		all = append(all, p...)
	})
	if !bytes.HasSuffix(all, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream did not end with [DONE]: %q", all)
	}
	t.Logf("%d events in %d writes", events, chunks)
	// About 10 KB: more than the SSE reader's buffer holds, so the writer
	// must also look into the connection's buffer for the events' ends.
	if events < 60 || chunks > 6 {
		t.Fatalf("%d events in %d writes: a burst must coalesce into few writes", events, chunks)
	}
}

// Events that the upstream sends one at a time each reach the client
// before the upstream sends the next: holding a flush never waits for the
// network. The mock sends event n only once the client has read event n-1
// (from the first content on: the events before it are primed together).
func TestStreamSpacedEventsLeaveAtOnce(t *testing.T) {
	t.Parallel()
	seen := make(chan int, 64)
	const firstGated = 2
	stuck := make(chan int, 64)
	gate := func(n int) {
		if n < firstGated {
			return
		}
		for {
			select {
			case k := <-seen:
				if k >= n-1 {
					return
				}
			case <-time.After(10 * time.Second): // a deadlock guard, not a timing check
				stuck <- n
				return
			}
		}
	}
	h := newHarness(t, baseConfig, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{
		Text: strings.Repeat("spaced ", 4), Chunking: &mockllm.Chunking{TextRunes: 4, Gate: gate}})})
	events := 0
	rawChunks(t, h, func(p []byte) {
		events += bytes.Count(p, []byte("data: "))
		seen <- events - 1
	})
	close(stuck)
	for n := range stuck {
		t.Errorf("event %d was held: the client had not seen event %d before the upstream sent it", n, n-1)
	}
	if events < 6 {
		t.Fatalf("%d events", events)
	}
}

// A flush is held only for an upstream event that becomes a chunk: when
// what the upstream has already sent after a chunk is a comment (a
// keep-alive) and it then goes quiet, the chunk still leaves at once. The
// upstream here is a plain HTTP server, because the mock sends no comments:
// it sends role, "Hello" and ": keep-alive" in one write, then waits until
// the client has seen "Hello" before it ends the answer.
func TestStreamFlushesBeforeSilentEvents(t *testing.T) {
	t.Parallel()
	sawHello := make(chan struct{})
	held := make(chan bool, 1)
	chunk := func(delta, finish string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":` +
			delta + `,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, chunk(`{"role":"assistant","content":""}`, "null")+chunk(`{"content":"Hello"}`, "null")+": keep-alive\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-sawHello:
			held <- false
		case <-time.After(10 * time.Second): // a deadlock guard, not a timing check
			held <- true
		}
		io.WriteString(w, chunk(`{}`, `"stop"`)+"data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.Replace(baseConfig, "{{MOCK}}", up.URL+"/v1", 1), mockllm.Options{})
	var once sync.Once
	rawChunks(t, h, func(p []byte) {
		if bytes.Contains(p, []byte(`"Hello"`)) {
			once.Do(func() { close(sawHello) })
		}
	})
	if <-held {
		t.Fatal(`"Hello" was held until the upstream's next data event: the keep-alive after it was taken for a chunk`)
	}
}

// A stream answered from the response cache has every event in memory: it
// leaves in one write, and the second request costs no upstream call.
func TestCachedStreamLeavesInOneWrite(t *testing.T) {
	t.Parallel()
	h := newHarness(t, cacheConfig, mockllm.Options{Respond: numbered, Chunking: mockllm.Chunking{TextRunes: 3}})
	addr := strings.TrimSuffix(strings.TrimPrefix(h.base, "http://"), "/v1")
	body := `{"model":"gpt-x","temperature":0,"stream":true,"messages":[{"role":"user","content":"cached"}]}`
	var answers [2]string
	var writes [2]int
	for i := range answers {
		testproc.StreamChunks(t, addr, body, func(p []byte) { writes[i]++; answers[i] += string(p) })
	}
	if h.mock.Calls("up-model") != 1 || strings.Count(answers[1], "data: ") < 5 || !strings.HasSuffix(answers[1], "data: [DONE]\n\n") {
		t.Fatalf("%d upstream calls; the replay: %q", h.mock.Calls("up-model"), answers[1])
	}
	if writes[1] != 1 {
		t.Fatalf("the cached stream left in %d writes (the live one in %d)", writes[1], writes[0])
	}
}

// What the upstream sent whole leaves without waiting for the network,
// and nothing is held for an event still to come, whatever the HTTP
// chunking does to the bytes: the upstream here writes its raw chunked
// response itself, with CRLF line ends, an event cut across two chunks
// (so that a chunk's closing CRLF follows one of the event's), and holds
// the rest of the answer until the client has seen "Hello". The events
// before [DONE] that arrived together leave in one write.
func TestStreamChunkingHoldsNothing(t *testing.T) {
	t.Parallel()
	event := func(delta, finish string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":` +
			delta + `,"finish_reason":` + finish + `}]}` + "\r\n\r\n"
	}
	chunk := func(b string) string { return strconv.FormatInt(int64(len(b)), 16) + "\r\n" + b + "\r\n" }
	role, hello, world := event(`{"role":"assistant","content":""}`, "null"), event(`{"content":"Hello"}`, "null"), event(`{"content":" world"}`, "null")
	cut := strings.Index(world, `" world"`) // world's first part, then its line end in a chunk of its own
	rest := chunk(event(`{}`, `"stop"`)+"data: [DONE]\r\n\r\n") + "0\r\n\r\n"
	for _, tc := range []struct {
		name        string
		first, then string
	}{
		// The next event starts in the SSE reader's buffer; the chunk after
		// it ends in a CRLF, and the framing's CRLF follows.
		{"event begun in the reader", chunk(role+hello+world[:cut]) + chunk(world[cut:len(world)-2]), chunk("\r\n") + rest},
		// The next event's first line and its CRLF in a chunk of their own,
		// the framing's CRLF after them: no blank line yet.
		{"event in a chunk of its own", chunk(role+hello) + chunk(world[:len(world)-2]), chunk("\r\n") + rest},
		{"all at once", chunk(role+hello+world) + rest, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sawHello := make(chan struct{})
			held := make(chan bool, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				conn, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+tc.first)
				if tc.then != "" {
					select {
					case <-sawHello:
						held <- false
					case <-time.After(10 * time.Second): // a deadlock guard, not a timing check
						held <- true
					}
					_, _ = io.WriteString(conn, tc.then)
				}
				_, _ = conn.Read(make([]byte, 1)) // until the gateway lets the connection go
			}))
			t.Cleanup(up.Close)
			h := newHarness(t, strings.Replace(baseConfig, "{{MOCK}}", up.URL+"/v1", 1), mockllm.Options{})
			var writes []string
			var once sync.Once
			rawChunks(t, h, func(p []byte) {
				writes = append(writes, string(p))
				if bytes.Contains(p, []byte(`"Hello"`)) {
					once.Do(func() { close(sawHello) })
				}
			})
			all := strings.Join(writes, "")
			if strings.Count(all, "data: ") != 5 || !strings.Contains(all, `" world"`) || !strings.HasSuffix(all, "data: [DONE]\n\n") {
				t.Fatalf("stream %q", all)
			}
			if tc.then != "" && <-held {
				t.Fatal(`"Hello" was held until the upstream sent more`)
			}
			if tc.then == "" && (len(writes) != 2 || !strings.Contains(writes[0], `"stop"`)) {
				t.Fatalf("the events that came together left in %d writes: %q", len(writes), writes)
			}
		})
	}
}
