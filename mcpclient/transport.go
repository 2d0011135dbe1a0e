package mcpclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/llmgw/gateway/config"
)

// inheritedEnv are the variables a stdio server inherits from the gateway;
// everything else (API keys above all) must be passed explicitly in env.
var inheritedEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "LANG", "LC_ALL", "TZ", "NODE_PATH"}

// transport returns a fresh transport for one connection attempt: a child
// process for command, Streamable HTTP for url.
func transport(c *config.MCPServer) mcp.Transport {
	if c.Command != "" {
		cmd := exec.Command(c.Command, c.Args...)
		// Never nil: a nil Env would inherit the gateway's whole environment.
		cmd.Env = make([]string, 0, len(inheritedEnv)+len(c.Env))
		for _, k := range inheritedEnv {
			if v, ok := os.LookupEnv(k); ok {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		for k, v := range c.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		// Its last words, for the log when it fails (stderr.go). A
		// grandchild that keeps the pipe open does not hold up the wait.
		cmd.Stderr, cmd.WaitDelay = &stderrTail{}, 2*time.Second
		isolate(cmd)
		return &stdioTransport{cmd: cmd, terminate: 2 * time.Second}
	}
	hc := &http.Client{
		Transport: headerRT{base: http.DefaultTransport, headers: c.Headers},
		// The configured headers (credentials) go only to the configured
		// endpoint: redirects are not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	// MaxEventSize: the SDK's own bound on one SSE event, a message and
	// its framing; headerRT applies it first to a call's answer, with the
	// bound on the message itself, so that the call alone fails (sseGuard).
	return &mcp.StreamableClientTransport{Endpoint: c.URL, HTTPClient: hc, MaxRetries: 1, MaxEventSize: maxEventBytes}
}

// maxMessageBytes bounds one message an MCP server sends over HTTP: the
// SDK's cap on one stdio line and on one SSE event (16 MiB), applied by
// headerRT to the bodies the SDK reads whole (application/json answers,
// error bodies), which it does not bound.
const maxMessageBytes = mcp.DefaultMaxEventSize

// maxEventBytes bounds one SSE event: a message of maxMessageBytes and room
// for its field names, id and line ends (an answer of 16 MiB less a few
// bytes was refused as over 16 MiB when the event's bound was the
// message's).
const maxEventBytes = maxMessageBytes + 4<<10

// errTooLarge is the read error of a response body over maxMessageBytes.
var errTooLarge = fmt.Errorf("mcpclient: MCP server response body exceeds %d bytes", maxMessageBytes)

// headerRT adds the configured headers (e.g. Authorization) to every
// request, bounds the bodies the SDK reads whole, and puts an error answer
// in the place of a call's answer the SDK could not read (answerguard.go).
type headerRT struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	// traceparent of the tool call's span, when traced.
	otel.GetTextMapPropagator().Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	rec, _ := r.Context().Value(overKey{}).(*callRecord) // a tool call's
	id, call := requestID(r)                             // a call's POST: its answer is guarded
	switch {
	case call && rec != nil:
		rec.setID(id)
	case rec != nil && r.Method == http.MethodGet:
		// The SDK resumes a call's stream that ended before its answer
		// with a GET under the call's context: the stream is that call's.
		id, call = rec.getID()
	}
	resp, err := h.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	var over *atomic.Bool // the tool call's
	if rec != nil {
		over = &rec.over
	}
	// The media type is parsed as the SDK parses it.
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300 // the SDK reads the answer then
	switch {
	case call && ok && mt == "application/json":
		// An answer the SDK could not read would fail the connection,
		// every call in flight on it: the call alone gets an error
		// answer instead (jsonGuard).
		resp.Body = &jsonGuard{body: resp.Body, id: id, over: over, limit: maxMessageBytes, declared: resp.ContentLength > maxMessageBytes}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	case call && ok && mt == "text/event-stream":
		// The same for an event of a call's stream (sseGuard). Other
		// streams (GET) are bounded per event by the SDK (MaxEventSize),
		// and may rightly run long.
		resp.Body = newSSEGuard(resp.Body, id, over, maxEventBytes, maxMessageBytes)
	case call && ok:
		// A 2xx answer of another type (a proxy's HTML page) is no JSON-RPC
		// message either, and the SDK would fail the connection on it: the
		// call alone gets the unreadable answer, as a JSON one it cannot
		// read does.
		_ = resp.Body.Close()
		body := errorAnswer(id, codeAnswerUnreadable)
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp.Header.Set("Content-Type", "application/json")
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	case !ok || mt != "text/event-stream":
		// Any other body is read whole (the SDK reads an error answer
		// whole, whatever its type): bound it.
		left := int64(maxMessageBytes)
		if resp.ContentLength > left {
			left = -1 // declared too large: fail on the first read
		}
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: left, over: over}
	}
	return resp, nil
}

// overKey carries, in a tool call's context, the flag its answer sets when
// it goes over maxMessageBytes: only the call whose own answer went over
// is told its output was too large (should the SDK fail the connection,
// it fails every call in flight on it with the one error).
type overKey struct{}

// callRecord is what overKey carries: the flag, and the id of the call's
// request once headerRT sent it (a resumed stream's answer is the call's).
type callRecord struct {
	over atomic.Bool
	mu   sync.Mutex
	id   jsonrpc.ID
	has  bool
}

func (c *callRecord) setID(id jsonrpc.ID) {
	c.mu.Lock()
	c.id, c.has = id, true
	c.mu.Unlock()
}

func (c *callRecord) getID() (jsonrpc.ID, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id, c.has
}

// withOverFlag returns ctx with a new record for one call, and its flag.
func withOverFlag(ctx context.Context) (context.Context, *atomic.Bool) {
	c := new(callRecord)
	return context.WithValue(ctx, overKey{}, c), &c.over
}

// limitedBody reads at most left bytes of a body, then fails with
// errTooLarge when there is more (and sets over, when the body is a tool
// call's answer).
type limitedBody struct {
	io.ReadCloser
	left int64 // bytes still allowed; < 0: over the bound
	over *atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		b.setOver()
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one byte more tells the end from an excess
	}
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		n, b.left = int(b.left), -1
		b.setOver()
		return n, errTooLarge
	}
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) setOver() {
	if b.over != nil {
		b.over.Store(true)
	}
}
