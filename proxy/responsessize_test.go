package proxy

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
)

// TestResponsesStreamBounded: a streamed Responses answer keeps its whole
// output (response.completed carries it), so an upstream that streams
// without end grew the gateway's memory without limit, where a chat
// stream keeps nothing and a tool loop's round stops at 32 MiB. Past the
// bound (here 1 MiB) the stream now ends with response.failed (the gateway's
// size limit), as a tool-loop round over its bound ends its stream.
// Without it, the 4 MiB answer completes.
func TestResponsesStreamBounded(t *testing.T) {
	t.Parallel()
	// An answer with logprobs (which the bound counts) gets four times the
	// bound: this 3 MiB answer completes then.
	for _, logprobs := range []bool{false, true} {
		t.Run(map[bool]string{false: "text", true: "logprobs"}[logprobs], func(t *testing.T) {
			t.Parallel()
			responsesStreamBounded(t, logprobs)
		})
	}
}

func responsesStreamBounded(t *testing.T, logprobs bool) {
	const piece = 1 << 10
	chunk := []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", piece) + `"},"finish_reason":null}]}`)
	var sent atomic.Int64
	chat := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
			if sent.Load() >= 3<<20 {
				return nil, io.EOF
			}
			sent.Add(piece)
			return chunk, nil
		}}}, nil
	})
	cfg, u := testUpstream(t, "http://127.0.0.1:1", "")
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	st := &responses.Store{KV: caching.NewMemoryStore(64 << 20), MaxBytes: 4 << 20}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Upstream: u, Responses: st, Chat: chat}, zerolog.Nop())
	srv.responsesMax = 1 << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	c := &fasthttp.HostClient{Addr: ln.Addr().String(), ReadTimeout: 30 * time.Second, MaxResponseBodySize: 64 << 20}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://gw/v1/responses")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if logprobs {
		req.SetBodyString(`{"model":"m","stream":true,"input":"hi","include":["message.output_text.logprobs"]}`)
	} else {
		req.SetBodyString(`{"model":"m","stream":true,"input":"hi"}`)
	}
	if err := c.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	body := string(resp.Body())
	end := body[max(0, len(body)-300):]
	if logprobs {
		if !strings.Contains(body, "response.completed") {
			t.Fatalf("status %d, %d bytes, ending %q; want the 3 MiB answer with logprobs complete", resp.StatusCode(), len(body), end)
		}
		return
	}
	if strings.Contains(body, "response.completed") || !strings.Contains(body, "response.failed") || !strings.Contains(body, "size limit") {
		t.Fatalf("status %d, %d bytes, ending %q; want response.failed over the size limit", resp.StatusCode(), len(body), end)
	}
	if n := sent.Load(); n > 2<<20 {
		t.Fatalf("the upstream stream was read to %d bytes after the bound of 1 MiB", n)
	}
}
