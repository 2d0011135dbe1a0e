package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/config"
)

// A JSON body over maxMessageBytes fails to read with errTooLarge, whether
// its length is declared or not, without the client holding all of it.
// Not parallel: it measures the process's allocations.
func TestHTTPResponseBodyBounded(t *testing.T) {
	const huge = 8 * maxMessageBytes
	chunk := bytes.Repeat([]byte{' '}, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Has("declared") {
			w.Header().Set("Content-Length", strconv.Itoa(huge))
		}
		for n := 0; n < huge; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	hc := transport(&config.MCPServer{URL: srv.URL}).(*mcp.StreamableClientTransport).HTTPClient
	for _, q := range []string{"", "?declared"} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+q, strings.NewReader("{}"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		b, err := io.ReadAll(resp.Body) // as the SDK reads a JSON answer
		runtime.ReadMemStats(&m1)
		resp.Body.Close()
		if !errors.Is(err, errTooLarge) || len(b) > maxMessageBytes {
			t.Fatalf("%q: read %d bytes, err %v; want at most %d and errTooLarge", q, len(b), err, maxMessageBytes)
		}
		// io.ReadAll's growth allocates a few times what it holds: the
		// unbounded read would take at least the whole body.
		if d := m1.TotalAlloc - m0.TotalAlloc; d >= huge {
			t.Errorf("%q: reading a %d-byte body allocated %d bytes", q, huge, d)
		}
	}
}

// A body of exactly maxMessageBytes, and the ordinary ones, read whole; an
// event stream is left to the SDK's per-event bound.
func TestHTTPResponseBodyAtBound(t *testing.T) {
	t.Parallel()
	body := append(append([]byte{'"'}, bytes.Repeat([]byte{'x'}, maxMessageBytes-2)...), '"')
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("sse") {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(body)
			_, _ = w.Write(body)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	hc := transport(&config.MCPServer{URL: srv.URL}).(*mcp.StreamableClientTransport).HTTPClient
	for q, want := range map[string]int{"": len(body), "?sse": 2 * len(body)} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+q, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(b) != want {
			t.Fatalf("%q: read %d bytes, err %v; want %d", q, len(b), err, want)
		}
	}
}

// Through the SDK: a server answering a tool call with a body or an SSE
// event over the bound fails that call (headerRT's error answer in its
// place); a small answer on the same server works, before and after.
func TestMCPToolResultOverBound(t *testing.T) {
	t.Parallel()
	s := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	s.AddTool(&mcp.Tool{Name: "small", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "huge", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", maxMessageBytes+1)}}}, nil
	})
	for _, jsonResponse := range []bool{true, false} {
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
		srv := httptest.NewServer(h)
		defer srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "gw", Version: "1"}, nil).Connect(ctx, transport(&config.MCPServer{URL: srv.URL}), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "small"}); err != nil || res.IsError {
			t.Fatalf("json=%v: small result: %v %v", jsonResponse, res, err)
		}
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "huge"}); err == nil {
			n := 0
			if len(res.Content) > 0 {
				if tc, ok := res.Content[0].(*mcp.TextContent); ok {
					n = len(tc.Text)
				}
			}
			t.Fatalf("json=%v: a %d-byte tool result over the %d-byte bound was read", jsonResponse, n, maxMessageBytes)
		} else {
			t.Logf("json=%v: %v", jsonResponse, err)
		}
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "small"}); err != nil || res.IsError {
			t.Fatalf("json=%v: small result after the huge one: %v %v", jsonResponse, res, err)
		}
	}
}
