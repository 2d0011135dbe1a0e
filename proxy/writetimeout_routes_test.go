package proxy

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
)

// TestStalledReaderOfStoredResponseLosesIt: GET /v1/responses/{id} writes a
// stored response (up to [responses] max_response_bytes, 4 MiB by default)
// in one piece. A client that asks for it, stops reading and keeps its
// connection loses the connection once the write has waited
// server.write_timeout, as a chat answer's client does, instead of holding
// a server worker and the response's bytes for as long as it likes.
// Without the deadline the client, reading at last, gets the whole answer.
func TestStalledReaderOfStoredResponseLosesIt(t *testing.T) {
	t.Parallel()
	cfg, u := testUpstream(t, "http://127.0.0.1:1", "")
	cfg.Server.WriteTimeout = config.Duration(500 * time.Millisecond)
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	st := &responses.Store{KV: caching.NewMemoryStore(64 << 20), MaxBytes: 32 << 20}
	object := []byte(`{"id":"resp_big","object":"response","output_text":"` + strings.Repeat("x", 16<<20) + `"}`)
	if ok, err := st.Save(context.Background(), "", "resp_big", object, []byte(`[]`), []byte(`[]`), nil); !ok || err != nil {
		t.Fatalf("save: %v %v", ok, err)
	}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Upstream: u, Responses: st,
		Chat: pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return nil, nil })}, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /v1/responses/resp_big HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
	// The response's first byte: the gateway is writing (on a loaded
	// machine it may take longer than the stall below to get there). Then
	// no reading, for four times write_timeout.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var first [1]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		t.Fatalf("no answer at all: %v", err)
	}
	time.Sleep(2 * time.Second)
	n, _ := io.Copy(io.Discard, conn) // ends at the gateway's close (or the guard)
	if n+1 >= int64(len(object)) {
		t.Fatalf("the client read %d bytes, the whole response, after stalling past write_timeout", n)
	}
}
