package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/internal/lazyctx"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// hopHeaders are meaningful only for one connection and never forwarded
// (RFC 9110 §7.6.1, as net/http/httputil does).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// gatewayOwnHeaders are the response headers the gateway writes itself
// (fasthttp frames the body and sets Date; X-Request-Id is the client's
// id): an upstream's values must not replace or double them.
var gatewayOwnHeaders = []string{"Content-Length", "X-Request-Id", "Server", "Date"}

// upstreamAccountHeaders name the gateway's account with the provider (its
// organisation and project, the provider's cookies for it): a client of the
// gateway gets none of them.
var upstreamAccountHeaders = []string{"Openai-Organization", "Openai-Project", "Set-Cookie", "Anthropic-Organization-Id"}

// upstreamOriginHeaders and upstreamOriginPrefixes describe the
// provider's origin, not the gateway's: relayed, an Alt-Svc would send a
// client's next requests to the provider's alternative service as if it
// were the gateway's, an HSTS policy would pin the gateway's host, a
// Clear-Site-Data would clear a browser's data for it, CORS and the
// cross-origin and reporting policies would be the provider's for the
// gateway's answers, and a WWW-Authenticate would ask for the provider's
// credentials (a provider's 401 is answered with the gateway's own
// message). upstreamOwnPrefixes: the gateway's own namespace, which an
// upstream (another llmgw in front of a provider, or a provider that means
// something else by it) must not write at the client (an x-gateway-cache:
// hit of its own, an x-gateway-model, a budget).
var (
	upstreamOriginHeaders = []string{"Alt-Svc", "Strict-Transport-Security", "Www-Authenticate", "Clear-Site-Data",
		"Content-Security-Policy", "Content-Security-Policy-Report-Only", "Nel", "Report-To", "Reporting-Endpoints",
		"Permissions-Policy"}
	upstreamOriginPrefixes = []string{"Access-Control-", "Cross-Origin-"}
	upstreamOwnPrefixes    = []string{"X-Gateway-"}
)

// upstreamLimitHeaders and upstreamLimitPrefixes name the provider's
// rate-limit headers: OpenAI's and the OpenAI-compatible servers'
// x-ratelimit-* (and a bare x-ratelimit), Anthropic's anthropic-ratelimit-*,
// and the IETF draft's RateLimit, RateLimit-Policy and RateLimit-* that
// other servers send. They count the gateway's one account, which every
// tenant shares: relayed, they would show a tenant the others' traffic,
// and an SDK that paces itself by them would back off for the others'
// load. A tenant with rate limits gets its own instead, as on the chat
// route (setMetaHeaders).
var (
	upstreamLimitHeaders  = []string{"X-Ratelimit", "Ratelimit", "Ratelimit-Policy"}
	upstreamLimitPrefixes = []string{"X-Ratelimit-", "Anthropic-Ratelimit-", "Ratelimit-"}
)

// clientOnlyHeaders carry the client's identity towards the gateway; the
// provider gets the gateway's own. A client's cookies are the gateway's
// site's, and an X-Api-Key (the Anthropic SDKs' header) may be a gateway
// key, which the provider must never see. The method and URL overrides
// some servers honour (X-HTTP-Method-Override, X-Original-URL) would turn
// a request the tenant may make (POST /v1/embeddings) into one it may not
// (DELETE /v1/files/...), under the gateway's credentials.
var clientOnlyHeaders = []string{"Authorization", "Api-Key", "X-Api-Key", "Cookie", "Openai-Organization", "Openai-Project", "Host", "Content-Length", "Forwarded", "X-Real-Ip",
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Url", "X-Rewrite-Url", "X-Original-Method"}

// clientOnlyPrefixes start the names of more headers that stay with the
// gateway: its own namespace (a client's x-gateway-* controls the gateway,
// or claims to: x-gateway-tenant) and the forwarding claims a client may
// write (X-Forwarded-For: unverified, and the client's address is not the
// provider's business), as on chat, which forwards none of them.
var clientOnlyPrefixes = []string{"X-Gateway-", "X-Forwarded-"}

// errRedirect is the cause of the failure of a pass-through request the
// upstream answered with a redirect.
var errRedirect = errors.New("proxy: the upstream answered a pass-through request with a redirect")

// handlePassthrough forwards any other /v1/* request to a provider, under
// the same tenant policy as chat: the path must be on the tenant's
// pass-through allow-list, the body is bounded by the tenant's limit, and a
// body that names a model (JSON or a multipart form field) passes the same
// Admit as a chat request (allow-list, body size, token caps) and goes to
// that model's provider under its upstream name. A model that is not
// configured is refused unless server.passthrough_unknown_models is set.
// Other bodies (binary uploads) stream through, bounded by the same limit.
// Every request then passes the tenant's rate limits and budgets as a chat
// request does (Policy.Limit) and holds its slot in flight until finish.
// path is the canonical path (canonicalPath).
func (s *Server) handlePassthrough(ctx *fasthttp.RequestCtx, x *exchange, path string) {
	pc, pb, err := s.passTarget(ctx, x, path)
	if err != nil {
		s.passError(ctx, x, err)
		if path == responsesRoute && x.rt.Responses != nil {
			s.refused(ctx, x, true) // a request the gateway's Responses API may have served
		}
		return
	}
	x.tenant = tenantName(pb.tenant)
	if pb.native {
		if path == inputTokensRoute {
			setMetaHeaders(ctx, &x.meta) // the limits it passed (passTarget), on its answer as on any request's
			s.handleInputTokens(ctx, x, pb.tenant, pb.body)
		} else {
			s.handleResponses(ctx, x, pb.tenant, pb.body)
		}
		return
	}
	freq := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	timeout := outboundRequest(ctx, freq, pc, pb, x.id)
	if pb.upload != nil {
		// fasthttp's one timeout covers sending the upload too: give it the
		// server's read timeout on top, and tell a slow client apart from a
		// slow upstream afterwards.
		timeout += x.rt.Config.Server.ReadTimeout.D()
	}
	resp.StreamBody = true
	freq.SetTimeout(timeout)
	// A client that leaves before the answer's head cancels the call, as
	// on the chat route (see runChat); once the body flows, a failed write
	// to the client ends the copy.
	rctx := lazyctx.New(s.base, time.Time{})
	watch := s.peers.watch(ctx.Conn(), rctx.Cancel)
	c := pc.conns.startCall(rctx, &freq.Header)
	err = pc.hc.Do(freq, resp)
	s.peers.unwatch(watch)
	if !c.end() {
		resp.SetConnectionClose() // cancelled while Do ran
	}
	left := rctx.Err() != nil
	rctx.Cancel()
	if err != nil {
		release(freq, resp)
		switch {
		case pb.upload != nil && pb.upload.err != nil:
			err = pb.upload.err // the client's side failed: not the upstream's fault
			// The rest of the upload may still be on its way: it must not
			// be read as the connection's next request.
			ctx.SetConnectionClose()
		case left && s.base.Err() != nil:
			err = errShuttingDown
		case left:
			err = pipeline.ErrClientGone
		default:
			err = pc.transportError(err)
		}
		if left && pb.metered && pb.estimate && x.call != nil {
			// The provider had the request and may bill it: its input is
			// estimated, as a chat call's whose client left is.
			x.call.Charge(wire.ChatUsage{}, true)
		}
		s.passError(ctx, x, err)
		return
	}
	pc.upstreamSeconds.Observe(time.Since(x.start).Seconds())
	if st := resp.StatusCode(); st >= fasthttp.StatusBadRequest {
		// An error answer goes through the chat route's mapping (mapError):
		// its status, retry-after, message, type, param and code, with the
		// gateway's configured secrets masked, and the gateway's own
		// message when it is about the gateway's provider key (401, 403,
		// 407, or a credentials type or code at any status). Relayed as it
		// was, an upstream that quotes the Authorization header it got
		// showed the client the gateway's key.
		ue := &pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: st, Provider: pc.cfg.Name,
			RetryAfter: retryAfter(&resp.Header), Body: readErrorBody(resp)}
		resp.SetConnectionClose() // its body may not have been read to the end
		release(freq, resp)
		x.provider = pc.cfg.Name
		s.passError(ctx, x, ue)
		return
	}
	if st := resp.StatusCode(); st >= fasthttp.StatusMultipleChoices && st != fasthttp.StatusNotModified {
		// A redirect names an address of the upstream's choosing, which a
		// client follows with its request (its body, its key to the
		// gateway): never relayed. A 304 answers the client's own
		// conditional request. The log says where it pointed (a trailing
		// slash the upstream wanted, another host), masked.
		cause := fmt.Errorf("%w: %d to %s", errRedirect, st, redactCut(string(resp.Header.Peek("Location")), 256))
		resp.SetConnectionClose()
		release(freq, resp)
		x.provider = pc.cfg.Name
		s.passError(ctx, x, pc.malformed(cause))
		return
	}
	if compressed(&resp.Header) {
		// Asked for identity (outboundRequest), compressed anyway: neither
		// the meter nor the mask can read it, and relayed as it is it would
		// go uncharged and unmasked.
		resp.SetConnectionClose()
		release(freq, resp)
		x.provider = pc.cfg.Name
		s.passError(ctx, x, pc.malformed(errCompressedAnswer))
		return
	}
	ctx.SetStatusCode(resp.StatusCode())
	copyResponseHeaders(&ctx.Response.Header, &resp.Header)
	setMetaHeaders(ctx, &x.meta)
	x.status, x.provider, x.later = resp.StatusCode(), pc.cfg.Name, true
	x.sse = isEventStream(resp.Header.ContentType())
	var m *passMeter
	if pb.metered && x.call != nil && resp.StatusCode() < 300 {
		// An answered call costs the tenant what it reports, as a chat call does.
		m = &passMeter{call: x.call, estimate: pb.estimate, tap: newUsageTap(resp.Header.ContentType())}
	}
	var own *ownerRecord
	if (pb.record || pb.recordItems) && resp.StatusCode() < 300 {
		if tap := newOwnerTap(resp.Header.ContentType()); tap != nil {
			tap.done = !pb.record // the response id is the path's, recorded
			own = &ownerRecord{tap: tap, items: newItemTap(tap.sse), owners: x.rt.ResponseOwners, tenant: tenantName(pb.tenant)}
		}
	}
	s.writeBody(ctx, x, s.copyBody(x, pc, freq, resp, ctx.Conn(), m, own))
}

// passError writes err as a pass-through request's answer, with the
// headers its admission reported (the tenant's x-ratelimit-*: a 429 of the
// tenant's limits or of the upstream's carries them, as on the chat route).
func (s *Server) passError(ctx *fasthttp.RequestCtx, x *exchange, err error) {
	setMetaHeaders(ctx, &x.meta)
	s.writeError(ctx, x, err)
}

// writeBody has body write a pass-through answer: through fasthttp for an
// HTTP/1.1 client (chunked, its length being unknown); for an HTTP/1.0
// client, which knows no chunked framing and which fasthttp would answer
// chunked all the same, as it is on the hijacked connection, ended by
// closing it, as a chat stream is (hijackStream).
func (s *Server) writeBody(ctx *fasthttp.RequestCtx, x *exchange, body fasthttp.StreamWriter) {
	conn := ctx.Conn()
	if ctx.Request.Header.IsHTTP11() || ctx.IsHead() {
		ctx.SetBodyStreamWriter(body)
		return
	}
	ctx.Response.SetConnectionClose()
	ctx.Response.Header.SetContentLength(-2) // no framing: the body ends with the connection
	h := &passHandOver{s: s, head: ctx.Response.Header.AppendBytes(nil), body: body}
	// fasthttp stops counting a connection it hands over: Shutdown waits
	// for the copy as for a chat stream (an unframed body cut by a
	// shutdown would look complete). Until fasthttp hands the connection
	// over, a connection it closes instead ends the copy as a client that
	// left does (connState).
	s.chats.add()
	s.awaiting.Store(conn, h)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		if !s.awaiting.CompareAndDelete(conn, h) {
			return
		}
		s.connsMu.Lock()
		s.streaming[conn] = struct{}{} // closed by Shutdown at its deadline
		s.connsMu.Unlock()
		defer func() {
			if r := recover(); r != nil {
				s.logPanic(r, x) // the client sees its answer cut, never a hang
				s.finish(x)      // once: the copy may have finished it
			}
			s.connsMu.Lock()
			delete(s.streaming, conn)
			s.connsMu.Unlock()
			s.closeKept(conn) // the end of the body (the server keeps hijacked connections)
			s.chats.done()
		}()
		w := bufio.NewWriterSize(c, 4<<10)
		if _, err := w.Write(h.head); err != nil {
			h.body(goneBody())
			return
		}
		body(w)       // each write flushed (relay)
		_ = w.Flush() // the head, when the body was empty
	})
}

// passHandOver is a pass-through answer to an HTTP/1.0 client waiting for
// its connection to be handed over: the head to write, then the body.
type passHandOver struct {
	s    *Server
	head []byte
	body fasthttp.StreamWriter
}

// abandon runs the copy for a client that is gone: it releases the
// upstream answer, charges its usage and finishes the request.
func (h *passHandOver) abandon() {
	h.body(goneBody())
	h.s.chats.done()
}

// goneBody is the writer of a client that is gone.
func goneBody() *bufio.Writer { return bufio.NewWriterSize(goneWriter{}, 16) }

// goneWriter is the connection of a client that is gone.
type goneWriter struct{}

func (goneWriter) Write([]byte) (int, error) { return 0, net.ErrClosed }

// passMeter charges a pass-through call with the usage its answer reports
// (Call.Charge), read by tap while the answer is copied.
type passMeter struct {
	call     Call
	estimate bool // without a reported usage, charge an estimate of the request's body
	tap      *usageTap
}

// charge charges the call and returns the usage the answer reported (ok
// false when it reported none: then an estimate was charged, if any).
func (m *passMeter) charge() (u wire.ChatUsage, ok bool) {
	if m.tap != nil {
		u, ok = m.tap.usage()
	}
	switch {
	case ok:
		m.call.Charge(u, false)
	case m.estimate || u.Completion > 0:
		// No usage read (none reported, or the answer was cut): the
		// input's estimate for a JSON call, and the output the tap saw.
		m.call.Charge(u, m.estimate)
	}
	return u, ok
}

// passTarget applies the tenant policy to a pass-through request and picks
// its provider: the checks of handlePassthrough, in order, before anything
// goes upstream. It sets x.model.
func (s *Server) passTarget(ctx *fasthttp.RequestCtx, x *exchange, path string) (*providerClient, passBody, error) {
	rt := x.rt
	t, err := rt.authenticate(ctx)
	if err != nil {
		return nil, passBody{}, err
	}
	x.tenant = tenantName(t) // a refusal's access line names it too
	if strings.EqualFold(path, chatRoute) || !strings.HasPrefix(string(ctx.Request.URI().PathOriginal()), "/v1/") {
		// A case variant of the chat route must not reach the upstream's
		// chat endpoint around the pipeline.
		return nil, passBody{}, unknownURL(path)
	}
	if rt.Policy != nil && !rt.Policy.AllowsPath(t, path) && !(responsesCollection(path) && rt.Policy.AllowsPath(t, responsesRoute)) {
		// A collection of the Responses API comes with it for the models
		// the gateway serves; passed through, it needs its own path
		// (passthroughBody), once the model is known.
		return nil, passBody{}, pathNotAllowed(path)
	}
	if err := s.checkOwnedPath(rt, tenantName(t), path); err != nil {
		return nil, passBody{}, err
	}
	limit := rt.Config.Server.MaxBodyBytes
	if rt.Policy != nil {
		if l := rt.Policy.BodyLimit(t); l > 0 && l < limit {
			limit = l
		}
	}
	pb, err := s.passthroughBody(ctx, x, t, path, limit)
	x.model = pb.model
	pb.tenant = t
	pb.recordItems = rt.ResponseOwners != nil && answersResponse(path, ctx.IsGet(), ctx.IsPost())
	if err != nil || pb.native {
		return nil, pb, err
	}
	provider := pb.provider
	if provider == "" {
		provider = rt.Config.Server.DefaultProvider
	}
	pc := rt.Upstream.provider(provider)
	if pc == nil {
		return nil, pb, pipeline.NotFound(pipeline.CodeUnknownURL, "No provider serves %s", truncate(path, 200))
	}
	return pc, pb, nil
}

// pathNotAllowed is the 403 of a path not on the tenant's allow-list.
func pathNotAllowed(path string) error {
	return pipeline.Forbidden(pipeline.CodePathNotAllowed,
		"%s is not open to this caller through this gateway.", truncate(path, 200)) // an open gateway's caller has no key
}

// outboundRequest fills freq with the client's request for pc: its method,
// its original path under pc's base path, its query and its headers minus
// the hop-by-hop and client-only ones, with the gateway's credentials and
// pb's body or upload. It returns the upstream's first-byte timeout.
func outboundRequest(ctx *fasthttp.RequestCtx, freq *fasthttp.Request, pc *providerClient, pb passBody, id string) time.Duration {
	ctx.Request.Header.CopyTo(&freq.Header)
	if !freq.Header.IsHTTP11() {
		// The client's protocol is its own hop's: an HTTP/1.0 client's
		// request went upstream as HTTP/1.0, which closed the provider's
		// connection after every answer.
		freq.Header.SetProtocol("HTTP/1.1")
	}
	for _, h := range hopByHop(ctx.Request.Header.Peek("Connection")) {
		freq.Header.Del(h)
	}
	for _, h := range clientOnlyHeaders {
		freq.Header.Del(h)
	}
	var prefixed []string // made only when the client sent such a header
	for k := range freq.Header.All() {
		for _, p := range clientOnlyPrefixes {
			if len(k) >= len(p) && strings.EqualFold(string(k[:len(p)]), p) {
				prefixed = append(prefixed, string(k))
			}
		}
	}
	for _, h := range prefixed {
		freq.Header.Del(h)
	}
	// The original path: a decoded %3F must not become a query upstream.
	// canonicalPath refused every dot segment, so it stays under basePath.
	uri := pc.scheme + "://" + pc.host + pc.basePath + strings.TrimPrefix(string(ctx.Request.URI().PathOriginal()), "/v1")
	if q := pc.query(ctx.URI().QueryString()); q != "" {
		uri += "?" + q
	}
	freq.SetRequestURI(uri)
	freq.Header.SetMethodBytes(ctx.Method())
	pc.setHeaders(&freq.Header, id)
	// Uncompressed: the answer's usage is read on its way through
	// (passMeter), an error answer is mapped (mapError) and an event
	// stream masked (lineMasker), none of which can read compressed bytes.
	setOnly(&freq.Header, fasthttp.HeaderAcceptEncoding, "identity")
	if pb.upload != nil {
		// The upload is a reader the client's connection feeds (the
		// upload owns the server's request stream; fasthttp never sees it
		// here, so it is released once).
		freq.SetBodyStream(pb.upload, ctx.Request.Header.ContentLength())
	} else {
		freq.SetBodyRaw(pb.body)
	}
	return pc.cfg.FirstByteTimeout.D()
}

// copyResponseHeaders copies an upstream response's headers to the client's
// response, without the hop-by-hop ones (those its Connection header lists
// included), those the gateway writes itself and those about the gateway's
// provider account (its identity, its rate limits), its origin, or in the
// gateway's own namespace.
func copyResponseHeaders(dst, src *fasthttp.ResponseHeader) {
	hop := hopByHop(src.Peek("Connection"))
	for k, v := range src.All() {
		ks := string(k)
		if hasFold(hop, ks) || hasFold(gatewayOwnHeaders, ks) || hasFold(upstreamAccountHeaders, ks) ||
			hasFold(upstreamLimitHeaders, ks) || hasPrefixFold(upstreamLimitPrefixes, ks) ||
			hasFold(upstreamOriginHeaders, ks) || hasPrefixFold(upstreamOriginPrefixes, ks) || hasPrefixFold(upstreamOwnPrefixes, ks) {
			continue
		}
		// A header quoting the gateway's key (an echo of the request's) or
		// a provider's address (Location, Link, a backend host) is
		// masked, as the body is.
		dst.AddBytesKV(k, observe.UpstreamAddrs.RedactSecrets(observe.Secrets.RedactSecrets(v))) // every value of a repeated one
	}
}

// compressed reports whether an answer's Content-Encoding names a coding
// other than identity (each of a list). fasthttp keeps only the last
// Content-Encoding line of an answer: one that sends two is caught by its
// first bytes instead (looksCompressed).
func compressed(h *fasthttp.ResponseHeader) bool {
	for c := range bytes.SplitSeq(h.ContentEncoding(), []byte(",")) {
		if c = bytes.TrimSpace(c); len(c) > 0 && !bytes.EqualFold(c, []byte("identity")) {
			return true
		}
	}
	return false
}

// looksCompressed reports whether b, the first bytes of an answer, start
// as gzip, zstd or zlib data do: no text does (their second bytes are no
// UTF-8 a text begins with).
func looksCompressed(b []byte) bool {
	for _, m := range compressedMagic {
		if bytes.HasPrefix(b, []byte(m)) {
			return true
		}
	}
	return false
}

// compressedMagic are the first bytes of gzip, zstd and zlib (its three
// common levels) data.
var compressedMagic = [...]string{"\x1f\x8b", "\x28\xb5\x2f\xfd", "\x78\x01", "\x78\x9c", "\x78\xda"}

// magicLen is the length of the longest of compressedMagic (zstd's).
const magicLen = 4

// compressedPrefix reports whether b, shorter than magicLen, may be the
// start of one of compressedMagic.
func compressedPrefix(b []byte) bool {
	for _, m := range compressedMagic {
		if len(b) < len(m) && string(b) == m[:len(b)] {
			return true
		}
	}
	return false
}

// errCompressedAnswer is the cause of a pass-through answer compressed
// though the gateway asked for it uncompressed.
var errCompressedAnswer = errors.New("proxy: the upstream answered compressed, though asked for identity")

// copyBody returns the writer that streams resp's body to the client, with
// the provider's idle timeout between reads, and then finishes x. m (may
// be nil) meters the answer; own (may be nil) records the response it
// creates before the client reads its id. It owns freq and resp and
// releases them. A truncated upstream body closes the client's
// connection: it must not end with a clean final chunk.
func (s *Server) copyBody(x *exchange, pc *providerClient, freq *fasthttp.Request, resp *fasthttp.Response, client net.Conn, m *passMeter, own *ownerRecord) fasthttp.StreamWriter {
	conn := pc.conns.lookup(resp.LocalAddr())
	if conn != nil {
		_ = conn.SetReadDeadline(time.Time{})
	}
	idle := pc.cfg.StreamIdleTimeout.D()
	var end time.Time // the provider's total_timeout, counted from the request's start
	if total := pc.cfg.TotalTimeout.D(); total > 0 {
		end = x.start.Add(total)
	}
	wt := x.rt.Config.Server.WriteTimeout.D()
	var tap *usageTap
	if m != nil {
		tap = m.tap
	}
	var mask *lineMasker
	switch ct := resp.Header.ContentType(); {
	case isEventStream(ct):
		// An event stream is text whose events may be errors quoting the
		// gateway's key, as an error status's body may (handlePassthrough):
		// its lines go out with the configured secrets masked, escaped
		// forms included.
		mask = &lineMasker{}
	case isText(ct):
		// A JSON answer too, as it passes (an upstream that echoes the
		// request's headers): its raw form; and any other answer that is
		// not binary media (a problem+json, NDJSON, plain text, XML, no
		// type at all). Audio, files and images go as they are.
		mask = &lineMasker{json: true}
	}
	return func(w *bufio.Writer) {
		// fasthttp runs this in a goroutine of its own (SetBodyStreamWriter)
		// that recovers nothing: a panic here (a bug) must end this answer,
		// not the process.
		released := false
		var watch peerWatch // the client's, while a stream is copied
		defer func() {
			if r := recover(); r != nil {
				s.peers.unwatch(watch)
				s.recoverBody(x, client, r)
				if !released {
					released = true
					release(freq, resp)
				}
			}
		}()
		src := resp.BodyStream()
		buf := make([]byte, 32<<10)
		gone, drained, cut, first := false, 0, false, true
		// A client that leaves while the upstream is silent is noticed at
		// once, as on the chat route (a failed write notices only when the
		// next bytes come). A stream's upstream connection is closed (the
		// read it waits in fails), so the provider stops generating and
		// the call's concurrency slot is let go. A JSON answer is read on
		// for its usage (below), each read waiting drainIdle at most.
		var (
			left      atomic.Bool
			watchMu   sync.Mutex
			unwatched bool // the copy ended: a late callback must not touch a connection back in the pool
		)
		if conn != nil {
			sse := x.sse
			watch = s.peers.watch(client, func() {
				watchMu.Lock()
				defer watchMu.Unlock()
				if unwatched {
					return
				}
				left.Store(true)
				if sse {
					_ = conn.Close()
				} else {
					_ = conn.SetReadDeadline(time.Now().Add(drainIdle))
				}
			})
		}
		for src != nil {
			// Under watchMu, so that the callback's short deadline is
			// never overwritten by a long one set after it.
			watchMu.Lock()
			if left.Load() && !x.sse {
				gone = true // writes to it would fail: read on for the usage alone
			}
			if gone && (tap == nil || tap.settled()) {
				watchMu.Unlock()
				break // nothing more to read on for
			}
			if conn != nil && (idle > 0 || !end.IsZero() || gone) {
				wait := idle
				if gone && (wait <= 0 || wait > drainIdle) {
					// Read on for the usage of an answer no one reads any
					// more, but not for as long as a stalled provider
					// holds it: the slot it holds is the tenant's.
					wait = drainIdle
				}
				_ = conn.SetReadDeadline(readDeadline(time.Now(), wait, end))
			}
			watchMu.Unlock()
			k, err := src.Read(buf)
			for first && err == nil && k > 0 && k < magicLen && compressedPrefix(buf[:k]) {
				// A first read too short to tell (a one-byte chunk): read
				// on until the magic bytes are whole.
				var n int
				n, err = src.Read(buf[k:])
				k += n
			}
			if left.Load() && !x.sse {
				gone = true // it left while the read waited: its timeout is the drain's, no failure
			}
			if first && k > 0 {
				first = false
				if (tap != nil || readsAsText(resp.Header.ContentType())) && looksCompressed(buf[:k]) {
					// Compressed under a header fasthttp did not keep (a
					// second Content-Encoding line): neither the meter nor
					// the mask can read it. The head went out: the answer
					// is cut, never ended cleanly.
					cut = true
					break
				}
			}
			out := buf[:k]
			if own != nil {
				out = own.pass(s, out, err != nil)
			}
			if mask != nil && !gone {
				// Whole lines, masked; an incomplete last line waits for
				// the rest (a secret never spans a line), all of it at the
				// end. What the owner record lets go (out) is what is masked.
				masked, n := mask.lines(out, err != nil)
				if len(masked) > 0 && !relay(w, client, masked, wt) {
					gone = true
				} else {
					x.bytes += len(masked)
				}
				mask.drop(n)
			}
			if k > 0 || len(out) > 0 {
				if tap != nil {
					tap.write(buf[:k])
				}
				switch {
				case gone:
					drained += k
				case mask != nil: // relayed above
				case len(out) == 0: // held until the owner is recorded
				case relay(w, client, out, wt):
					x.bytes += len(out)
				default:
					// The client left. A JSON answer's usage comes at its
					// end, and the provider bills the whole answer: read on
					// (a bounded amount) to charge it. A stream is not read
					// on: that would keep the provider generating.
					gone = true
				}
				if gone && (tap == nil || tap.sse || tap.settled() || drained > maxDrain) {
					break
				}
			}
			if err != nil {
				cut = err != io.EOF && !gone
				break
			}
		}
		s.peers.unwatch(watch) // before the client's connection may be closed
		watch = peerWatch{}
		watchMu.Lock()
		unwatched = true
		watchMu.Unlock()
		if left.Load() {
			// Whatever the answer's state, the callback may have left a
			// short deadline on the upstream connection: it goes, not
			// back to the pool.
			resp.SetConnectionClose()
		}
		switch {
		case left.Load() && x.sse:
			// The client left: its call was ended here. Never a clean end
			// of the body (a half-closed client reads on), and the access
			// line counts no success.
			resp.SetConnectionClose()
			_ = client.Close()
			x.status = statusClientClosed
		case gone:
			// The client left: its answer was read on for the usage alone.
			resp.SetConnectionClose()
			_ = client.Close()
			x.status = statusClientClosed
		case cut:
			_ = client.Close()
			x.status = fasthttp.StatusBadGateway
		}
		if wt > 0 {
			_ = client.SetWriteDeadline(time.Time{}) // fasthttp's writes that follow set none
		}
		released = true
		release(freq, resp)
		if m != nil {
			// Whether or not the client read it all: the upstream answered.
			// The access line shows what the answer reported.
			x.usage, x.hasUsage = m.charge()
		}
		s.finish(x)
	}
}

// recoverBody ends a pass-through answer whose copy panicked (a bug): the
// panic is logged and counted (gateway_panics_total), the client's
// connection closed, so that the body ends without a clean final chunk (it
// sees the answer cut, never a hang or a truncated answer that looks
// whole), and the request finished (its slot freed), once.
func (s *Server) recoverBody(x *exchange, client net.Conn, r any) {
	s.logPanic(r, x)
	if client != nil {
		_ = client.Close()
	}
	x.status, x.cause = fasthttp.StatusInternalServerError, pipeline.Internal(fmt.Errorf("proxy: panic: %v", r), "internal error")
	s.finish(x)
}

// lineMasker holds the incomplete last line of an event stream between
// reads, bounded by maxEventBytes (a longer line goes out in parts, cut
// where no registered secret is split). For a JSON answer (json), whose
// lines may be as long as the answer, it holds only what may begin a
// secret at the end of what it read, or the string still open there (up
// to maxHeldString bytes of it), so that a string spelling a secret with
// \u escapes is decoded whole (str follows the strings across reads).
type lineMasker struct {
	held []byte
	json bool
	str  jsonStrings // at held's start
	end  jsonStrings // at held's end: each byte read is scanned once here
	open int         // index in held of the open string's quote; -1: none, or it began before held
	long bool        // the line being read went past maxEventBytes
}

// keptHeld bounds the capacity a lineMasker keeps once what it held is
// written: a long line's buffer (up to maxEventBytes) is let go after it,
// not kept for the rest of the stream. Lines up to about this long (an
// image's partial, a long answer's last event) keep theirs, so that a
// stream of them does not allocate one per line.
const keptHeld = 1 << 20

// maxHeldString bounds the open string a JSON answer's masking holds: a
// longer one (an image's base64) goes out as it comes.
const maxHeldString = 64 << 10

// lines adds p and returns the complete lines held, with secrets masked
// (a view of what it holds until drop, or of p, or a copy), and how many
// held bytes they were (0 when they are p's, never held); at the end,
// everything.
func (m *lineMasker) lines(p []byte, end bool) (out []byte, n int) {
	if m.json {
		return m.jsonPart(p, end)
	}
	if need := len(m.held) + len(p); need > cap(m.held) {
		// Doubled, as append grows a small slice, but never past the
		// bound a line is held to (append's 1.25x steps for a large
		// slice would allocate five times the line on the way there).
		c := max(2*cap(m.held), need)
		if limit := maxEventBytes + len(p); c > limit {
			c = max(limit, need)
		}
		m.held = append(make([]byte, 0, c), m.held...)
	}
	m.held = append(m.held, p...)
	switch {
	case end:
		n = len(m.held)
	default:
		// What was held before p has no newline (drop let go of every
		// line): only p is searched, so a long line costs its length once.
		i := bytes.LastIndexByte(p, '\n')
		if i >= 0 {
			n = len(m.held) - len(p) + i + 1
			m.long = false // the line held now began after it
		}
		if (m.long && i < 0) || len(m.held)-n > maxEventBytes {
			// A line this long goes out without its end, but never a
			// secret cut in two: the part from where one may begin waits
			// for more. The rest of it goes out as it comes, not held up
			// to the bound again. (Only the line still open: a long line
			// that ended in p goes out whole, and the next one is held.)
			m.long = true
			n = observe.Secrets.SafeCut(m.held, len(m.held))
		}
	}
	if n == 0 {
		return nil, 0
	}
	// The configured secrets only: credential-looking values a model
	// writes ("api_key": in a tool call's arguments) are its answer.
	out = observe.Secrets.RedactSecrets(m.held[:n])
	if observe.Secrets.Any() && bytes.Contains(out, escapeU) {
		out = maskEscaped(out)
	}
	if bytes.Contains(out, errorWord) {
		out = rewriteAccountEvents(out) // each line is checked again: the word may be in another line
		if observe.UpstreamAddrs.Any() {
			out = maskErrorAddrs(out)
		}
	}
	return out, n
}

// jsonPart is lines for a JSON answer. With nothing held (nearly always),
// p goes out as it is but for the end it must hold, without being copied
// first. Each byte is scanned for strings twice, when read and when let
// go, however long it is held.
func (m *lineMasker) jsonPart(p []byte, end bool) (out []byte, n int) {
	base := len(m.held)
	fresh := base == 0
	if fresh {
		m.open = -1
	}
	buf := p
	if !fresh {
		m.held = append(m.held, p...)
		buf = m.held
	}
	if o := m.end.advance(p); o >= 0 {
		m.open = base + o
	} else if !m.end.inStr {
		m.open = -1
	}
	k := len(buf)
	if !end {
		k = observe.Secrets.SafeCut(buf, k)
		if observe.Secrets.Any() && m.open >= 0 && len(buf)-m.open <= maxHeldString {
			k = min(k, m.open)
		}
	}
	out = observe.Secrets.RedactSecrets(buf[:k])
	if observe.Secrets.Any() && bytes.Contains(out, escapeU) {
		out = maskEscapedFrom(out, m.str)
	}
	m.str.advance(buf[:k])
	switch {
	case m.open >= k:
		m.open -= k
	default:
		m.open = -1 // let go from inside it (longer than maxHeldString)
	}
	if fresh {
		m.held = append(m.held, p[k:]...)
		return out, 0
	}
	return out, k
}

// jsonStrings follows where a JSON text's strings are, read in pieces:
// inside one or not, and whether the next byte is escaped.
type jsonStrings struct{ inStr, esc bool }

// advance moves the state over b and returns the index in b of the
// opening quote of the string open at b's end, -1 when none is or it
// opened before b. It jumps from quote to quote (bytes.IndexByte): an
// answer of numbers costs a scan, not a loop per byte. A string ends at a
// raw newline too, which no JSON string holds (as maskEscaped reads one):
// text that is no JSON is read the same way however it is cut.
func (j *jsonStrings) advance(b []byte) int {
	open, i := -1, 0
	if j.esc && len(b) > 0 {
		j.esc = false
		if b[0] == '\n' {
			j.inStr = false
		}
		i = 1 // escaped by the backslash that ended the last piece
	}
	for i < len(b) {
		q := bytes.IndexByte(b[i:], '"')
		if j.inStr {
			lim := len(b)
			if q >= 0 {
				lim = i + q
			}
			if nl := bytes.IndexByte(b[i:lim], '\n'); nl >= 0 {
				j.inStr, open, i = false, -1, i+nl+1
				continue
			}
		}
		if q < 0 {
			if j.inStr {
				j.esc = backslashesBefore(b, len(b), i)%2 == 1
			}
			break
		}
		q += i
		switch {
		case !j.inStr:
			j.inStr, open = true, q
		case backslashesBefore(b, q, i)%2 == 1: // an escaped quote
		default:
			j.inStr, open = false, -1
		}
		i = q + 1
	}
	return open
}

// backslashesBefore counts the backslashes right before b[at], not before
// b[from].
func backslashesBefore(b []byte, at, from int) int {
	k := at
	for k > from && b[k-1] == '\\' {
		k--
	}
	return at - k
}

// maskEscapedFrom is maskEscaped for b that begins as st says: inside a
// string whose start went out already, that tail is left as it is.
func maskEscapedFrom(b []byte, st jsonStrings) []byte {
	if !st.inStr {
		return maskEscaped(b)
	}
	// Where the tail ends: the first quote that closes it.
	tail := jsonStrings{inStr: true, esc: st.esc}
	end := -1
	for i := range b {
		tail.advance(b[i : i+1])
		if !tail.inStr {
			end = i + 1
			break
		}
	}
	if end < 0 {
		return b
	}
	rest := maskEscaped(b[end:])
	if len(rest) == len(b)-end && (len(rest) == 0 || &rest[0] == &b[end]) {
		return b
	}
	return append(append([]byte(nil), b[:end]...), rest...)
}

var (
	errorWord = []byte(`rror"`) // "error" as a key, or a type's value
	// The codes and types aboutRateLimit and aboutCredentials know hold one
	// of these, in any case: a line with none, and no escape that may
	// spell one (every Responses event's "error":null), is not parsed.
	accountWordList = []string{"rate_limit", "quota", "auth", "permission", "invalid_"}
	dataField       = []byte("data:")
)

// accountWords reports whether b holds one of accountWordList, in any
// case, or a \u escape.
func accountWords(b []byte) bool {
	if bytes.Contains(b, escapeU) {
		return true
	}
	for i := range b {
		c := b[i] | 0x20 // lower case, for a letter
		for _, w := range accountWordList {
			if c == w[0] && len(b)-i >= len(w) && bytes.EqualFold(b[i:i+len(w)], []byte(w)) {
				return true
			}
		}
	}
	return false
}

// rewriteAccountEvents gives the error events among b's lines that are
// about the gateway's provider account the gateway's own message, as an
// error status's answer gets (mapUpstream): one about its rate limits or
// quota (the provider's text names the account every tenant shares and
// counts its use), one about its credentials (the provider's text may quote
// a fragment of the key). An event's error is its "error" object (chat),
// its "response.error" (Responses' response.failed) or the event itself
// when its type is "error" (Responses' error event).
func rewriteAccountEvents(b []byte) []byte {
	return editDataLines(b, func(line, p []byte) []byte {
		if !bytes.Contains(line, errorWord) || !accountWords(line) {
			return nil
		}
		q, changed := accountEvent(p)
		if !changed {
			return nil
		}
		out := append(append([]byte(nil), dataField...), ' ')
		out = append(out, q...)
		if bytes.HasSuffix(line, []byte{'\r'}) {
			out = append(out, '\r') // the line's own ending, kept
		}
		return out
	})
}

// maskErrorAddrs masks the providers' addresses in b's error events (a
// data line whose JSON is an error: a non-null "error", or a Responses
// "error" or "response.failed" event), as the same error in a JSON answer
// has them masked (redactString); other lines, the model's text, go as
// they are. b itself when nothing changed.
func maskErrorAddrs(b []byte) []byte {
	return editDataLines(b, func(line, p []byte) []byte {
		if !bytes.Contains(p, errorWord) || !errorEvent(p) {
			return nil
		}
		if q := observe.UpstreamAddrs.RedactSecrets(line); !bytes.Equal(q, line) {
			return q
		}
		return nil
	})
}

// editDataLines returns b with each "data:" line (LF-ended) that edit
// gives a new one for (edit sees the line and its data, and returns nil to
// keep it) replaced by it; b itself when none changed.
func editDataLines(b []byte, edit func(line, data []byte) []byte) []byte {
	var out []byte // nil until a line changes
	last := 0
	for start := 0; start < len(b); {
		end := bytes.IndexByte(b[start:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += start
		}
		line := b[start:end]
		if p, ok := bytes.CutPrefix(line, dataField); ok {
			if q := edit(line, p); q != nil {
				out = append(append(out, b[last:start]...), q...)
				last = end
			}
		}
		start = end + 1
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// errorEvent reports whether p, an event's data, is an error: an error
// object as a chat stream's relay reads one (isErrorObject), or a
// Responses event of type "error" or "response.failed".
func errorEvent(p []byte) bool {
	view := unsafe.String(unsafe.SliceData(p), len(p)) // read only here
	if isErrorObject(view) {
		return true
	}
	typ := gjson.Get(view, "type").Str
	return typ == "error" || typ == "response.failed"
}

// accountEvent is rewriteAccountEvents for one event's data.
func accountEvent(p []byte) ([]byte, bool) {
	p = bytes.TrimSpace(p)
	if !jsonvalid.Bytes(p) {
		return nil, false
	}
	ev := gjson.ParseBytes(p)
	changed := false
	for _, path := range [...]string{"error", "response.error", ""} {
		e := ev
		if path != "" {
			e = ev.Get(path)
		} else if ev.Get("type").Str != "error" {
			continue
		}
		if !e.IsObject() {
			continue
		}
		typ, code := e.Get("type").String(), e.Get("code").String()
		var set [][2]string // the fields of mapUpstream's envelope for it
		switch {
		case aboutCredentials(typ, code):
			set = [][2]string{{"message", credentialsMessage}, {"type", pipeline.TypeUpstreamAuth}, {"code", pipeline.CodeUpstreamAuth}}
		case aboutRateLimit(typ, code):
			set = [][2]string{{"message", rateLimitMessage(typ, code)}}
		default:
			continue
		}
		prefix := ""
		if path != "" {
			prefix = path + "."
		}
		for _, kv := range set {
			if path == "" && kv[0] == "type" {
				continue // the event's own type: "error"
			}
			if q, err := sjson.SetBytes(p, prefix+kv[0], kv[1]); err == nil {
				p, changed = q, true
			}
		}
		if e.Get("param").Exists() {
			// The provider's param named its own request; null, not
			// left out: a Responses error event must have one.
			if q, err := sjson.SetRawBytes(p, prefix+"param", []byte("null")); err == nil {
				p = q
			}
		}
		ev = gjson.ParseBytes(p)
	}
	return p, changed
}

var escapeU = []byte(`\u`)

// maskEscaped masks the configured secrets in the JSON strings of b's
// lines that spell one with escapes (a key written "sk-\u0041BC...": any
// JSON reader decodes it to the key).
func maskEscaped(b []byte) []byte { return observe.Secrets.MaskEscapedStrings(b) }

// drop lets go of the first n held bytes, which were written.
func (m *lineMasker) drop(n int) {
	if n == 0 {
		return // nothing written: the line grows where it is
	}
	if rest := m.held[n:]; cap(m.held) > keptHeld && len(rest) <= keptHeld/16 {
		m.held = append(make([]byte, 0, keptHeld/16), rest...)
		return
	}
	m.held = append(m.held[:0], m.held[n:]...)
}

// relay writes p to the client, each write bounded by wt; false when the
// client is gone (or stopped reading, which ends the copy as leaving does).
func relay(w *bufio.Writer, client net.Conn, p []byte, wt time.Duration) bool {
	if wt > 0 {
		_ = client.SetWriteDeadline(time.Now().Add(wt))
	}
	if _, err := w.Write(p); err != nil {
		return false
	}
	return w.Flush() == nil
}

// maxDrain bounds what a pass-through reads of a metered JSON answer after
// its client left, to find its usage: enough for an images answer of a few
// base64 images, whose usage comes after them. The reads reuse one buffer
// and the tap keeps only the usage, so draining costs time, not memory.
const maxDrain = 32 << 20

// drainIdle bounds the wait for each read of that drain: a provider that
// stalls after its client left is not waited for until its idle or total
// timeout.
const drainIdle = 5 * time.Second

// readDeadline is the deadline of the next read of a pass-through body:
// idle from now, but never past end (zero: no total bound).
func readDeadline(now time.Time, idle time.Duration, end time.Time) time.Time {
	d := end
	if idle > 0 && (d.IsZero() || now.Add(idle).Before(d)) {
		d = now.Add(idle)
	}
	return d
}

// hopByHop returns the header names that are meaningful only for one
// connection: the fixed hop-by-hop set and the names the Connection header
// value connection lists. Both directions of the pass-through drop them.
func hopByHop(connection []byte) []string {
	out := hopHeaders
	for _, f := range strings.Split(string(connection), ",") {
		if f = strings.TrimSpace(f); f != "" && !hasFold(hopHeaders, f) {
			out = append(out[:len(out):len(out)], f)
		}
	}
	return out
}

// hasPrefixFold reports whether name begins with one of prefixes, ignoring
// case.
func hasPrefixFold(prefixes []string, name string) bool {
	for _, p := range prefixes {
		if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	return false
}

// hasFold reports whether list holds name, ignoring case.
func hasFold(list []string, name string) bool {
	for _, h := range list {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}
