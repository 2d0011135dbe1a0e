package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/config"
)

// A call's SSE answer that the server ends after a priming event with an
// id: the SDK resumes it with a GET (Last-Event-ID), made with the call's
// context. A bad answer on that resumed stream fails the call alone too.
func TestCallResumedStreamBadAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		event string
		want  []byte
	}{
		{"huge", "data: " + strings.Repeat("x", maxMessageBytes+1) + "\n\n", msgTooLarge},
		{"bad", "data: {not json\n\n", msgMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := json.RawMessage(`{"type":"object"}`)
			s := mcp.NewServer(&mcp.Implementation{Name: "resume", Version: "1"}, nil)
			s.AddTool(&mcp.Tool{Name: "resume", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "never"}}}, nil
			})
			s.AddTool(&mcp.Tool{Name: "small", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
			h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
			srv, inits := countingServer(t, h, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
				switch {
				case bytes.Contains(body, []byte(`"name":"resume"`)):
					// A priming event, then the stream ends (a proxy cut it).
					w.Header().Set("Content-Type", "text/event-stream")
					w.WriteHeader(http.StatusOK)
					io.WriteString(w, "id: e1\nretry: 10\n\n")
				case r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") == "e1":
					w.Header().Set("Content-Type", "text/event-stream")
					w.WriteHeader(http.StatusOK)
					io.WriteString(w, tc.event)
				default:
					return false
				}
				return true
			})
			m := Start(Options{Servers: defaulted(config.MCPServer{Name: "resume-" + tc.name, URL: srv.URL, Timeout: config.Duration(20 * time.Second)}),
				KeepAlive: time.Hour, Logger: testLogger(t)})
			defer m.Close()
			if tools := toolNames(m); tools != "resume,small" {
				t.Fatalf("tools %q (status %v)", tools, m.Status())
			}
			data, isErr, err := m.Call(context.Background(), "resume", nil)
			if err != nil || !isErr || string(data) != string(tc.want) {
				t.Errorf("the call whose resumed answer was bad: %.100q isErr=%v err=%v; want %q", data, isErr, err, tc.want)
			}
			if data, isErr, err := m.Call(context.Background(), "small", nil); err != nil || isErr || string(data) != "ok" {
				t.Errorf("the call after: %.100q isErr=%v err=%v", data, isErr, err)
			}
			if n := inits.Load(); n != 1 {
				t.Errorf("%d sessions opened; want the one, kept", n)
			}
		})
	}
}

type fixedRT struct {
	resp func(*http.Request) *http.Response
}

func (f fixedRT) RoundTrip(r *http.Request) (*http.Response, error) { return f.resp(r), nil }

// A non-2xx answer is read whole by the SDK (checkResponse: io.ReadAll),
// whatever its type: bounded, text/event-stream too.
func TestErrorAnswerBoundedWhateverItsType(t *testing.T) {
	t.Parallel()
	h := headerRT{base: fixedRT{func(r *http.Request) *http.Response {
		return &http.Response{StatusCode: 500, Header: http.Header{"Content-Type": {"text/event-stream"}}, ContentLength: -1,
			Body: io.NopCloser(io.LimitReader(zeroReader{}, maxMessageBytes+1<<20)), Request: r}
	}}}
	req, _ := http.NewRequest(http.MethodPost, "http://x/", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`))
	resp, err := h.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if !errors.Is(err, errTooLarge) {
		t.Errorf("500 text/event-stream body: read %d bytes, err %v; want errTooLarge at %d", len(b), err, maxMessageBytes)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }
