package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
	"github.com/rs/zerolog"
)

// meterPolicy admits everything and records what its Call charges.
type meterPolicy struct {
	mu      sync.Mutex
	charged []wire.ChatUsage
	done    chan struct{}
}

func (p *meterPolicy) Open() bool { return true }
func (p *meterPolicy) Authenticate(string) (*pipeline.Tenant, error) {
	return &pipeline.Tenant{Name: "t"}, nil
}
func (p *meterPolicy) Admit(t *pipeline.Tenant, r *pipeline.Request) error { r.Tenant = t; return nil }
func (p *meterPolicy) AllowsPath(*pipeline.Tenant, string) bool            { return true }
func (p *meterPolicy) ModelEndpoint(path string) bool                      { return path == "/v1/embeddings" }
func (p *meterPolicy) AllowsModel(*pipeline.Tenant, string) bool           { return true }
func (p *meterPolicy) RestrictsModels(*pipeline.Tenant) bool               { return false }
func (p *meterPolicy) Guard(*pipeline.Tenant, *pipeline.Request) error     { return nil }
func (p *meterPolicy) Redact(*pipeline.Tenant, *pipeline.Request) error    { return nil }
func (p *meterPolicy) BodyLimit(*pipeline.Tenant) int                      { return 0 }
func (p *meterPolicy) Limit(*pipeline.Request) (Call, error)               { return p, nil }
func (p *meterPolicy) End()                                                {}
func (p *meterPolicy) Charge(u wire.ChatUsage, estimateInput bool) {
	p.mu.Lock()
	if estimateInput {
		u.Prompt = -1 // marks an estimate
	}
	p.charged = append(p.charged, u)
	p.mu.Unlock()
	close(p.done)
}

// A client that leaves while a large JSON answer is being copied does not
// take its usage with it: the gateway reads on, a bounded amount, to the
// usage at the answer's end and charges what the provider reported, not an
// estimate of the input.
func TestPassthroughChargesTheUsageOfAnAnswerItsClientLeft(t *testing.T) {
	t.Parallel()
	const head, tail = 64 << 10, 512 << 10 // together under maxDrain
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"embedding":"`+strings.Repeat("a", head))
		w.(http.Flusher).Flush()
		time.Sleep(500 * time.Millisecond) // the client leaves meanwhile
		_, _ = io.WriteString(w, strings.Repeat("b", tail)+`"}],"usage":{"prompt_tokens":42,"total_tokens":42}}`)
	}))
	t.Cleanup(up.Close)
	cfg, u := testUpstream(t, up.URL+"/v1", "")
	pol := &meterPolicy{done: make(chan struct{})}
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Upstream: u, Policy: pol}, zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = ln.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","input":"x"}`
	fmt.Fprintf(conn, "POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q: %v", line, err)
	}
	_ = conn.Close() // gone with most of the answer unread
	select {
	case <-pol.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call was never charged")
	}
	if got := pol.charged[0]; got.Prompt != 42 || got.Total != 42 {
		t.Fatalf("charged %+v, want the reported 42 prompt tokens (Prompt -1 is the input's estimate)", got)
	}
}
