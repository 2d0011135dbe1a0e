// Package proxy is the HTTP edge of the gateway: the fasthttp server and its
// routes, request parsing at ingress, the one error mapper, the SSE sink, the
// pass-through reverse proxy for other /v1 paths, and the upstream client.
// *fasthttp.RequestCtx never leaves this package.
package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/panjf2000/ants/v2"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/lazyctx"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
)

// Runtime is everything built from one config: routes, the request-layer
// chain, the upstream clients. The server swaps it atomically on reload; a
// request keeps the Runtime it started with until it ends.
type Runtime struct {
	Config   *config.Config
	Routes   map[string]*pipeline.Route
	Chat     pipeline.Handler // the request layer, ending in the tool loop
	Upstream *Upstream
	// Usage answers the usage API (GET /v1/gateway/usage); nil = 404.
	Usage func(ctx context.Context, tenant string, from, to time.Time, groupBy string) ([]byte, error)
	// Policy applies the tenant policies to the routes outside the chat
	// pipeline (models, pass-through); nil admits everything.
	Policy Policy
	// Responses keeps stored Responses API responses; nil = /v1/responses
	// passes through to the providers.
	Responses *responses.Store
	// NativeResponses names the models whose provider serves the Responses
	// API itself (responses = "native"): their /v1/responses pass through.
	NativeResponses map[string]bool
	// ResponseOwners records which tenant created each response a
	// provider stores on a /v1/responses pass-through, and only that
	// tenant may name it (passowner.go). The gateway's build always sets
	// it, without keys too (every request is then the default tenant's);
	// nil, in a Runtime made by hand, keeps no records and checks nothing.
	ResponseOwners *responses.Owners
	// Ready reports readiness details for /readyz; nil means ready.
	Ready func() (ok bool, details map[string]string)
	// Refused, when set (tracing), records a chat or Responses request
	// refused before its request layer ran, whose spans that layer starts:
	// the client's traceparent and tracestate, the request's start and the
	// error it was answered with (ErrorStatus gives its status).
	Refused func(traceparent, tracestate string, responses bool, start time.Time, err error) (traceID string)
	// Close releases what the runtime holds, after its last request.
	Close func()

	modelsJSON []byte
	modelJSON  map[string][]byte
	inflight   activity // requests (and streams) of this runtime still running
}

// Drain waits until no request that started on rt is still running, or max
// has passed; it reports whether rt drained. It returns as soon as the last
// request finishes. Call it after the runtime was swapped out, before Close.
func (rt *Runtime) Drain(max time.Duration) bool { return rt.inflight.wait(max) }

// Server serves the gateway's routes. Safe for concurrent use.
type Server struct {
	rt     atomic.Pointer[Runtime]
	log    zerolog.Logger
	srv    *fasthttp.Server
	base   context.Context // cancelled when shutdown's grace period ends
	cancel context.CancelFunc
	idPfx  string
	idSeq  atomic.Uint64
	peers  peerWatcher // cancels requests whose client left
	chats  activity    // chat requests and streams still running
	// responsesMax bounds the output a streamed Responses answer keeps
	// (maxResponsesOutput; tests set less).
	responsesMax int

	connsMu sync.Mutex
	open    map[net.Conn]struct{} // the main listener's connections (ConnState)
	// hijack.go: the connections whose stream runs apart from fasthttp, and
	// those idle after a stream, waiting for their next request.
	streaming map[net.Conn]struct{}
	idle      map[*keptConn]struct{}
	awaiting  sync.Map     // net.Conn → handOver: an answer whose connection fasthttp has yet to hand over
	stopping  atomic.Bool  // Shutdown has begun: idle connections close
	draining  atomic.Bool  // Drain was called: /readyz is 503, every answer closes its connection
	handovers atomic.Int64 // streams given a goroutine of their own (hijackStream)
	// handingOver, when set (by tests, before Serve), runs as fasthttp
	// starts a stream's hand-over, before anything of the stream is
	// written from there.
	handingOver func()

	adminMu sync.Mutex
	admin   []*fasthttp.Server // operator listeners (ServeAdmin)

	// workers runs the streams handed over (hijack.go) and, after each,
	// its connection's next requests, on goroutines kept between them
	// (streamWorkers).
	workers *ants.Pool
}

// streamWorkers is how long a stream goroutine with nothing to do waits
// for the next stream before it ends. A stream's goroutine serves its
// connection's next requests when it ends, and a request needs a larger
// stack than a new goroutine starts with: a goroutine started per stream
// grew (copied) its stack for every request after a stream, about 5% of
// the CPU of short streams. A kept goroutine has grown already (until
// the collector shrinks an idle one).
const streamWorkers = 10 * time.Second

// idleWorkerTime is how long one of fasthttp's workers with nothing to do
// waits for the next connection before it ends (fasthttp looks for such
// workers as often). At 10,000 open streams opened at 2,500 a second, the
// idle workers their requests left held 1,000-1,600 goroutines' stacks a
// second later with 1 s here (about 30 MB); with 100 ms, none.
const idleWorkerTime = 100 * time.Millisecond

// maxPooledBody is the largest body buffer fasthttp keeps in its pools
// when a request or response is released (a client's body, an upstream's
// JSON answer): a larger one is left to the collector. The pools hand a
// buffer to the next request whatever its size, so a few answers refused
// at max_response_bytes (their buffers grown to it) stayed live for good,
// passed from request to request: 32 MiB each at the default.
const maxPooledBody = 1 << 20

func init() { fasthttp.SetBodySizePoolLimit(maxPooledBody, maxPooledBody) }

// NewServer returns a server for rt.
func NewServer(rt *Runtime, log zerolog.Logger) *Server {
	s := &Server{log: log, open: map[net.Conn]struct{}{}, streaming: map[net.Conn]struct{}{}, idle: map[*keptConn]struct{}{},
		responsesMax: maxResponsesOutput}
	// A Ctx: each open stream's request registers with it on a list, not
	// as a cancel context of its own in a children map (see lazyctx).
	base := lazyctx.New(context.Background(), time.Time{})
	s.base, s.cancel = base, base.Cancel
	s.workers, _ = ants.NewPool(-1, ants.WithExpiryDuration(streamWorkers), // unbounded: never fails
		ants.WithPanicHandler(func(r any) { // the stream recovers its own; this is the rest of the hand-over
			panics.Inc()
			log.Error().Str("panic", fmt.Sprint(r)).Bytes("stack", debug.Stack()).Msg("stream goroutine panicked")
		}))
	var p [6]byte
	_, _ = rand.Read(p[:])
	s.idPfx = "req_" + hex.EncodeToString(p[:])
	s.Swap(rt)
	cfg := rt.Config.Server
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		Name:               "llmgw",
		ReadTimeout:        cfg.ReadTimeout.D(),
		IdleTimeout:        cfg.IdleTimeout.D(),
		MaxRequestBodySize: cfg.MaxBodyBytes,
		ReadBufferSize:     cfg.ReadBuffer,
		WriteBufferSize:    cfg.WriteBuffer,
		StreamRequestBody:  true,
		// The gateway reads a multipart body itself (passbody.go), bounded,
		// after the caller's key: fasthttp's own parse would run before
		// it, for any caller, spill files over 16 MiB to temporary files,
		// and answer a malformed form as a request that is not HTTP.
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		CloseOnShutdown:              true,
		// A stream's request holds a worker until its first content, then
		// hands the stream over (hijack.go) and leaves the worker idle,
		// with a stack grown to the request path's depth (8-16 KiB). fasthttp
		// keeps an idle worker 10 s by default: after a burst of new
		// streams, one idle worker per stream. Workers are reused last in,
		// first out, so under steady load the ones in use are reused long
		// before 100 ms pass; the ones a burst left idle go within 200 ms.
		MaxIdleWorkerDuration: idleWorkerTime,
		KeepHijackedConns:     true, // a stream's connection is served again after it (hijack.go)
		ConnState:             s.connState,
		Logger:                fasthttpLogger{log},
		ErrorHandler:          s.readError,
		ExpectHandler:         s.expect,
	}
	return s
}

// Swap installs rt for new requests; in-flight requests finish on the old
// one. It returns the previous runtime.
func (s *Server) Swap(rt *Runtime) *Runtime {
	rt.modelsJSON, rt.modelJSON = buildModels(rt.Config)
	return s.rt.Swap(rt)
}

// Runtime returns the runtime new requests use.
func (s *Server) Runtime() *Runtime { return s.rt.Load() }

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(&retryListener{Listener: ln, log: &s.log})
}

// Drain begins a replica's leaving, before Shutdown: /readyz answers 503,
// so that load balancers stop sending it requests, and every answer from
// then on closes its connection, so that a client opens its next one
// (through the balancer) elsewhere. Requests are served as before.
func (s *Server) Drain() { s.draining.Store(true) }

// finalWrites bounds how long Shutdown waits, after the grace period, for
// the cancelled requests to write their error: a writer blocked on a client
// that does not read must not hold the process.
const finalWrites = 2 * time.Second

// Shutdown stops accepting, lets in-flight requests and streams finish until
// ctx ends, then cancels what is left and waits (up to finalWrites) until
// each has told its client (a stream ends with event: error), so that the
// caller may exit when Shutdown returns.
func (s *Server) Shutdown(ctx context.Context) error {
	s.connsMu.Lock()
	s.stopping.Store(true)
	// A connection idle after a stream waits for its next request outside
	// fasthttp, which would not close it.
	for c := range s.idle {
		_ = c.Close()
	}
	s.connsMu.Unlock()
	var final time.Time // set when the grace period ran out: what is left of finalWrites bounds the last wait too
	defer func() {
		// A handler that returned has its answer still to be written by
		// fasthttp (a JSON request cancelled at the grace period's end,
		// answered 503): closed now, its client would read a reset.
		d := finalWrites
		if !final.IsZero() {
			d = time.Until(final)
		}
		s.waitWritten(d)
		s.closeConns()
	}()
	s.adminMu.Lock()
	for _, a := range s.admin {
		_ = a.Shutdown() // operator routes answer at once: nothing to drain
	}
	s.adminMu.Unlock()
	done := make(chan error, 1)
	go func() { done <- s.srv.ShutdownWithContext(ctx) }()
	var err error
	select {
	case err = <-done:
		// fasthttp no longer counts a connection whose stream runs on a
		// goroutine of its own (hijack.go): wait for those streams too.
		select {
		case <-s.chats.zero():
			s.cancel()
		case <-ctx.Done():
			s.cancel()
			final = time.Now().Add(finalWrites)
			s.chats.wait(finalWrites)
			err = ctx.Err()
		}
	case <-ctx.Done():
		s.cancel() // ends the requests still running; their writers then return
		final = time.Now().Add(finalWrites)
		err = <-done
		s.chats.wait(time.Until(final))
	}
	s.peers.close()
	s.workers.Release()
	return err
}

// goStream runs f on a kept stream goroutine (streamWorkers), or a new
// one once the pool was released.
func (s *Server) goStream(f func()) {
	if s.workers.Submit(f) != nil {
		go f()
	}
}

// connState keeps the set of open connections, and closes a connection
// that goes idle once shutdown has begun: a stream that was running when
// it began leaves a keep-alive connection (and its goroutine) behind
// otherwise, since fasthttp only closes connections idle at its start.
func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		s.connsMu.Lock()
		s.open[c] = struct{}{}
		s.connsMu.Unlock()
	case fasthttp.StateIdle:
		if s.stopping.Load() {
			_ = c.Close()
		}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		if sk, ok := s.awaiting.Load(c); ok && st == fasthttp.StateClosed && s.awaiting.CompareAndDelete(c, sk) {
			// fasthttp closed the connection instead of handing it over:
			// the answer never started.
			sk.(handOver).abandon()
		}
		s.peers.forget(c)
		s.connsMu.Lock()
		if _, kept := c.(*keptConn); !kept || st == fasthttp.StateClosed {
			// A kept connection that fasthttp hands over again stays
			// serveStream's to count: this report may come after the
			// next stream's goroutine counted it again.
			delete(s.open, c)
		}
		s.connsMu.Unlock()
	}
}

// waitWritten waits, up to d, until fasthttp has closed every connection
// it serves (at shutdown it closes each once its answer is written).
func (s *Server) waitWritten(d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.connsMu.Lock()
		n := len(s.open)
		s.connsMu.Unlock()
		if n == 0 {
			return
		}
	}
}

// closeConns closes every connection still open when Shutdown returns:
// their requests have ended or were given up on.
func (s *Server) closeConns() {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for c := range s.open {
		_ = c.Close()
	}
	for c := range s.streaming { // a stream whose client stopped reading
		_ = c.Close()
	}
}

// unsupportedVersion refuses (505, its connection closed) a request line
// of an HTTP version other than 1.1 and 1.0: fasthttp serves any version
// it is given as HTTP/1.1, which a client speaking another would read
// wrongly.
func unsupportedVersion(ctx *fasthttp.RequestCtx) error {
	if p := ctx.Request.Header.Protocol(); string(p) == "HTTP/1.1" || string(p) == "HTTP/1.0" {
		return nil
	}
	ctx.SetConnectionClose()
	return &pipeline.Error{Status: fasthttp.StatusHTTPVersionNotSupported, Type: pipeline.TypeInvalidRequest,
		Code: pipeline.CodeHTTPVersionNotSupported, Message: "This server speaks HTTP/1.1 and HTTP/1.0."}
}

// requestID returns the client's X-Request-Id, or a new id written into
// buf: the string is a view of buf, which must outlive it and never change
// (it is the exchange's own array).
func (s *Server) requestID(ctx *fasthttp.RequestCtx, buf *[idLen]byte) string {
	if v := ctx.Request.Header.Peek("X-Request-Id"); len(v) > 0 && len(v) <= 128 && printable(v) {
		return string(v)
	}
	b := strconv.AppendUint(append(buf[:0], s.idPfx...), s.idSeq.Add(1), 36)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// idLen holds a generated request id: "req_", 12 hex digits, and a
// sequence number of at most 13 base-36 digits.
const idLen = 32

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// handle serves one request of the main listener; every request, whatever
// its route or outcome, ends through finish exactly once.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	x := s.begin(ctx, s.rt.Load())
	defer s.recoverRequest(ctx, x)
	s.route(ctx, x)
	if !x.later && x.cause != nil { // later first: a body writer may be setting cause already
		discardUnread(ctx, 4*int64(x.rt.Config.Server.MaxBodyBytes))
	}
	if s.draining.Load() && !ctx.Hijacked() { // a stream's head says so itself (hijackStream)
		ctx.SetConnectionClose()
	}
	s.end(ctx, x)
}

// discardUnread reads and drops what is left of a request body that an
// error answered before reading it all (a chunked body over the limit, a
// pass-through refused by its head), up to limit bytes. A connection
// closed with bytes unread is reset, and a client still sending reads the
// reset instead of the answer (an SDK then retries, as after a network
// error). A longer body, or an answer that closes the connection anyway,
// ends the connection.
func discardUnread(ctx *fasthttp.RequestCtx, limit int64) {
	if !ctx.Request.IsBodyStream() || ctx.Response.ConnectionClose() {
		return
	}
	if cl := ctx.Request.Header.ContentLength(); int64(cl) > limit {
		ctx.SetConnectionClose()
		return
	}
	n, err := io.Copy(io.Discard, io.LimitReader(ctx.RequestBodyStream(), limit+1))
	if err != nil || n > limit {
		ctx.SetConnectionClose()
	}
}

// recoverRequest turns a panic while serving x (a bug: no input should
// cause one) into a 500 in the OpenAI envelope on a connection that then
// closes, and a log line with the stack, instead of the end of the process
// and of every other request in it. A stream already handed to its own
// goroutine is that goroutine's (recoverStream).
func (s *Server) recoverRequest(ctx *fasthttp.RequestCtx, x *exchange) {
	r := recover()
	if r == nil {
		return
	}
	s.logPanic(r, x)
	if x.later {
		return
	}
	ctx.Response.Reset()
	ctx.SetConnectionClose()
	s.writeError(ctx, x, pipeline.Internal(fmt.Errorf("proxy: panic: %v", r), "internal error"))
	x.bytes = len(ctx.Response.Body())
	s.finish(x)
}

// recoverStream ends a stream whose goroutine panicked: its connection is
// closed (the client sees the stream cut, never a hang) and the request
// finished.
func (s *Server) recoverStream(conn net.Conn, sk *sink, r any) {
	s.logPanic(r, sk.x)
	s.connsMu.Lock()
	delete(s.streaming, conn)
	s.connsMu.Unlock()
	err := pipeline.Internal(fmt.Errorf("proxy: panic: %v", r), "internal error")
	if len(sk.head) > 0 && sk.written == 0 {
		// Nothing was written yet: the client gets the 500 a request
		// answered at once would get.
		resp := fasthttp.AcquireResponse()
		env := mapError(err)
		resp.SetStatusCode(env.status)
		resp.Header.SetContentType("application/json")
		resp.SetConnectionClose()
		resp.SetBody(env.body)
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		bw := bufio.NewWriter(conn)
		if resp.Write(bw) == nil {
			_ = bw.Flush()
		}
		fasthttp.ReleaseResponse(resp)
	}
	s.closeKept(conn)
	sk.x.status, sk.x.cause = fasthttp.StatusInternalServerError, err
	func() {
		defer func() { _ = recover() }() // the layers' Close may be what panicked
		sk.release()
	}()
	sk.cancel()
	s.finish(sk.x)
}

func (s *Server) logPanic(r any, x *exchange) {
	panics.Inc()
	s.log.Error().Str("request_id", x.id).Str("panic", fmt.Sprint(r)).Bytes("stack", debug.Stack()).Msg("request panicked")
}

// readError answers a request fasthttp could not read (a head over the
// read buffer, a malformed request line, a read timeout, a body over the
// limit) in the OpenAI envelope, with the status fasthttp would give it.
func (s *Server) readError(ctx *fasthttp.RequestCtx, err error) {
	var timeout interface{ Timeout() bool }
	var small *fasthttp.ErrSmallBuffer
	var e *pipeline.Error
	switch {
	case errors.As(err, &small):
		e = pipeline.Errorf(fasthttp.StatusRequestHeaderFieldsTooLarge, "invalid_request_error", "headers_too_large", "the request's headers are too large")
	case errors.As(err, &timeout) && timeout.Timeout():
		e = pipeline.Errorf(fasthttp.StatusRequestTimeout, "invalid_request_error", "request_timeout", "the request was not received in time")
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		e = pipeline.TooLarge("the request body is too large")
	default:
		e = pipeline.Errorf(fasthttp.StatusBadRequest, "invalid_request_error", "malformed_request", "the request could not be parsed as HTTP")
	}
	x := s.begin(ctx, s.rt.Load())
	if e.Status != fasthttp.StatusRequestEntityTooLarge && len(ctx.Request.Header.RawHeaders()) == 0 {
		// The head was never read: fasthttp's defaults (GET /) are not
		// the request's, and the access line must not say they were.
		x.method, x.path = "-", "-"
	}
	s.writeError(ctx, x, e)
	s.end(ctx, x)
	ctx.SetStatusCode(ctx.Response.StatusCode())
}

// earlyError writes e's envelope and a request id into ctx's response, for
// a request answered before it is served (readError, expect), and finishes
// it as any request is: it counts in the metrics and has its access line.
// It returns the status to answer with.
func (s *Server) earlyError(ctx *fasthttp.RequestCtx, e error) int {
	x := s.begin(ctx, s.rt.Load())
	s.writeError(ctx, x, e)
	s.end(ctx, x)
	return ctx.Response.StatusCode()
}

// expect answers a request that asks before sending its body (Expect:
// 100-continue) from its head, as its route would after the body: a body
// over max_body_bytes by its Content-Length is refused with the 413
// envelope; on a route that takes the caller's key (keyedRoute) a key the
// policy refuses gets its 401, and a body over the key's tenant's
// max_body_bytes the 413, all before the client sends a byte of the body;
// fasthttp closes the connection after. Any other goes on.
func (s *Server) expect(ctx *fasthttp.RequestCtx) int {
	if err := unsupportedVersion(ctx); err != nil {
		return s.earlyError(ctx, err)
	}
	cl := ctx.Request.Header.ContentLength()
	rt := s.rt.Load() // the limit a reload set, as the route reads it
	if max := rt.Config.Server.MaxBodyBytes; max > 0 && cl > max {
		return s.earlyError(ctx, tooLarge(max))
	}
	if err := ambiguousCredential(&ctx.Request.Header); err != nil {
		return s.earlyError(ctx, err)
	}
	if rt.Policy == nil {
		return fasthttp.StatusContinue
	}
	path, err := canonicalPath(string(ctx.Request.URI().PathOriginal()))
	if err != nil || !keyedRoute(path) {
		return fasthttp.StatusContinue // the route answers it
	}
	t, err := rt.authenticate(ctx)
	if err != nil {
		return s.earlyError(ctx, err)
	}
	if l := rt.Policy.BodyLimit(t); l > 0 && cl > l {
		return s.earlyError(ctx, tooLarge(l))
	}
	return fasthttp.StatusContinue
}

// keyedRoute reports whether route serves the canonical path only to a
// caller whose key the policy accepts (Runtime.authenticate), under its
// tenant's body limit: every /v1/ route but the operators' usage API,
// which takes the admin key.
func keyedRoute(path string) bool {
	return strings.HasPrefix(path, "/v1/") && path != usageRoute
}

// The routes the gateway serves itself; every other /v1/ path passes
// through to the provider.
const (
	chatRoute      = "/v1/chat/completions"
	responsesRoute = "/v1/responses"
	usageRoute     = "/v1/gateway/usage" // the operators' usage API
	modelsRoute    = "/v1/models"
)

func (s *Server) route(ctx *fasthttp.RequestCtx, x *exchange) {
	if err := unsupportedVersion(ctx); err != nil {
		s.writeError(ctx, x, err)
		return
	}
	if err := ambiguousCredential(&ctx.Request.Header); err != nil {
		s.writeError(ctx, x, err)
		return
	}
	path := chatRoute // the chat route needs no string of its own
	if raw := ctx.Request.URI().PathOriginal(); string(raw) != chatRoute {
		var err error
		if path, err = canonicalPath(string(raw)); err != nil {
			var ok bool
			if path, ok = modelIDPath(string(raw)); !ok || !(ctx.IsGet() || ctx.IsHead()) {
				s.writeError(ctx, x, err)
				return
			}
		}
	}
	switch {
	case path == chatRoute:
		if !ctx.IsPost() {
			s.methodNotAllowed(ctx, x, fasthttp.MethodPost)
			return
		}
		s.handleChat(ctx, x)
	case path == usageRoute:
		s.handleUsage(ctx, x)
	case path == modelsRoute || strings.HasPrefix(path, modelsRoute+"/"):
		if !ctx.IsGet() && !ctx.IsHead() { // HEAD is GET without the body (fasthttp leaves it out)
			if path == modelsRoute {
				s.methodNotAllowed(ctx, x, fasthttp.MethodGet+", "+fasthttp.MethodHead)
				return
			}
			s.handlePassthrough(ctx, x, path) // DELETE /v1/models/{ft model} belongs upstream
			return
		}
		s.handleModels(ctx, x, path)
	case responsesCollection(path) && x.rt.Responses != nil:
		// Not a stored response's id: a POST naming its model, which the
		// gateway serves (input_tokens, compact) or passes through.
		if !ctx.IsPost() {
			s.methodNotAllowed(ctx, x, fasthttp.MethodPost)
			return
		}
		s.handlePassthrough(ctx, x, path)
	case strings.HasPrefix(path, responsesRoute+"/") && x.rt.Responses != nil:
		s.handleStoredResponse(ctx, x, path)
	case !ctx.IsPost() && x.rt.Policy != nil && x.rt.Policy.ModelEndpoint(path):
		// A model endpoint takes a POST only (an OPTIONS or a GET is not
		// a body of the wrong type).
		s.methodNotAllowed(ctx, x, fasthttp.MethodPost)
	case strings.HasPrefix(path, "/v1/"):
		s.handlePassthrough(ctx, x, path)
	default:
		if !s.handleOps(ctx, x, path, true) {
			s.writeError(ctx, x, pipeline.NotFound(pipeline.CodeUnknownURL, "Unknown request URL: %s %s", ctx.Method(), truncate(path, 200)))
		}
	}
}

func (s *Server) methodNotAllowed(ctx *fasthttp.RequestCtx, x *exchange, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	s.writeError(ctx, x, pipeline.Invalid(fasthttp.StatusMethodNotAllowed, pipeline.CodeMethodNotAllowed,
		"Method %s is not allowed on %s; use %s", ctx.Method(), ctx.Path(), allow))
}

// ambiguousCredential refuses a request that names more than one
// credential: two Authorization or Api-Key headers, or both with different
// keys. bearer reads the first Authorization; a proxy in front that reads
// the last, or the Api-Key, would decide on another tenant than the
// gateway. Nothing is allocated for a request with one of each or none.
func ambiguousCredential(h *fasthttp.RequestHeader) error {
	auth, keys := h.PeekAll(fasthttp.HeaderAuthorization), len(h.PeekAll("Api-Key"))
	switch {
	case len(auth) > 1, keys > 1,
		// An Authorization that is no bearer token (Basic, or empty) beside
		// an Api-Key is another credential, which bearer would skip.
		// (auth itself is fasthttp's buffer, which the second PeekAll reused.)
		keys == 1 && len(auth) == 1 && (!hasBearer(h.Peek(fasthttp.HeaderAuthorization)) || bearer(h) != string(h.Peek("Api-Key"))):
		return pipeline.Invalid(fasthttp.StatusBadRequest, pipeline.CodeAmbiguousCredential,
			"The request carries more than one credential (Authorization or Api-Key headers); send one.")
	}
	return nil
}

// bearer returns the credential from Authorization: Bearer, or api-key.
func bearer(h *fasthttp.RequestHeader) string {
	if v := h.Peek(fasthttp.HeaderAuthorization); hasBearer(v) {
		return strings.Trim(string(v[7:]), " \t") // HTTP's whitespace only: a no-break space is part of the key
	}
	return string(h.Peek("Api-Key"))
}

// hasBearer reports whether an Authorization value is a bearer token.
func hasBearer(v []byte) bool {
	return len(v) > 7 && strings.EqualFold(string(v[:7]), "bearer ")
}

// writeError writes err as the OpenAI envelope and records it on x for
// finish.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, x *exchange, err error) {
	env := mapError(err)
	status := env.status
	if status == statusClientClosed { // nobody is listening; keep the log's meaning
		status = fasthttp.StatusBadRequest
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	if env.retryAfter > 0 && (status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable) {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(int((env.retryAfter+time.Second-1)/time.Second)))
		ctx.Response.Header.Set("Retry-After-Ms", strconv.FormatInt(env.retryAfter.Milliseconds(), 10))
		spentCounter(&ctx.Response.Header, err, env.retryAfter)
	}
	if env.permanent {
		ctx.Response.Header.Set("X-Should-Retry", "false")
	}
	ctx.SetBody(env.body)
	x.status, x.cause = env.logStatus, err
}

// ErrorStatus is the HTTP status a request that failed with err is
// answered with (the status of its access line: 499 for a client that
// left), from the one mapper.
func ErrorStatus(err error) int { return mapError(err).logStatus }

// refused hands a chat or Responses request refused before its request
// layer ran (x.cause) to Runtime.Refused: the request layer's span covers
// every answer after that.
func (s *Server) refused(ctx *fasthttp.RequestCtx, x *exchange, responses bool) {
	f := x.rt.Refused
	if f == nil || x.cause == nil {
		return
	}
	var tp, ts string
	if v := ctx.Request.Header.Peek("Traceparent"); len(v) > 0 && len(v) <= 128 {
		tp, ts = string(v), string(truncateBytes(ctx.Request.Header.Peek("Tracestate"), 512))
	}
	x.traceID = f(tp, ts, responses, x.start, x.cause)
}

// spentCounter makes the x-ratelimit-* trio of the counter that refused a
// request (err, a 429 of a spent per-minute counter: pipeline.Error.Spent)
// say so: none remaining, reset when the retry may pass. The trio the request's admission reported
// (already set from its Meta) is what remained then, which a later round
// of its tool loop may have used up since. A trio not reported is left
// out, as a tenant without rate rules gets none.
func spentCounter(h *fasthttp.ResponseHeader, err error, retry time.Duration) {
	var pe *pipeline.Error
	if !errors.As(err, &pe) || !pe.Spent || (pe.Type != pipeline.TypeTokens && pe.Type != pipeline.TypeRequests) {
		return
	}
	remaining := "X-Ratelimit-Remaining-" + pe.Type
	if len(h.Peek(remaining)) == 0 {
		return
	}
	h.Set(remaining, "0")
	h.Set("X-Ratelimit-Reset-"+pe.Type, retry.Round(time.Millisecond).String())
}

// routeLabel keeps metric label cardinality bounded.
func routeLabel(path string) string {
	switch { // constants only: path does not escape, so converting it costs nothing
	case path == chatRoute:
		return chatRoute
	case path == modelsRoute:
		return modelsRoute
	case path == responsesRoute:
		return responsesRoute
	case strings.HasPrefix(path, "/v1/models/"):
		return "/v1/models/{id}"
	case strings.HasPrefix(path, "/v1/"):
		return "/v1/*"
	default:
		return "other"
	}
}
