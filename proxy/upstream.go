package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/anthropic"
	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// maxErrorBody bounds how much of an upstream error body is kept.
const maxErrorBody = 64 << 10

// maxEventBytes bounds one upstream SSE event.
const maxEventBytes = 8 << 20

// Upstream is the innermost model-call handler: it sends a chat request to
// the deployment req.TargetOrDefault() names and returns the upstream's
// answer, with the client's model name on the body and every chunk. Safe for
// concurrent use; build it once per config.
type Upstream struct {
	providers map[string]*providerClient
	maxTokens map[string]int // by route name: max_tokens for providers that require one
}

var _ pipeline.Handler = (*Upstream)(nil)

// providerClient is one provider's connection pool and settings.
type providerClient struct {
	cfg      config.Provider
	hc       *fasthttp.HostClient
	tls      *tls.Config // nil for http
	conns    connTable
	scheme   string
	host     string
	basePath string // e.g. "/v1", no trailing slash
	// baseQuery is base_url's own query (Azure's api-version=...), sent
	// with every request: "" when it has none. baseNames are its
	// parameters' names, lower-cased.
	baseQuery string
	baseNames map[string]bool
	auth      string // "Bearer <key>" or ""
	chatURI   string // built once: every chat request goes here
	// chatURL is chatURI parsed once; each request copies it (SetURI)
	// instead of parsing the string again.
	chatURL *fasthttp.URI
	// upstreamSeconds is this provider's histogram, resolved once.
	upstreamSeconds prometheus.Observer
	messages        bool // kind anthropic: chat is translated to the Messages API
	// noStreamOptions: the provider refused stream_options (older Azure
	// API versions do), which the gateway adds to ask for a stream's
	// usage on a client's behalf: it is left out from then on.
	noStreamOptions atomic.Bool
}

// NewUpstream builds a client pool per provider. Providers must have a base
// URL (mock providers are given theirs by the caller once started). models
// give the max_tokens that anthropic providers send when a client sets none.
func NewUpstream(providers []config.Provider, models []config.Model) (*Upstream, error) {
	u := &Upstream{providers: make(map[string]*providerClient, len(providers)), maxTokens: make(map[string]int, len(models))}
	for _, m := range models {
		u.maxTokens[m.Name] = m.MaxTokens
	}
	for i, p := range providers {
		pc, err := newProviderClient(p)
		if err != nil {
			return nil, fmt.Errorf("providers[%d] %q: %w", i, p.Name, err)
		}
		u.providers[p.Name] = pc
	}
	return u, nil
}

func newProviderClient(p config.Provider) (*providerClient, error) {
	base, err := url.Parse(p.BaseURL)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("base_url %q is not a URL", p.BaseURL)
	}
	pc := &providerClient{
		cfg:       p,
		scheme:    base.Scheme,
		host:      base.Host,
		basePath:  strings.TrimSuffix(base.Path, "/"),
		baseQuery: base.RawQuery,
	}
	if base.RawQuery != "" {
		own, _ := url.ParseQuery(base.RawQuery)
		pc.baseNames = make(map[string]bool, len(own))
		for n := range own {
			pc.baseNames[strings.ToLower(n)] = true
		}
	}
	if p.APIKey != "" {
		pc.auth = "Bearer " + p.APIKey
	}
	pc.chatURI = pc.withQuery(pc.scheme + "://" + pc.host + pc.basePath + "/chat/completions")
	pc.upstreamSeconds = upstreamSeconds.WithLabelValues(p.Name)
	if p.Kind == "anthropic" {
		pc.setMessages()
	}
	pc.chatURL = &fasthttp.URI{}
	if err := pc.chatURL.Parse(nil, []byte(pc.chatURI)); err != nil {
		return nil, fmt.Errorf("base_url %q is not a URL", p.BaseURL)
	}
	addr := base.Host
	if base.Port() == "" {
		if base.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	if base.Scheme == "https" {
		pc.tls = &tls.Config{ServerName: base.Hostname(), MinVersion: tls.VersionTLS12}
	}
	connect := p.ConnectTimeout.D()
	pc.hc = &fasthttp.HostClient{
		Addr:                addr,
		Name:                "llmgw",
		IsTLS:               pc.tls != nil,
		TLSConfig:           pc.tls,
		MaxConns:            p.MaxConns,
		MaxIdleConnDuration: 90 * time.Second,
		// The most recently used idle connection first: a call after a
		// spike goes over a connection that just served one (the least
		// likely to have been closed by the upstream's idle timeout), and
		// the spike's extra connections idle out. fasthttp's default
		// (the oldest first) takes them all in turn, which keeps every one
		// alive and costs a copy of the whole idle list per call.
		ConnPoolStrategy:   fasthttp.LIFO,
		MaxConnWaitTimeout: connect,
		// Pass-through paths go upstream exactly as the gateway checked
		// them (proxy/path.go); the client must not re-normalise them.
		DisablePathNormalizing: true,
		// Chat calls stream their bodies and bound them themselves; this
		// bounds any call that lets fasthttp buffer a body.
		MaxResponseBodySize: p.MaxResponseBytes,
		ReadBufferSize:      p.ReadBuffer,
		Dial:                func(addr string) (net.Conn, error) { return pc.dialAside(addr, connect) },
		RetryIfErr:          pc.retryStale,
	}
	return pc, nil
}

// retryStale reports whether a call that failed is sent again. A call
// whose request was written nowhere, because the pooled connection it was
// to go on had been closed by the upstream while idle (errStaleConn), is:
// servers with short keep-alive timeouts (Node's and uvicorn's 5 s,
// against the pool's 90 s) close every idle connection, so the other idle
// ones are closed first and the call goes on a new connection. Without
// this, fasthttp sends a POST (every model call) once, and the first call
// after an idle spell failed as unreachable whatever the provider's
// retries. Otherwise fasthttp's own rule stands: an idempotent request
// (GET, HEAD, PUT, QUERY) is retried, a POST that reached the upstream is never
// sent again here (the provider's retries decide that). fasthttp bounds
// the attempts (MaxIdemponentCallAttempts).
func (pc *providerClient) retryStale(req *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
	if errors.Is(err, errStaleConn) {
		pc.hc.CloseIdleConnections()
		return false, true
	}
	h := &req.Header
	return false, h.IsGet() || h.IsHead() || h.IsPut() || h.IsQuery()
}

// dialAside dials on a goroutine of its own. Connecting (the dialer's
// address cache, the socket calls, a TLS handshake) runs deeper than any
// other step of a call, and on the calling goroutine it would grow that
// request's stack for as long as the goroutine lives: a stream's for the
// whole stream, a new connection being what an open stream usually needs.
func (pc *providerClient) dialAside(addr string, timeout time.Duration) (net.Conn, error) {
	type dialed struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		defer func() {
			// No request's recovery covers this goroutine: a panic (a bug)
			// fails the dial instead of ending the process.
			if r := recover(); r != nil {
				panics.Inc()
				ch <- dialed{nil, fmt.Errorf("proxy: dial panicked: %v", r)}
			}
		}()
		c, err := pc.dial(addr, timeout)
		ch <- dialed{c, err}
	}()
	d := <-ch
	return d.c, d.err
}

// dial connects to addr within timeout. For https it completes the TLS
// handshake itself (fasthttp then leaves the connection as it is), so that
// the tracked connection sees the plaintext request and can tell which call
// it carries.
func (pc *providerClient) dial(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := fasthttp.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			_ = c.Close() // a panic in the handshake (a TLS callback) leaves no socket open
			panic(r)
		}
	}()
	if pc.tls != nil {
		tc := tls.Client(c, pc.tls)
		_ = c.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			return nil, err
		}
		_ = c.SetDeadline(time.Time{})
		c = tc
	}
	return pc.conns.wrap(c), nil
}

// Close closes idle upstream connections.
func (u *Upstream) Close() {
	for _, pc := range u.providers {
		pc.hc.CloseIdleConnections()
	}
}

// provider returns the client for name, or nil.
func (u *Upstream) provider(name string) *providerClient { return u.providers[name] }

// Chat sends req upstream. Failures before the first body byte are
// *pipeline.UpstreamError; a Stream's later failures come from its Next.
//
// Chat keeps its own frame small: building the request and reading the
// answer are functions of their own, so that their locals are not on the
// stack while Do waits for the upstream. Every request's goroutine stack
// passes through here at its deepest, and a stream's goroutine keeps its
// stack for the whole stream: a path that stays within Go's 8 KiB stack
// holds half the memory per open stream of one that grows it to 16 KiB.
func (u *Upstream) Chat(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	return u.call(ctx, req, false)
}

// call is Chat, with the stream_options the gateway added left out when
// without is set.
func (u *Upstream) call(ctx context.Context, req *pipeline.Request, without bool) (*pipeline.Response, error) {
	x := upstreamCall{noStreamOptions: without}
	if err := u.prepare(ctx, req, &x); err != nil {
		return nil, err
	}
	err := x.pc.hc.Do(x.freq, x.resp)
	resp, err := u.answer(ctx, req, &x, err)
	if err != nil && !x.noStreamOptions && !x.pc.messages && refusedStreamOptions(req, err) {
		// Once more without them; the provider is marked only when that
		// call is answered, so that an unrelated 400 marks nothing.
		if resp, err = u.call(ctx, req, true); err == nil {
			x.pc.noStreamOptions.Store(true)
		}
	}
	return resp, err
}

// refusedStreamOptions reports whether err is the upstream's refusal of
// the stream_options the gateway added to req to meter a stream whose
// client asked for no usage (they are then {"include_usage":true} and
// nothing else): a 400 or 422 whose error names stream_options as its param,
// or says it knows no such argument (older Azure API versions: "Unrecognized
// request argument supplied: stream_options"). A client that asked for
// usage, or sent stream_options of its own, gets the refusal.
//
//go:noinline
func refusedStreamOptions(req *pipeline.Request, err error) bool {
	var ue *pipeline.UpstreamError
	if !req.Stream || req.IncludeUsage || !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamStatus ||
		ue.Status != fasthttp.StatusBadRequest && ue.Status != fasthttp.StatusUnprocessableEntity {
		return false
	}
	so := gjson.GetBytes(req.Body, "stream_options")
	n := 0
	so.ForEach(func(_, _ gjson.Result) bool { n++; return true })
	if n != 1 || !so.Get("include_usage").Bool() {
		return false
	}
	e := gjson.GetBytes(ue.Body, "error")
	if strings.HasPrefix(e.Get("param").Str, "stream_options") {
		return true
	}
	msg := strings.ToLower(e.Get("message").Str)
	if !strings.Contains(msg, "stream_options") {
		return false
	}
	for _, w := range unknownArgument {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// unknownArgument are the words of an error that says an argument is not
// one the upstream knows.
var unknownArgument = []string{"unrecognized", "unknown", "extra", "not permitted", "not allowed", "unsupported", "not supported"}

// upstreamCall is one call's state between prepare and answer.
type upstreamCall struct {
	pc              *providerClient
	target          *pipeline.Target
	freq            *fasthttp.Request
	resp            *fasthttp.Response
	c               *call
	start, deadline time.Time
	noStreamOptions bool // stream_options were left out (refusedStreamOptions)
}

// prepare builds the upstream request of req into x.
//
//go:noinline
func (u *Upstream) prepare(ctx context.Context, req *pipeline.Request, x *upstreamCall) error {
	target := req.TargetOrDefault()
	if target == nil {
		return pipeline.Internal(errors.New("proxy: request without target"), "no deployment for model")
	}
	pc := u.providers[target.Provider]
	if pc == nil {
		return pipeline.Internal(fmt.Errorf("proxy: unknown provider %q", target.Provider), "no deployment for model")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if req.Thinking != nil {
		req.Thinking.Blocks = nil // this attempt's, or none
	}
	body := req.Body
	if !pc.messages {
		body = withoutThinking(body) // the tool loop's member is Anthropic's alone
		if req.Stream && !req.IncludeUsage && (x.noStreamOptions || pc.noStreamOptions.Load()) {
			// Refused by this provider (refusedStreamOptions): the stream
			// comes without usage, and the meter charges its estimate.
			if b, err := sjson.DeleteBytes(body, "stream_options"); err == nil {
				body = b
			}
			x.noStreamOptions = true
		}
	}
	var model gjson.Result // the body's model string, to be replaced by the upstream's name
	if pc.messages {
		var err error
		if body, err = u.messagesBody(target, body); err != nil {
			return req.Messages.ClientError(err)
		}
	} else if m := gjson.Get(unsafe.String(unsafe.SliceData(body), len(body)), "model"); m.Str != target.Upstream {
		if m.Type == gjson.String && m.Index > 0 {
			model = m
		} else {
			var err error
			if body, err = sjson.SetBytes(body, "model", target.Upstream); err != nil {
				return pipeline.BadRequest("model", "cannot route the request")
			}
		}
	}

	freq := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	freq.Header.SetMethod(fasthttp.MethodPost)
	freq.SetURI(pc.chatURL)
	c := pc.conns.startCall(ctx, &freq.Header)
	pc.setHeaders(&freq.Header, req.ID)
	if trace.SpanContextFromContext(ctx).IsValid() {
		// traceparent, when traced (the global propagator takes a lock)
		otel.GetTextMapPropagator().Inject(ctx, headerCarrier{&freq.Header})
	}
	freq.Header.SetContentType("application/json")
	if model.Index > 0 {
		// Written into freq's pooled body buffer: no copy of the body of
		// its own (Body is never written).
		var q [128]byte
		freq.AppendBody(body[:model.Index])
		freq.AppendBody(jsonstring.Append(q[:0], target.Upstream))
		freq.AppendBody(body[model.Index+len(model.Raw):])
	} else {
		freq.SetBodyRaw(body)
	}

	start := time.Now()
	deadline := start.Add(pc.cfg.TotalTimeout.D())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// A stream's body is read event by event; a non-streamed body is read
	// whole by fasthttp, bounded by MaxResponseBodySize (the provider's
	// max_response_bytes), which costs no stream reader per call.
	resp.StreamBody = req.Stream
	if req.Stream {
		fb := start.Add(pc.cfg.FirstByteTimeout.D())
		if fb.After(deadline) {
			fb = deadline
		}
		freq.SetTimeout(time.Until(fb))
	} else {
		freq.SetTimeout(time.Until(deadline)) // the read deadline stays on for the body
	}
	*x = upstreamCall{pc: pc, target: target, freq: freq, resp: resp, c: c, start: start, deadline: deadline}
	return nil
}

// answer reads the outcome of x's Do.
//
//go:noinline
func (u *Upstream) answer(ctx context.Context, req *pipeline.Request, x *upstreamCall, err error) (*pipeline.Response, error) {
	pc, target, freq, resp, c, start, deadline := x.pc, x.target, x.freq, x.resp, x.c, x.start, x.deadline
	pc.upstreamSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		c.end()
		status := resp.StatusCode()
		release(freq, resp)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, fasthttp.ErrBodyTooLarge) {
			if status != fasthttp.StatusOK {
				// An error body too large to keep: the status without it.
				return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: status, Provider: target.Provider, Messages: req.Messages}
			}
			return nil, pc.bodyError(pipeline.ErrResponseTooLarge)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// The upstream answered, then closed before the end of its
			// answer: a cut, as the same answer streamed is, not a
			// connection that could not be made.
			return nil, pc.bodyError(err)
		}
		return nil, pc.transportError(err)
	}
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		ue := &pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: status, Provider: target.Provider,
			RetryAfter: retryAfter(&resp.Header), Body: readErrorBody(resp)}
		if pc.messages {
			ue = anthropic.StatusError(target.Provider, status, ue.Body, ue.RetryAfter)
			ue.Body = anthropic.Renumber(ue.Body, req.Body)
		}
		ue.Messages = req.Messages
		pc.endCall(c, freq, resp)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, ue
	}
	if !req.Stream {
		// resp's body goes back to the pool with resp: keep a copy, made
		// once (with the client's model name when it differs).
		out := resp.Body()
		var body []byte
		var failed error
		if !pc.messages && isEventStream(resp.Header.ContentType()) && !(firstNonSpace(out) < len(out) && out[firstNonSpace(out)] == '{' && jsonvalid.Bytes(out)) {
			// An upstream that streams whatever was asked for: the
			// answer its events hold, checked below as any JSON answer.
			if out, failed = pc.streamedAnswer(out, req.Model, req.Messages); failed != nil {
				pc.endCall(c, freq, resp)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, failed
			}
		}
		valid := jsonvalid.Bytes(out)
		switch {
		case pc.messages || !valid:
			body = append([]byte(nil), out...)
		default:
			// A 200 without a choice fails as the same answer streamed
			// does: JSON and stream clients get the same fallbacks.
			if failed = pc.noAnswer(out, req.Messages); failed != nil {
				break
			}
			// The keys the checks below count, once: their edits add no
			// key another one counts on, or only make it parse.
			keys := keysOfAnswer(out)
			fixed, _ := fillFinish(nil, callsFinishKeys(dropNullCalls(out, "message"), keys), finishStop)
			fixed = addNullsKeys(addFinishKeys(fixed, keys), keys)
			body = setModel(nil, stringArgs(flattenParts(fixed, "message"), "message"), req.Model)
			if len(body) > 0 && len(out) > 0 && &body[0] == &out[0] {
				body = append([]byte(nil), out...)
			}
		}
		pc.endCall(c, freq, resp)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if failed != nil {
			return nil, failed
		}
		if pc.messages {
			return decodeMessage(target.Provider, body, req)
		}
		if !valid {
			return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: target.Provider, Err: errors.New("response body is not JSON")}
		}
		return &pipeline.Response{Body: body}, nil
	}
	if isJSON(resp.Header.ContentType()) {
		// A stream asked for and JSON answered: an error object after the
		// 200, which is the failure it is in a JSON answer (errorAnswer),
		// or an upstream that does not stream, whose answer is bounded as
		// a JSON answer is (max_response_bytes). A Messages body is read
		// as a JSON answer of that API is (decodeMessage).
		limit := max(pc.cfg.MaxResponseBytes, maxErrorBody)
		body, rerr := readBounded(resp, limit)
		pc.endCall(c, freq, resp)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if rerr != nil {
			// Cut or stalled before its end: the failure it is when the
			// same answer is asked for as JSON (answer), not the part of
			// it that arrived.
			return nil, pc.bodyError(rerr)
		}
		if pc.messages {
			if len(body) >= limit {
				return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: target.Provider, Err: errJSONForStream}
			}
			r, err := decodeMessage(target.Provider, body, req)
			if err != nil {
				return nil, err
			}
			return &pipeline.Response{Stream: completionStream(r.Body, req.Model)}, nil
		}
		if e := gjson.GetBytes(body, "error"); e.Exists() && e.Type != gjson.Null {
			return nil, pc.errorAnswer(body, errErrorEvent, req.Messages)
		}
		if len(body) >= limit || !jsonvalid.Bytes(body) || pc.noAnswer(body, req.Messages) != nil {
			return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: target.Provider, Err: errJSONForStream}
		}
		// An upstream that does not stream: its answer, as the stream of it.
		return &pipeline.Response{Stream: completionStream(body, req.Model)}, nil
	}
	conn := c.conn.Load()
	if !c.end() {
		resp.SetConnectionClose() // cancelled while Do ran; the stream reports it
	}
	// The request was sent: the stream needs only the response, and an open
	// stream should not hold the request's headers and body.
	fasthttp.ReleaseRequest(freq)
	look := req.Lookahead
	if pc.messages {
		look = nil // its decoder passes over events: the writer may never hold for it
	}
	s := newUpstreamStream(ctx, pc, resp, conn, req.Model, deadline, look)
	s.msgMap = req.Messages
	if pc.messages {
		s.msgs = anthropic.NewStreamDecoder(target.Provider, chatHeader(req))
		s.msgs.StopAt(anthropic.LocalStops(req.Body))
		if req.Thinking != nil {
			s.msgs.NoteThinking(req.Thinking)
		}
	}
	return &pipeline.Response{Stream: s}, nil
}

// completionStream is a chat.completion (an upstream's JSON answer to a
// stream request) as the chunks a stream of it carries, under model,
// encoded by wire.ChatSSE as every stream the gateway makes is. Its usage
// chunk is there for the meter, which takes it out for a client that did
// not ask for it.
func completionStream(body []byte, model string) pipeline.Stream {
	res := gjson.GetManyBytes(body, "id", "created", "system_fingerprint", "service_tier")
	enc := wire.NewChatSSE(wire.Header{ID: res[0].Str, Created: res[1].Int(), Model: model,
		Fingerprint: res[2].Str, ServiceTier: res[3].Str, IncludeUsage: true})
	var chunks [][]byte
	wire.DecodeCompletion(body, func(e *wire.Event) {
		if c := enc.Encode(nil, e); len(c) > 0 {
			chunks = append(chunks, c)
		}
	})
	return &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
		if len(chunks) == 0 {
			return nil, io.EOF
		}
		c := chunks[0]
		chunks = chunks[1:]
		return c, nil
	}}
}

// errJSONForStream is the failure of a stream request answered with a
// JSON body that is not an error.
var errJSONForStream = errors.New("the upstream answered a stream request with JSON, not an event stream")

// endCall ends c and releases the request and response; a connection whose
// call was cancelled never goes back to the pool.
func (pc *providerClient) endCall(c *call, freq *fasthttp.Request, resp *fasthttp.Response) {
	if !c.end() {
		resp.SetConnectionClose()
	}
	release(freq, resp)
}

// bodyError classifies a failed read of a non-streamed body.
func (pc *providerClient) bodyError(err error) error {
	ue := &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: pc.cfg.Name, Err: err}
	var ne net.Error
	switch {
	case errors.Is(err, pipeline.ErrResponseTooLarge):
		ue.Kind = pipeline.UpstreamMalformed
	case errors.As(err, &ne) && ne.Timeout():
		ue.Kind = pipeline.UpstreamTimeout
	}
	return ue
}

// headerCarrier lets the trace propagator write request headers.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c headerCarrier) Keys() []string        { return nil }

// setHeaders writes the provider's own credentials and headers; nothing of
// the client's Authorization reaches the upstream.
func (pc *providerClient) setHeaders(h *fasthttp.RequestHeader, requestID string) {
	if pc.auth != "" {
		setOnly(h, fasthttp.HeaderAuthorization, pc.auth)
	}
	if pc.messages {
		pc.setMessagesHeaders(h)
	}
	for k, v := range pc.cfg.Headers {
		setOnly(h, k, v)
	}
	if requestID != "" {
		setOnly(h, "X-Request-Id", requestID)
	}
}

// setOnly makes v the one value of header k. fasthttp's Set replaces only
// the first of a repeated header: a pass-through request, which carries
// the client's headers, would send a second copy the client gave beside
// the gateway's (an operator's account header, Accept-Encoding).
func setOnly(h *fasthttp.RequestHeader, k, v string) {
	h.Del(k)
	h.Set(k, v)
}

func (pc *providerClient) transportError(err error) error {
	kind := pipeline.UpstreamConnect
	var ne net.Error
	var op *net.OpError
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		// An answer's head over the provider's read_buffer: the upstream
		// answered, with a head the gateway does not read.
		kind = pipeline.UpstreamMalformed
	case errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) ||
		errors.Is(err, fasthttp.ErrNoFreeConns) || (errors.As(err, &ne) && ne.Timeout()):
		kind = pipeline.UpstreamTimeout
	case errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &op) && op.Op == "read":
		// The upstream was reached and took the request, then closed or
		// reset the connection without an answer: cut, as a stream that
		// ends before its first event is, not unreachable. (fasthttp
		// reports a reset during a TLS handshake the same way: it is
		// counted here too.)
		kind = pipeline.UpstreamCut
	}
	return &pipeline.UpstreamError{Kind: kind, Provider: pc.cfg.Name, Err: err}
}

func release(req *fasthttp.Request, resp *fasthttp.Response) {
	_ = resp.CloseBodyStream()
	fasthttp.ReleaseRequest(req)
	fasthttp.ReleaseResponse(resp)
}

// readErrorBody copies at most maxErrorBody bytes of an error response.
func readErrorBody(resp *fasthttp.Response) []byte {
	b, _ := readBounded(resp, maxErrorBody) // what arrived of an error body is its message
	return b
}

// readBounded reads at most limit bytes of resp's body, and the error that
// ended the read before its end (a cut, a stall), or nil.
func readBounded(resp *fasthttp.Response, limit int) ([]byte, error) {
	if s := resp.BodyStream(); s != nil {
		buf := make([]byte, 0, 4096)
		for len(buf) < limit {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := s.Read(buf[len(buf):min(cap(buf), limit)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				return buf, err
			}
		}
		return buf, nil
	}
	b := resp.Body()
	if len(b) > limit {
		b = b[:limit]
	}
	return append([]byte(nil), b...), nil
}

// retryAfter reads retry-after-ms (preferred) or retry-after (seconds or an
// HTTP date).
func retryAfter(h *fasthttp.ResponseHeader) time.Duration {
	if v := h.Peek("Retry-After-Ms"); len(v) > 0 {
		if ms, err := strconv.ParseFloat(string(v), 64); err == nil && ms >= 0 {
			return retryDuration(ms, time.Millisecond)
		}
	}
	v := string(h.Peek(fasthttp.HeaderRetryAfter))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return retryDuration(s, time.Second)
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil {
		if d := time.Until(t); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

// maxRetryAfter bounds an upstream's Retry-After: a larger (or infinite)
// value would overflow the Duration, and the header the client gets.
const maxRetryAfter = 24 * time.Hour

// retryDuration is n units, at most maxRetryAfter (n is not negative).
func retryDuration(n float64, unit time.Duration) time.Duration {
	if d := n * float64(unit); d < float64(maxRetryAfter) {
		return time.Duration(d)
	}
	return maxRetryAfter // NaN is refused by the caller's n >= 0
}

// setModel appends to dst the JSON document doc with its top-level "model"
// replaced by model. When doc already names model (or has no model field) it
// returns doc itself.
func setModel(dst, doc []byte, model string) []byte {
	at, end, keep := modelSpan(doc, model)
	if keep {
		return doc
	}
	return spliceModel(dst, doc, at, end, model)
}

// modelSpan finds doc's top-level "model" value, doc[at:end]; keep is
// true when setModel leaves doc as it is (it names model already, or doc
// is not an object). A value that is not a string (an upstream's
// deployment object, a number) is replaced too, and a doc without a model
// gets one: at == end, an insertion after the opening brace. What it
// returns for a found value depends on doc[:end] only (gjson stops at the
// first top-level "model"): upstreamStream.rename relies on that.
func modelSpan(doc []byte, model string) (at, end int, keep bool) {
	r := gjson.Get(unsafe.String(unsafe.SliceData(doc), len(doc)), "model") // read-only view; no copy per chunk
	switch {
	case !r.Exists():
		if i := firstNonSpace(doc); i < len(doc)-1 && doc[i] == '{' {
			return i + 1, i + 1, false
		}
		return 0, 0, true
	case r.Index <= 0:
		return 0, 0, true
	}
	return r.Index, r.Index + len(r.Raw), r.Type == gjson.String && r.Str == model
}

// firstNonSpace returns the index of b's first byte that is not JSON
// whitespace (len(b) when there is none).
func firstNonSpace(b []byte) int {
	for i, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return i
		}
	}
	return len(b)
}

// spliceModel appends to dst doc with doc[at:end] replaced by model, as a
// JSON string; at == end inserts a "model" member there (modelSpan).
func spliceModel(dst, doc []byte, at, end int, model string) []byte {
	if n := len(doc) - (end - at) + len(model) + 12; cap(dst) < n {
		dst = make([]byte, 0, n+n/8) // one allocation; room for a few escapes
	}
	dst = append(dst[:0], doc[:at]...)
	if at == end {
		dst = append(dst, `"model":`...)
		dst = jsonstring.Append(dst, model)
		if rest := doc[end:]; firstNonSpace(rest) < len(rest) && rest[firstNonSpace(rest)] != '}' {
			dst = append(dst, ',')
		}
		return append(dst, doc[end:]...)
	}
	dst = jsonstring.Append(dst, model)
	return append(dst, doc[end:]...)
}

// withQuery returns uri with base_url's own query, if any.
func (pc *providerClient) withQuery(uri string) string {
	if pc.baseQuery == "" {
		return uri
	}
	return uri + "?" + pc.baseQuery
}

// methodOverrideParams are the query parameters some frameworks read as
// the request's method (Rails' and Laravel's _method, the header names as
// parameters): like the headers of the same meaning (clientOnlyHeaders),
// they would turn a request the tenant may make into one it may not, under
// the gateway's credentials. Never forwarded.
var methodOverrideParams = map[string]bool{"_method": true, "x_http_method_override": true,
	"x_http_method": true, "x_method_override": true}

// overrideName is a query parameter's name as the frameworks that honour
// method overrides read it: in lower case, with '-', and the '.', ' ' and
// '[' that PHP turns into '_' (".method" is PHP's "_method"), as '_'; PHP
// also drops leading spaces and ends a name at a NUL.
func overrideName(name string) string {
	name = strings.TrimLeft(name, " ")
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '.', ' ', '[':
			return '_'
		}
		return unicode.ToLower(r)
	}, name)
}

// query is the query a pass-through request sends upstream: the client's
// parameters as they came (each byte for byte), after base_url's own, whose parameters win:
// a client's parameter of the same name in any case (api-version=...,
// Api-Version=...) is left out, as a tenant must not choose what the
// operator set. Method overrides (methodOverrideParams) are left out too.
func (pc *providerClient) query(client []byte) string {
	if len(client) == 0 {
		return pc.baseQuery
	}
	out := pc.baseQuery
	for pair := range strings.SplitSeq(string(client), "&") {
		name, _, _ := strings.Cut(pair, "=")
		if pair == "" {
			continue
		}
		// A name that does not decode is sent as it came: no server reads
		// it as one of these.
		if n, err := url.QueryUnescape(name); err == nil && (pc.baseNames[strings.ToLower(n)] || methodOverrideParams[overrideName(n)]) {
			continue
		}
		if out != "" {
			out += "&"
		}
		out += pair
	}
	return out
}
