package proxy

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/pipeline"
)

// alwaysBuffered says the upstream's next event is always already here.
type alwaysBuffered struct{}

func (alwaysBuffered) Buffered() bool { return true }

// TestSinkHoldIsBounded: however long the upstream keeps its next event
// buffered, the sink writes once it holds maxHeldBytes, so a long burst
// reaches the client in writes of about that size, not all at its end.
func TestSinkHoldIsBounded(t *testing.T) {
	t.Parallel()
	chunk := `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 1000) + `"}}]}`
	const events = 100
	_, _, _, addr := finishGateway(t, func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		r.Lookahead.Set(alwaysBuffered{})
		n := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{
			NextFunc: func() ([]byte, error) {
				if n++; n > events {
					return nil, io.EOF
				}
				return []byte(chunk), nil
			},
			CloseFunc: func() {},
		}}, nil
	})
	writes, largest, total := 0, 0, 0
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
	testproc.StreamChunks(t, addr, body, func(p []byte) { // one HTTP chunk per write
		writes, largest, total = writes+1, max(largest, len(p)), total+len(p)
	})
	if total < events*len(chunk) || writes < 5 || largest > maxHeldBytes+2*len(chunk) {
		t.Fatalf("%d bytes in %d writes, the largest %d: a held write must stay near %d bytes", total, writes, largest, maxHeldBytes)
	}
}

// TestSinkHoldsNoBufferWhileWaiting: a sink whose events were all written
// gives its event buffer back before it waits for the next one, so idle
// streams hold none; while the upstream's next event is already buffered
// (a burst), it keeps the bytes it holds for one write.
func TestSinkHoldsNoBufferWhileWaiting(t *testing.T) {
	t.Parallel()
	srv, rt, _, _ := finishGateway(t, nil)
	for _, tc := range []struct {
		name     string
		buffered bool // the Lookahead says the next event is here
		wantHeld bool // a buffer is held while Next waits
		writes   int
	}{
		{"spaced events", false, false, 4}, // 3 chunks, [DONE]
		{"burst", true, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var look pipeline.Lookahead
			if tc.buffered {
				look.Set(alwaysBuffered{})
			}
			req := &pipeline.Request{ID: "r", Start: time.Now(), Stream: true, Lookahead: &look, Meta: &pipeline.Meta{}}
			x := &exchange{rt: rt, start: req.Start, req: req}
			rt.inflight.add()
			k := &sink{s: srv, x: x, req: req, cancel: func() {}, form: chatForm{}}
			n, held := 0, 0
			k.stream = &pipeline.StreamFunc{
				NextFunc: func() ([]byte, error) {
					if n > 0 && (k.bufp != nil || cap(k.buf) > 0) {
						held++
					}
					if n++; n > 3 {
						return nil, io.EOF
					}
					return []byte(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`), nil
				},
				CloseFunc: func() {},
			}
			w := &countingWriter{}
			if _, err := k.WriteTo(w); err != nil {
				t.Fatal(err)
			}
			if (held > 0) != tc.wantHeld || w.writes != tc.writes || !strings.HasSuffix(w.b.String(), "data: [DONE]\n\n") {
				t.Fatalf("a buffer held in %d of 3 waits, %d writes of %q", held, w.writes, w.b.String())
			}
			if k.bufp != nil || k.buf != nil {
				t.Fatal("the finished sink still holds its buffer")
			}
		})
	}
}

// countingWriter records what was written and in how many writes.
type countingWriter struct {
	b      strings.Builder
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.b.Write(p)
}

// TestSinkKeepsUsage: the sink keeps the stream's top-level usage object
// for the access log, whatever the whitespace around it, not a "usage"
// nested in a chunk, and as a copy: the stream reuses its chunk buffer.
func TestSinkKeepsUsage(t *testing.T) {
	t.Parallel()
	srv, rt, _, _ := finishGateway(t, nil)
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}`,
		`{"choices":[],"x":{"usage":{"prompt_tokens":99}}}`,
		`{"choices":[],"usage" : {"prompt_tokens":7,"completion_tokens":3}}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null,"padding":"` + strings.Repeat("z", 200) + `"}`,
	}
	req := &pipeline.Request{ID: "r", Start: time.Now(), Stream: true, Meta: &pipeline.Meta{}}
	x := &exchange{rt: rt, start: req.Start, req: req}
	rt.inflight.add()
	buf := make([]byte, 0, 1024) // reused for every chunk, as the upstream stream does
	n := 0
	k := &sink{s: srv, x: x, req: req, cancel: func() {}, form: chatForm{}, stream: &pipeline.StreamFunc{
		NextFunc: func() ([]byte, error) {
			if n == len(chunks) {
				return nil, io.EOF
			}
			buf = append(buf[:0], chunks[n]...)
			n++
			return buf, nil
		},
		CloseFunc: func() {},
	}}
	if _, err := k.WriteTo(&countingWriter{}); err != nil {
		t.Fatal(err)
	}
	if !x.hasUsage || x.usage.Prompt != 7 || x.usage.Completion != 3 {
		t.Fatalf("usage %+v (%v)", x.usage, x.hasUsage)
	}
}

// TestStreamHandOverOnlyWhileOpen: a stream whose every event is already
// here when its head is written (a replay from the response cache) is
// written by fasthttp in one chunk, without a goroutine of its own; a
// stream whose next event is still to come is handed over (hijack.go).
// Both reach the client whole.
func TestStreamHandOverOnlyWhileOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		buffered  bool
		handovers int64
	}{
		{"all buffered", true, 0},
		{"still open", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, _, _, addr := finishGateway(t, func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				if tc.buffered {
					r.Lookahead.Set(alwaysBuffered{})
				}
				n := 0
				return &pipeline.Response{Stream: &pipeline.StreamFunc{
					NextFunc: func() ([]byte, error) {
						if n++; n > 3 {
							return nil, io.EOF
						}
						return []byte(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`), nil
					},
					CloseFunc: func() {},
				}}, nil
			})
			var got strings.Builder
			writes := 0
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
			testproc.StreamChunks(t, addr, body, func(p []byte) { writes++; got.Write(p) })
			if n := strings.Count(got.String(), `"content":"x"`); n != 3 || !strings.HasSuffix(got.String(), "data: [DONE]\n\n") {
				t.Fatalf("%d events before %q", n, got.String())
			}
			if h := srv.handovers.Load(); h != tc.handovers {
				t.Fatalf("%d streams handed over, want %d", h, tc.handovers)
			}
			if tc.buffered && writes != 1 {
				t.Fatalf("a stream all buffered left in %d chunks", writes)
			}
		})
	}
}

// TestSinkReadAfterPrefetch: the plain io.Reader form of the sink returns
// the events prefetch took before the head was written, then the rest.
func TestSinkReadAfterPrefetch(t *testing.T) {
	t.Parallel()
	srv, rt, _, _ := finishGateway(t, nil)
	var look pipeline.Lookahead
	look.Set(alwaysBuffered{})
	req := &pipeline.Request{ID: "r", Start: time.Now(), Stream: true, Lookahead: &look, Meta: &pipeline.Meta{}}
	x := &exchange{rt: rt, start: req.Start, req: req}
	rt.inflight.add()
	k := &sink{s: srv, x: x, req: req, cancel: func() {}, form: chatForm{}}
	n := 0
	k.stream = &pipeline.StreamFunc{
		NextFunc: func() ([]byte, error) {
			if n++; n > 3 {
				return nil, io.EOF
			}
			return []byte(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`), nil
		},
		CloseFunc: func() {},
	}
	if !k.prefetch() {
		t.Fatal("a stream all buffered did not end in prefetch")
	}
	b, err := io.ReadAll(struct{ io.Reader }{k})
	if err != nil || strings.Count(string(b), `"content":"x"`) != 3 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("read %q, %v", b, err)
	}
}
