package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// exchange is one client request from its arrival to its end, and what its
// end records. begin creates it; the route's handler fills it in; finish
// ends it exactly once: in the handler's goroutine, or, when the response
// body streams (SSE, pass-through), in the body writer once it is done.
// The handler and the writer never use it at the same time.
type exchange struct {
	rt      *Runtime
	id      string
	idBuf   [idLen]byte // backs a generated id
	start   time.Time
	method  string // copied from the request
	route   string // metric label (routeLabel)
	path    string // the path for the log, when route labels many paths; "" = route
	tenant  string // the authenticated caller's tenant, for the log (a chat request's is req.Tenant)
	traceID string // a refused request's span's trace (Runtime.Refused), for the log (a served one's is req.TraceID)
	sse     bool   // pass-through: the answer is an event stream

	model    string            // a configured model name, or ""
	provider string            // pass-through: the provider that answered
	req      *pipeline.Request // chat: tenant, target, trace and meta for the log
	status   int               // as logged (499: the client left); 0 = the response's
	bytes    int
	ttfb     time.Duration  // 0 = the whole response left at once
	usage    wire.ChatUsage // the token counts of the answer's usage, when hasUsage
	hasUsage bool
	cause    error // the error written, for the log
	// call is a pass-through request's hold on its tenant's limits (its
	// slot in flight), from its admission (Policy.Limit) to finish, which
	// ends it: on every path, once the answer has ended.
	call Call

	// chatReq and meta back req for a chat request (chatRequest), so that
	// they cost no allocation of their own.
	chatReq pipeline.Request
	meta    pipeline.Meta
	look    pipeline.Lookahead // a stream's Request.Lookahead
	// usageLog backs a chat request's Request.Usage: its upstream calls'
	// usage for the access line, when the answer's own does not say it (a
	// stream that did not ask for usage, a tool loop that failed after a
	// round).
	usageLog pipeline.UsageLog

	chat   bool // counted in Server.chats (cancelled at shutdown)
	stream bool // an SSE stream, counted in activeStreams
	later  bool // a body writer finishes the request after the handler returns
	ended  atomic.Bool
}

// begin starts counting a request of rt.
func (s *Server) begin(ctx *fasthttp.RequestCtx, rt *Runtime) *exchange {
	rt.inflight.add()
	x := &exchange{rt: rt, start: time.Now(), method: methodName(ctx.Method()), route: routeLabel(string(ctx.Path()))}
	if x.route != chatRoute && x.route != modelsRoute {
		x.path = logPath(ctx.Path())
	}
	x.id = s.requestID(ctx, &x.idBuf)
	ctx.Response.Header.Set("X-Request-Id", x.id)
	return x
}

// methodName returns m as a string, without an allocation for the usual
// methods; another is cut at maxMethod bytes (the access line's path is
// bounded too: a made-up method of kilobytes filled lines).
func methodName(m []byte) string {
	for _, k := range knownMethods {
		if string(m) == k {
			return k
		}
	}
	m = m[:min(len(m), maxMethod)]
	for k := 0; k < utf8.UTFMax-1 && len(m) > 0 && !utf8.Valid(m); k++ { // not inside a character
		m = m[:len(m)-1]
	}
	return string(m)
}

// maxMethod bounds a method as the access line shows it.
const maxMethod = 32

var knownMethods = [...]string{fasthttp.MethodPost, fasthttp.MethodGet, fasthttp.MethodDelete, fasthttp.MethodPut,
	fasthttp.MethodPatch, fasthttp.MethodHead, fasthttp.MethodOptions}

// end finishes x after its handler returned, unless a body writer will.
func (s *Server) end(ctx *fasthttp.RequestCtx, x *exchange) {
	if x.later {
		return
	}
	if x.status == 0 {
		x.status = ctx.Response.StatusCode()
	}
	x.bytes = len(ctx.Response.Body())
	if x.bytes > unreadBytes {
		// Any route's large answer (a stored response, input_items,
		// /metrics, the usage report), not only chat's: fasthttp writes it
		// once the handler returns, without a deadline of its own.
		boundWrite(ctx, x)
	}
	s.finish(x)
}

// finish ends x once, whoever calls it: metrics, the one access-log line,
// and the in-flight counts.
func (s *Server) finish(x *exchange) {
	if x.ended.Swap(true) {
		return
	}
	if x.call != nil {
		x.call.End()
	}
	status := x.status
	if status == 0 {
		status = fasthttp.StatusOK
	}
	elapsed := time.Since(x.start)
	ttfb := x.ttfb
	if ttfb == 0 {
		ttfb = elapsed
	}
	requestCounts.Get(requestKey{x.route, x.model, status}).Inc()
	requestSecondsOf.Get(x.route).Observe(elapsed.Seconds())
	if x.answered() {
		firstByteOf.Get(x.route).Observe(ttfb.Seconds())
	}
	s.accessLog(x, status, elapsed, ttfb)
	if x.stream {
		activeStreams.Dec()
	}
	if x.chat {
		s.chats.done()
	}
	x.rt.inflight.done()
}

// statusLabels are the status codes as metric labels, made once.
var statusLabels = func() (l [600]string) {
	for i := 100; i < len(l); i++ {
		l[i] = strconv.Itoa(i)
	}
	return l
}()

// statusLabel returns status as a label; no allocation for 100-599.
func statusLabel(status int) string {
	if status >= 100 && status < len(statusLabels) {
		return statusLabels[status]
	}
	return strconv.Itoa(status)
}

// answered reports whether x is a chat request the pipeline answered (a
// JSON body or a stream, whatever its end): only those have a time to
// first byte worth a histogram.
func (x *exchange) answered() bool { return x.stream || (x.req != nil && x.cause == nil) }

// accessLog writes the request's one access-log line: warn from 500 on.
// The cause of an error shows at warn, or at debug level.
func (s *Server) accessLog(x *exchange, status int, elapsed, ttfb time.Duration) {
	var ev *zerolog.Event
	if status >= 500 {
		ev = s.log.Warn()
	} else {
		ev = s.log.Info()
	}
	if !ev.Enabled() {
		return
	}
	if x.cause != nil && (status >= 500 || s.log.GetLevel() <= zerolog.DebugLevel) {
		ev = ev.AnErr("cause", x.cause)
	}
	path := x.path
	if path == "" {
		path = x.route
	}
	ev = ev.Str("request_id", x.id).Str("method", x.method).Str("path", path).Str("model", x.model)
	provider := x.provider
	req := x.req
	if req != nil {
		if t := req.TargetOrDefault(); t != nil {
			provider = t.Provider
		}
	}
	if provider != "" {
		ev = ev.Str("provider", provider)
	}
	switch {
	case req != nil && req.Tenant != nil:
		ev = ev.Str("tenant", req.Tenant.Name)
	case x.tenant != "":
		ev = ev.Str("tenant", x.tenant)
	}
	switch {
	case req != nil && req.TraceID != "":
		ev = ev.Str("trace_id", req.TraceID)
	case x.traceID != "":
		ev = ev.Str("trace_id", x.traceID)
	}
	ev = ev.Int("status", status)
	switch {
	case req != nil:
		ev = ev.Bool("stream", req.Stream)
	case x.later: // a pass-through answer
		ev = ev.Bool("stream", x.sse)
	}
	ev = ev.Dur("latency", elapsed)
	if x.answered() {
		ev = ev.Dur("ttfb", ttfb)
	}
	ev = ev.Int("bytes", x.bytes)
	if x.hasUsage {
		u := &x.usage
		ev = ev.Int64("prompt_tokens", u.Prompt).Int64("completion_tokens", u.Completion).Int64("cached_tokens", u.Cached)
	}
	if req != nil {
		if m := req.Meta.Get("x-gateway-model"); m != "" {
			ev = ev.Str("answered_by", m)
		}
		// hit, miss or bypass, as the response header says: a hit's tokens
		// are the stored answer's, which no call spent now.
		if c := req.Meta.Get(caching.HeaderCache); c != "" {
			ev = ev.Str("cache", c)
		}
	}
	ev.Msg("request")
}

// maxLogPath bounds the path an access line shows.
const maxLogPath = 256

// logPath returns the request path p as the access line shows it: at
// most maxLogPath bytes.
func logPath(p []byte) string {
	if len(p) > maxLogPath {
		p = p[:maxLogPath]
	}
	return string(p)
}

// activity counts running requests and tells when none is left. The zero
// value is ready; safe for concurrent use.
type activity struct {
	mu   sync.Mutex
	n    int64
	idle chan struct{} // closed when n drops to 0; made only when someone waits (zero)
}

// closedIdle is the idle channel of an activity that has no request.
var closedIdle = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (a *activity) add() {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
}

func (a *activity) done() {
	a.mu.Lock()
	a.n--
	if a.n == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
	a.mu.Unlock()
}

// count returns the number of running requests.
func (a *activity) count() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// zero returns a channel closed once no request is running (at once, if
// none is now).
func (a *activity) zero() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == 0 {
		return closedIdle
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	return a.idle
}

// wait reports whether a had no running request within max.
func (a *activity) wait(max time.Duration) bool {
	z := a.zero()
	select {
	case <-z:
		return true
	default:
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-z:
		return true
	case <-t.C:
		return false
	}
}
