package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/config"
)

// badMark is the text of the "bad" tool's answer, which badAnswers makes
// invalid JSON on the wire.
const badMark = "BAD-ANSWER-MARK"

// badAnswers rewrites, in every response body, the JSON string badMark
// into a bare word: the answer carrying it is no longer JSON.
type badAnswers struct {
	http.ResponseWriter
}

func (w badAnswers) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w badAnswers) Write(p []byte) (int, error) {
	if _, err := w.ResponseWriter.Write(bytes.ReplaceAll(p, []byte(`"`+badMark+`"`), []byte(badMark))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w badAnswers) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestCallBadAnswerSparesOthersOverHTTP: over Streamable HTTP, a call whose
// answer is over the bound on one message, or not JSON, fails alone, with
// the too-large or unreadable result: a call in flight beside it gets its
// own answer, and the next call works on the same session. The SDK failed
// the whole connection, and with it every call in flight (other clients'
// requests), as "the tool's server is unreachable".
func TestCallBadAnswerSparesOthersOverHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool       string
		jsonAnswer bool
		want       []byte
	}{
		{"huge", true, msgTooLarge},
		{"huge", false, msgTooLarge},
		{"bad", true, msgMalformed},
		{"bad", false, msgMalformed},
		{"page", true, msgMalformed}, // a 200 text/html page in a call's answer's place
	} {
		name := fmt.Sprintf("%s-json=%v", tc.tool, tc.jsonAnswer)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obj := json.RawMessage(`{"type":"object"}`)
			text := func(s string) *mcp.CallToolResult {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
			}
			s := mcp.NewServer(&mcp.Implementation{Name: "spare", Version: "1"}, nil)
			started, release := make(chan struct{}, 1), make(chan struct{})
			s.AddTool(&mcp.Tool{Name: "slow", InputSchema: obj}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				started <- struct{}{}
				select { // in flight until the bad answer has been dealt with
				case <-release:
				case <-time.After(10 * time.Second):
				case <-ctx.Done():
				}
				return text("slow done"), nil
			})
			s.AddTool(&mcp.Tool{Name: "huge", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return text(strings.Repeat("x", maxMessageBytes+1)), nil
			})
			s.AddTool(&mcp.Tool{Name: "bad", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return text(badMark), nil
			})
			s.AddTool(&mcp.Tool{Name: "small", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return text("ok"), nil
			})
			s.AddTool(&mcp.Tool{Name: "page", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return text("never seen"), nil
			})
			h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: tc.jsonAnswer})
			srv, inits := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(badAnswers{w}, r) }),
				func(w http.ResponseWriter, _ *http.Request, body []byte) bool {
					if !bytes.Contains(body, []byte(`"name":"page"`)) {
						return false
					}
					w.Header().Set("Content-Type", "text/html")
					_, _ = io.WriteString(w, "<html>502 Bad Gateway</html>")
					return true
				})
			m := Start(Options{Servers: defaulted(config.MCPServer{Name: "spare-" + name, URL: srv.URL, Timeout: config.Duration(30 * time.Second)}),
				KeepAlive: time.Hour, Logger: testLogger(t)})
			defer m.Close()
			if tools := toolNames(m); tools != "bad,huge,page,slow,small" {
				t.Fatalf("tools %q (status %v)", tools, m.Status())
			}
			type result struct {
				data  []byte
				isErr bool
				err   error
			}
			slow := make(chan result, 1)
			go func() {
				data, isErr, err := m.Call(context.Background(), "slow", nil)
				slow <- result{data, isErr, err}
			}()
			<-started
			data, isErr, err := m.Call(context.Background(), tc.tool, nil)
			close(release)
			if err != nil || !isErr || string(data) != string(tc.want) {
				t.Errorf("the call whose answer was bad: %.100q isErr=%v err=%v; want %q", data, isErr, err, tc.want)
			}
			if r := <-slow; r.err != nil || r.isErr || string(r.data) != "slow done" {
				t.Errorf("the call in flight beside it: %.100q isErr=%v err=%v; want its own answer", r.data, r.isErr, r.err)
			}
			if data, isErr, err := m.Call(context.Background(), "small", nil); err != nil || isErr || string(data) != "ok" {
				t.Errorf("the call after: %.100q isErr=%v err=%v", data, isErr, err)
			}
			if n := inits.Load(); n != 1 {
				t.Errorf("%d sessions opened; want the one, kept", n)
			}
			if st := m.Status()["mcp:spare-"+name]; !strings.HasPrefix(st, "up") {
				t.Errorf("status %q", st)
			}
		})
	}
}

// countingServer serves h over HTTP and counts the sessions opened on it
// (its initialize requests). answer, when set, may answer a request in h's
// place (returning true); body is a POST's body, nil otherwise.
func countingServer(t *testing.T, h http.Handler, answer func(w http.ResponseWriter, r *http.Request, body []byte) bool) (*httptest.Server, *atomic.Int64) {
	var inits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Method == http.MethodPost {
			body = peekBody(r)
			if bytes.Contains(body, []byte(`"method":"initialize"`)) {
				inits.Add(1)
			}
		}
		if answer != nil && answer(w, r, body) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &inits
}

// The guard on a call's event stream passes good events on as they came,
// and counts an event's bytes as the SDK does: every line's, line ends and
// the ending blank line included. An event of exactly the bound passes;
// one byte more is the error answer in its place, the flag set, the stream
// ended (the event after it never read).
func TestSSEGuardBound(t *testing.T) {
	t.Parallel()
	const limit = 200
	id := mustID(7)
	msg := func(n int) string { // an event of n bytes in all
		head := "event: message\r\nid: 1\r\ndata: " + `{"jsonrpc":"2.0","method":"x","params":"`
		tail := `"}` + "\r\n\r\n"
		return head + strings.Repeat("y", n-len(head)-len(tail)) + tail
	}
	next := "data: " + `{"jsonrpc":"2.0","id":7,"result":{}}` + "\n\n"
	for _, tc := range []struct {
		body, want string
		over       bool
	}{
		{msg(limit) + next, msg(limit) + next, false},
		{msg(limit+1) + next, "data: " + string(errorAnswer(id, codeAnswerTooLarge)) + "\n\n", true},
		{"data: {\"jsonrpc\":\n\n" + next, "data: " + string(errorAnswer(id, codeAnswerUnreadable)) + "\n\n", false},
		{"event: other\ndata: not json\n\n: comment\n\n" + next, "event: other\ndata: not json\n\n: comment\n\n" + next, false},
		{"no colon\n\n" + next, "data: " + string(errorAnswer(id, codeAnswerUnreadable)) + "\n\n", false},
	} {
		over := new(atomic.Bool)
		closed := new(atomic.Bool)
		g := newSSEGuard(closeSpy{strings.NewReader(tc.body), closed}, id, over, limit, limit)
		got, err := io.ReadAll(g)
		if err != nil || string(got) != tc.want || over.Load() != tc.over || closed.Load() != (tc.body != tc.want) {
			t.Errorf("%.40q: read %q err %v over %v closed %v; want %q over %v", tc.body, got, err, over.Load(), closed.Load(), tc.want, tc.over)
		}
	}
}

type closeSpy struct {
	io.Reader
	closed *atomic.Bool
}

func (c closeSpy) Close() error { c.closed.Store(true); return nil }

// The guard on a call's JSON answer passes a good one on whole, and puts
// the error answer in the place of one over the bound (declared or not)
// or not a JSON-RPC message.
func TestJSONGuard(t *testing.T) {
	t.Parallel()
	const limit = 64
	id := mustID("a")
	good := `{"jsonrpc":"2.0","id":"a","result":{}}`
	for _, tc := range []struct {
		body     string
		declared bool
		want     string
		over     bool
	}{
		{good, false, good, false},
		{good, true, string(errorAnswer(id, codeAnswerTooLarge)), true},
		{good + strings.Repeat(" ", limit-len(good)), false, good + strings.Repeat(" ", limit-len(good)), false},
		{good + strings.Repeat(" ", limit-len(good)+1), false, string(errorAnswer(id, codeAnswerTooLarge)), true},
		{`{"jsonrpc":"2.0","id":"a","result":`, false, string(errorAnswer(id, codeAnswerUnreadable)), false},
		{``, false, string(errorAnswer(id, codeAnswerUnreadable)), false},
	} {
		over := new(atomic.Bool)
		g := &jsonGuard{body: io.NopCloser(strings.NewReader(tc.body)), id: id, over: over, limit: limit, declared: tc.declared}
		got, err := io.ReadAll(g)
		if err != nil || string(got) != tc.want || over.Load() != tc.over {
			t.Errorf("%q declared=%v: read %q err %v over %v; want %q over %v", tc.body, tc.declared, got, err, over.Load(), tc.want, tc.over)
		}
	}
}

// The error answers are recognised by Call, and no server's answer with
// the same code and another message is.
func TestRefusedAnswer(t *testing.T) {
	t.Parallel()
	for _, code := range []int64{codeAnswerTooLarge, codeAnswerUnreadable} {
		msg, err := jsonrpc.DecodeMessage(errorAnswer(mustID(3), code))
		if err != nil {
			t.Fatal(err)
		}
		resp := msg.(*jsonrpc.Response)
		if resp.ID != mustID(3) || refusedAnswer(fmt.Errorf("calling: %w", resp.Error)) != code {
			t.Fatalf("%d: %v %v", code, resp.ID, resp.Error)
		}
		if refusedAnswer(&jsonrpc.Error{Code: code, Message: "the server's"}) != 0 {
			t.Fatalf("%d: a server's error taken for the gateway's", code)
		}
	}
}

// FuzzCallID: the id found in any request body makes an error answer the
// SDK decodes as the response to that id.
func FuzzCallID(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":1.5e3,"method":"m"}`,
		`[1]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.GetBody = nil // read and put back
		id, ok := requestID(r)
		if rest, _ := io.ReadAll(r.Body); !bytes.Equal(rest, body) {
			t.Fatalf("the body sent on is %q, not %q", rest, body)
		}
		if !ok {
			return
		}
		msg, err := jsonrpc.DecodeMessage(body)
		if req, isReq := msg.(*jsonrpc.Request); err != nil || !isReq || !req.IsCall() {
			t.Fatalf("%q is not a call, yet its id %v was taken", body, id)
		}
		for _, code := range []int64{codeAnswerTooLarge, codeAnswerUnreadable} {
			msg, err := jsonrpc.DecodeMessage(errorAnswer(id, code))
			resp, isResp := msg.(*jsonrpc.Response)
			if err != nil || !isResp || resp.ID != id || refusedAnswer(resp.Error) != code {
				t.Fatalf("answer to %v: %v %v", id, msg, err)
			}
		}
	})
}

// FuzzSSEGuard: whatever the stream, the guard passes on either all of it
// as it came, or a prefix of it (whole events) then the one error answer;
// it never holds more than its bound of one event.
func FuzzSSEGuard(f *testing.F) {
	for _, s := range []string{
		"event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\n\n",
		"data: {\"jsonrpc\":\"2.0\",\r\ndata: \"method\":\"m\"}\r\n\r\n",
		": c\n\nretry: 5\n\nno colon\n",
		"data: " + strings.Repeat("x", 300) + "\n\n",
	} {
		f.Add([]byte(s), uint8(100))
	}
	f.Fuzz(func(t *testing.T, body []byte, limit uint8) {
		id := mustID(1)
		msgLimit := int(limit)*3/4 + 1
		g := newSSEGuard(io.NopCloser(iotestHalf{bytes.NewReader(body)}), id, nil, int(limit)+1, msgLimit)
		var got []byte
		buf := make([]byte, 7)
		for {
			n, err := g.Read(buf)
			got = append(got, buf[:n]...)
			if g.end == nil && cap(g.ev) > int(limit)+1 {
				t.Fatalf("held %d bytes of an event, bound %d", cap(g.ev), int(limit)+1)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		good, bad := sdkReads(body, int(limit)+1, msgLimit)
		if !bad {
			if !bytes.Equal(got, body) {
				t.Fatalf("passed on %q of %q, which the SDK reads", got, body)
			}
			return
		}
		for _, code := range []int64{codeAnswerTooLarge, codeAnswerUnreadable} {
			tail := "data: " + string(errorAnswer(id, code)) + "\n\n"
			if prefix, ok := bytes.CutSuffix(got, []byte(tail)); ok && bytes.Equal(prefix, body[:good]) {
				return
			}
		}
		t.Fatalf("passed on %q of %q; the SDK reads %q, then fails", got, body, body[:good])
	})
}

// sdkReads is how the SDK's client reads a call's event stream (its
// scanEventsLimited with limit, and processStream), written out plainly
// for FuzzSSEGuard to hold the guard to: the stream's first good bytes
// (whole events), and whether it then meets an event that fails the
// connection, or a message over msgLimit (the gateway's own bound).
func sdkReads(body []byte, limit, msgLimit int) (good int, bad bool) {
	pos, size := 0, 0 // the current line's start; the event's bytes so far
	var name, data []byte
	nd := 0
	for {
		end := len(body)
		if i := bytes.IndexByte(body[pos:], '\n'); i >= 0 {
			end = pos + i + 1
		}
		eof := end == len(body) && (end == pos || body[end-1] != '\n')
		if size+end-pos > limit {
			return good, true
		}
		size += end - pos
		line := bytes.TrimRight(body[pos:end], "\r\n")
		pos = end
		if len(line) > 0 {
			k, v, ok := bytes.Cut(line, []byte{':'})
			if !ok {
				return good, true
			}
			switch string(k) {
			case "event":
				name = bytes.TrimSpace(v)
			case "data":
				if nd++; nd > 1 {
					data = append(data, '\n')
				}
				data = append(data, bytes.TrimSpace(v)...)
			}
		}
		if len(line) == 0 || eof {
			if len(data) > 0 && (len(name) == 0 || string(name) == "message") {
				if len(data) > msgLimit {
					return good, true
				}
				if _, err := jsonrpc.DecodeMessage(data); err != nil {
					return good, true
				}
			}
			good, size, name, data, nd = pos, 0, nil, nil, 0
			if eof {
				return good, false
			}
		}
	}
}

// iotestHalf reads at most half of what is asked (at least one byte), to
// split lines across reads.
type iotestHalf struct{ r io.Reader }

func (h iotestHalf) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:len(p)/2]
	}
	return h.r.Read(p)
}

func mustID(v any) jsonrpc.ID {
	if n, ok := v.(int); ok {
		v = float64(n)
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		panic(err)
	}
	return id
}

// The message bound is the message's, not its event's: a message of
// exactly the bound passes though its framing takes the event past it,
// one byte more is too large.
func TestSSEGuardMessageBound(t *testing.T) {
	t.Parallel()
	const msgLimit = 120
	id := mustID(3)
	event := func(n int) string { // a message event whose data is n bytes
		head := `{"jsonrpc":"2.0","method":"x","params":"`
		return "event: message\r\nid: 42\r\ndata: " + head + strings.Repeat("y", n-len(head)-2) + `"}` + "\r\n\r\n"
	}
	for _, tc := range []struct {
		n    int
		pass bool
	}{{msgLimit, true}, {msgLimit + 1, false}} {
		body := event(tc.n)
		if len(body) <= msgLimit {
			t.Fatal("the event's framing should take it past the message bound")
		}
		over := new(atomic.Bool)
		got, err := io.ReadAll(newSSEGuard(io.NopCloser(strings.NewReader(body)), id, over, msgLimit+64, msgLimit))
		want := body
		if !tc.pass {
			want = "data: " + string(errorAnswer(id, codeAnswerTooLarge)) + "\n\n"
		}
		if err != nil || string(got) != want || over.Load() == tc.pass {
			t.Errorf("a message of %d bytes (bound %d): read %.60q err %v over %v", tc.n, msgLimit, got, err, over.Load())
		}
	}
}
