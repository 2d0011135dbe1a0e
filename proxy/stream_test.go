package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
)

// rawUpstream serves body as an SSE response to every request.
func rawUpstream(t *testing.T, body string) *Upstream {
	t.Helper()
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(body)
	})
	_, u := testUpstream(t, base, "")
	return u
}

func streamAll(t *testing.T, u *Upstream) ([][]byte, error) {
	t.Helper()
	req := &pipeline.Request{Body: []byte(`{"model":"m","stream":true,"messages":[]}`), Model: "m", Stream: true,
		Target: &pipeline.Target{Provider: "p", Upstream: "up"}}
	resp, err := u.Chat(context.Background(), req)
	if err != nil {
		return nil, err
	}
	defer resp.Stream.Close()
	var out [][]byte
	for {
		c, err := resp.Stream.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, append([]byte(nil), c...))
	}
}

func TestUpstreamStreamNormalizesEvents(t *testing.T) {
	t.Parallel()
	u := rawUpstream(t, "data: {\"id\":\"a\",\"model\":\"up\",\n"+
		"data: \"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"+
		"data: {\"id\":\"a\",\"model\":\"up\",\"error\":null,\"choices\":[],\"usage\":{\"total_tokens\":1}}\n\n"+
		": comment\n\n"+
		"data: [DONE]\n\n")
	chunks, err := streamAll(t, u)
	if err != nil || len(chunks) != 2 {
		t.Fatalf("%v %q", err, chunks)
	}
	for _, c := range chunks {
		if bytes := string(c); gjson.Get(bytes, "model").Str != "m" || gjson.Get(bytes, "error").Exists() || len(c) == 0 {
			t.Fatalf("chunk %s", c)
		}
		for _, b := range c {
			if b == '\n' {
				t.Fatalf("chunk spans lines: %q", c)
			}
		}
	}
}

func TestUpstreamStreamFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		kind       pipeline.UpstreamKind
	}{
		{"no done", "data: {\"id\":\"a\",\"choices\":[]}\n\n", pipeline.UpstreamCut},
		{"malformed", "data: {\"id\":\"a\",\n\n", pipeline.UpstreamMalformed},
		{"error event", "data: {\"id\":\"a\",\"choices\":[]}\n\nevent: error\ndata: {\"error\":{\"message\":\"boom\"}}\n\n", pipeline.UpstreamStatus},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := streamAll(t, rawUpstream(t, c.body))
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) || ue.Kind != c.kind {
				t.Fatalf("got %v, want kind %v", err, c.kind)
			}
			if err == io.EOF || errors.Is(err, io.EOF) && c.kind != pipeline.UpstreamCut {
				t.Fatalf("an abnormal end looks like io.EOF: %v", err)
			}
		})
	}
}

// TestUpstreamStreamEmptyData checks what an event with empty data does:
// skipped, as an SSE client skips it (the stream goes on to its chunks and
// [DONE]), unless it is an error event, which still ends the stream.
func TestUpstreamStreamEmptyData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string
		chunks int
		kind   pipeline.UpstreamKind // of the error; -1 = none
	}{
		{name: "empty data skipped", body: "data:\n\ndata: {\"id\":\"a\",\"choices\":[],\"usage\":{}}\n\ndata: \n\ndata: [DONE]\n\n", chunks: 1, kind: -1},
		{name: "only empty data, then done", body: "data:\n\ndata:\n\ndata: [DONE]\n\n", kind: -1},
		{name: "empty data, then cut", body: "data:\n\n", kind: pipeline.UpstreamCut},
		{name: "empty error event", body: "data: {\"id\":\"a\",\"choices\":[],\"usage\":{}}\n\nevent: error\ndata:\n\n", chunks: 1, kind: pipeline.UpstreamStatus},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chunks, err := streamAll(t, rawUpstream(t, tc.body))
			if len(chunks) != tc.chunks {
				t.Fatalf("%d chunks, want %d: %q", len(chunks), tc.chunks, chunks)
			}
			if tc.kind < 0 {
				if err != nil {
					t.Fatalf("stream failed: %v", err)
				}
				return
			}
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) || ue.Kind != tc.kind {
				t.Fatalf("got %v, want kind %v", err, tc.kind)
			}
		})
	}
}

// deadlineCounter counts the read deadlines set on a connection.
type deadlineCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c *deadlineCounter) SetReadDeadline(t time.Time) error {
	c.n.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// TestUpstreamStreamArmsDeadlinePerRead: the idle deadline is set before a
// read that may block, not before an event the SSE reader already holds,
// and not moved by less than idle/64: a burst of events costs a few
// deadline updates, events spaced by less than idle/64 share one, and
// events spaced further apart each set one.
func TestUpstreamStreamArmsDeadlinePerRead(t *testing.T) {
	t.Parallel()
	const events = 20
	event := "data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"
	tests := []struct {
		name     string
		spaced   bool
		idle     string
		min, max int64 // read deadlines set in the whole call
	}{
		{"burst", false, "5s", 1, events / 2},
		{"spaced within idle/64", true, "5s", 1, events / 2},        // 2 ms apart, 78 ms of slack
		{"spaced beyond idle/64", true, "64ms", events, 3 * events}, // 2 ms apart, 1 ms of slack
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
				ctx.SetContentType("text/event-stream")
				if !tc.spaced {
					ctx.SetBodyString(strings.Repeat(event, events) + "data: [DONE]\n\n")
					return
				}
				ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
					for range events {
						_, _ = w.WriteString(event)
						_ = w.Flush()
						time.Sleep(2 * time.Millisecond)
					}
					_, _ = w.WriteString("data: [DONE]\n\n")
				})
			})
			_, u := testUpstream(t, base, `stream_idle_timeout = "`+tc.idle+`"`)
			pc := u.providers["p"]
			var sets atomic.Int64
			pc.hc.Dial = func(addr string) (net.Conn, error) {
				c, err := fasthttp.DialTimeout(addr, time.Second)
				if err != nil {
					return nil, err
				}
				return pc.conns.wrap(&deadlineCounter{Conn: c, n: &sets}), nil
			}
			chunks, err := streamAll(t, u)
			if err != nil || len(chunks) != events+1 { // and the finish the upstream did not send
				t.Fatalf("%d chunks, %v", len(chunks), err)
			}
			if n := sets.Load(); n < tc.min || n > tc.max {
				t.Fatalf("%d read deadlines set for %d events, want %d to %d", n, events, tc.min, tc.max)
			}
		})
	}
}

// FuzzStreamRename: a stream's rename of a chunk, after any other chunk,
// is what setModel makes of it alone once it has the stream's id
// (sameID), on any bytes: the search it skips would have found the same
// model string, and the same id.
func FuzzStreamRename(f *testing.F) {
	head := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up",`
	f.Add([]byte(head+`"choices":[{"delta":{"content":"a"}}]}`), []byte(head+`"choices":[{"delta":{"content":"b"}}]}`), "m")
	f.Add([]byte(head+`"choices":[]}`), []byte(head+`"choices":[]}`), "up")
	f.Add([]byte(`{"id":"a","model":"up","x":1}`), []byte(`{"id":"a","model":"up2","x":1}`), "m")
	f.Add([]byte(`{"id":"a","model":"up"}`), []byte(`{"id":"a","model":"up"`), `we"ird`)
	f.Add([]byte(`{"choices":[{"model":"x"}],"model":"up"}`), []byte(`{"choices":[{"model":"x"}],"model":"up"}`), "m")
	f.Add([]byte(`{"id":"a"}`), []byte(`{"id":"a","model":"up"}`), "m")
	f.Add([]byte(`{"id":"x","model":1,"c":[]}`), []byte(`{"id":"x","model":12,"c":[]}`), "m")
	f.Add([]byte(`{"id":"x","model":true}`), []byte(`{"id":"x","model":truex}`), "m")
	f.Fuzz(func(t *testing.T, a, b []byte, model string) {
		const id = "chatcmpl-1" // known before: a stream would mint one for a first chunk without
		fresh := func(c []byte) string {
			f := &upstreamStream{model: model}
			f.fin.setID(id)
			withID, _ := f.sameID(bytes.Clone(c))
			return string(setModel(nil, withID, model))
		}
		s := &upstreamStream{model: model}
		s.fin.setID(id)
		want := fresh(a)
		if got := string(s.rename(bytes.Clone(a))); got != want {
			t.Fatalf("first chunk %q: %q, want %q", a, got, want)
		}
		want = fresh(b)
		if got := string(s.rename(bytes.Clone(b))); got != want {
			t.Fatalf("after %q, %q: %q, want %q", a, b, got, want)
		}
		if got := string(s.rename(bytes.Clone(b))); got != want {
			t.Fatalf("after %q twice: %q, want %q", b, got, want)
		}
	})
}

// TestUpstreamStreamCloseAfterChunk: a stream closed while its last chunk
// may still be read (a cancel from another goroutine) keeps its SSE reader
// out of the pool, so the next stream cannot write over that chunk.
func TestUpstreamStreamCloseAfterChunk(t *testing.T) {
	t.Parallel()
	first := `{"id":"a","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"first"}}]}` // named already, with its role: the chunk is the reader's own bytes
	u := rawUpstream(t, "data: "+first+"\n\ndata: "+first+"\n\ndata: [DONE]\n\n")
	other := rawUpstream(t, "data: "+strings.Repeat(`{"id":"b","choices":[]}`+"\n\ndata: ", 50)+"[DONE]\n\n")
	req := &pipeline.Request{Body: []byte(`{"model":"m","stream":true,"messages":[]}`), Model: "m", Stream: true,
		Target: &pipeline.Target{Provider: "p", Upstream: "up"}}
	resp, err := u.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	chunk, err := resp.Stream.Next()
	if err != nil || string(chunk) != first {
		t.Fatalf("%q, %v", chunk, err)
	}
	resp.Stream.Close()
	for range 3 {
		if _, err := streamAll(t, other); err != nil {
			t.Fatal(err)
		}
	}
	if string(chunk) != first {
		t.Fatalf("the chunk read before Close became %q", chunk)
	}
}

// TestUpstreamStreamKeepAliveIsActivity: keep-alive comments restart the
// idle timeout (an upstream that pings while its model thinks is alive),
// and an upstream that sends nothing at all is still cut by it.
func TestUpstreamStreamKeepAliveIsActivity(t *testing.T) {
	t.Parallel()
	event := "data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"
	for _, tc := range []struct {
		name string
		ping bool
		ok   bool
	}{{"pings", true, true}, {"silent", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
				ctx.SetContentType("text/event-stream")
				ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
					_, _ = w.WriteString(event)
					_ = w.Flush()
					for range 30 { // 1.5 s of thinking: past the 500 ms idle timeout
						time.Sleep(50 * time.Millisecond)
						if tc.ping {
							_, _ = w.WriteString(": keep-alive\n\n")
							_ = w.Flush()
						}
					}
					_, _ = w.WriteString(event + "data: [DONE]\n\n")
				})
			})
			_, u := testUpstream(t, base, `stream_idle_timeout = "500ms"`)
			chunks, err := streamAll(t, u)
			var ue *pipeline.UpstreamError
			switch {
			case tc.ok && (err != nil || len(chunks) != 3): // both, and the finish the upstream did not send
				t.Fatalf("%d chunks, %v; want both events", len(chunks), err)
			case !tc.ok && (!errors.As(err, &ue) || ue.Kind != pipeline.UpstreamIdle):
				t.Fatalf("%d chunks, %v; want an idle cut", len(chunks), err)
			}
		})
	}
}

// Groq's streams before stream_options carry the usage only in
// x_groq.usage of the last chunk: it reaches the layers (and the client)
// at the top, where the JSON answer of the same request has it.
func TestUpstreamStreamGroqUsage(t *testing.T) {
	t.Parallel()
	head := `data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":`
	u := rawUpstream(t, head+`{"role":"assistant","content":"hi"},"finish_reason":null}]}`+"\n\n"+
		head+`{},"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}}`+"\n\n"+
		"data: [DONE]\n\n")
	chunks, err := streamAll(t, u)
	if err != nil || len(chunks) != 2 {
		t.Fatalf("%v %q", err, chunks)
	}
	if gjson.GetBytes(chunks[0], "usage").Exists() || gjson.GetBytes(chunks[1], "usage.total_tokens").Int() != 4 {
		t.Fatalf("%q", chunks)
	}
}

// A read that times out within an idle deadline's lag (idle/64) of the
// total deadline is the total timeout, not an idle stall: Active leaves an
// idle deadline that would move by less than that, so near the end the
// deadline that fires may be the idle one, a few ms early, on a stream
// whose upstream was sending all along.
func TestUpstreamStreamTimeoutNearTheTotalDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		left time.Duration // from now to the total deadline
		want pipeline.UpstreamKind
	}{
		{"within the lag", 5 * time.Millisecond, pipeline.UpstreamTimeout},
		{"past it", -time.Millisecond, pipeline.UpstreamTimeout},
		{"well before it", time.Second, pipeline.UpstreamIdle},
	} {
		s := &upstreamStream{ctx: context.Background(), rd: sse.NewReader(nil, 1024), pc: &providerClient{},
			idle: 640 * time.Millisecond, deadline: time.Now().Add(tc.left)}
		var ue *pipeline.UpstreamError
		if err := s.readError(os.ErrDeadlineExceeded); !errors.As(err, &ue) || ue.Kind != tc.want {
			t.Errorf("%s: %v, want kind %v", tc.name, err, tc.want)
		}
	}
}

// A stream whose chunks carry no id, after a keep-alive chunk with none,
// goes out under one id of the gateway's on every chunk, the finish the
// gateway adds included, with the first chunk's created (a review: the
// keep-alive's head was reused for the next chunks, whose id was then
// never looked at, and all went out with none). The keep-alive chunk,
// which holds nothing, is not relayed.
func TestUpstreamStreamWithoutIDsGetsOne(t *testing.T) {
	t.Parallel()
	keepAlive := `{"object":"chat.completion.chunk","created":7,"model":"up","choices":[]}`
	chunk := `{"object":"chat.completion.chunk","created":7,"model":"up","choices":[{"index":0,"delta":{"content":"x"}}]}`
	u := rawUpstream(t, "data: "+keepAlive+"\n\ndata: "+chunk+"\n\ndata: "+chunk+"\n\ndata: [DONE]\n\n")
	chunks, err := streamAll(t, u)
	if err != nil || len(chunks) != 3 { // and the finish the upstream did not send
		t.Fatalf("%v %q", err, chunks)
	}
	id := gjson.GetBytes(chunks[0], "id").Str
	for _, c := range chunks {
		if gjson.GetBytes(c, "id").Str != id || !strings.HasPrefix(id, "chatcmpl-gw") || gjson.GetBytes(c, "created").Int() != 7 {
			t.Fatalf("chunk %s: want id %q and created 7", c, id)
		}
	}
}

// A stream with a choice index past 63 (not followed: its choices go out
// as they came) still sends each followed choice's finish once: a finish
// made owed before the stream turned wide, and the same choice's later
// one, are one finish (a review: the later one went out as it came, and
// due sent the owed one again).
func TestUpstreamStreamWideFinishesOnce(t *testing.T) {
	t.Parallel()
	head := `data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"up","choices":[`
	u := rawUpstream(t, head+`{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`+"\n\n"+
		head+`{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
		head+`{"index":64,"delta":{"role":"assistant","content":"w"},"finish_reason":"stop"}]}`+"\n\n"+
		head+`{"index":0,"delta":{"content":"z"},"finish_reason":"length"}]}`+"\n\n"+
		"data: [DONE]\n\n")
	chunks, err := streamAll(t, u)
	if err != nil {
		t.Fatalf("%v %q", err, chunks)
	}
	var finishes []string
	for _, c := range chunks {
		gjson.GetBytes(c, "choices").ForEach(func(_, ch gjson.Result) bool {
			if fr := ch.Get("finish_reason"); fr.Str != "" {
				finishes = append(finishes, ch.Get("index").Raw+":"+fr.Str)
			}
			return true
		})
	}
	if strings.Join(finishes, " ") != "64:stop 0:length" {
		t.Fatalf("finishes %q\n%q", finishes, chunks)
	}
}

// FuzzSameCreated: after sameID, a chunk that is a JSON object keeps being
// one, with the stream's created at its top level; any bytes, no panic.
func FuzzSameCreated(f *testing.F) {
	f.Add([]byte(`{"id":"a","object":"chat.completion.chunk","created":2,"model":"up","choices":[]}`))
	f.Add([]byte(`{"id":"a","model":"up","choices":[]}`))
	f.Add([]byte(`{"choices":[{"created":5}],"created":0,"id":""}`))
	f.Add([]byte(`{"id":"a","created":"x"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &upstreamStream{model: "m"}
		s.fin.setID("chatcmpl-1")
		s.fin.created = 7
		withID, idEnd := s.sameID(bytes.Clone(data))
		out, tsEnd := s.sameCreated(withID, idEnd)
		if tsEnd > 0 && (tsEnd > len(out) || !bytes.HasSuffix(out[:tsEnd], []byte("7"))) {
			t.Fatalf("%q -> %q: created ends at %d", data, out, tsEnd)
		}
		if !json.Valid(data) || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) || !gjson.ValidBytes(data) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q -> %q: not JSON", data, out)
		}
		if idEnd > 0 && gjson.GetBytes(out, "created").Raw != "7" {
			t.Fatalf("%q -> %q: created is not the stream's", data, out)
		}
	})
}
