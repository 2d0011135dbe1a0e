package proxy

import (
	"bufio"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
)

// hopHeaders are meaningful only for one connection and never forwarded
// (RFC 9110 §7.6.1, as net/http/httputil does).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// clientOnlyHeaders carry the client's identity towards the gateway; the
// provider gets the gateway's own.
var clientOnlyHeaders = []string{"Authorization", "Api-Key", "Openai-Organization", "Openai-Project", "Host", "Content-Length", "X-Gateway-Cache", "X-Gateway-Tool-Trace"}

// handlePassthrough forwards any other /v1/* request to a provider, under
// the same tenant policy as chat: the path must be on the tenant's
// pass-through allow-list, the body is bounded by the tenant's limit, and a
// body that names a model (JSON or a multipart form field) passes the same
// Admit as a chat request (allow-list, body size, token caps) and goes to
// that model's provider under its upstream name. A model that is not
// configured is refused unless server.passthrough_unknown_models is set.
// Other bodies (binary uploads) stream through, bounded by the same limit.
// path is the canonical path (canonicalPath).
func (s *Server) handlePassthrough(ctx *fasthttp.RequestCtx, rt *Runtime, id, path string) {
	start := time.Now()
	t, err := rt.authenticate(ctx)
	if err != nil {
		s.writeError(ctx, rt, id, "", err, start)
		return
	}
	raw := string(ctx.Request.URI().PathOriginal())
	if strings.EqualFold(path, chatRoute) || !strings.HasPrefix(raw, "/v1/") {
		// A case variant of the chat route must not reach the upstream's
		// chat endpoint around the pipeline.
		s.writeError(ctx, rt, id, "", unknownURL(path), start)
		return
	}
	if rt.Policy != nil && !rt.Policy.AllowsPath(t, path) {
		s.writeError(ctx, rt, id, "", pipeline.Errorf(403, "invalid_request_error", "path_not_allowed",
			"This API key may not use %s through this gateway.", truncate(path, 200)), start)
		return
	}
	limit := rt.Config.Server.MaxBodyBytes
	if rt.Policy != nil {
		if l := rt.Policy.BodyLimit(t); l > 0 && l < limit {
			limit = l
		}
	}
	pb, err := s.passthroughBody(ctx, rt, t, path, limit)
	if err != nil {
		s.writeError(ctx, rt, id, pb.model, err, start)
		return
	}
	provider, body, model, upload := pb.provider, pb.body, pb.model, pb.upload
	if provider == "" {
		provider = rt.Config.Server.DefaultProvider
	}
	pc := rt.Upstream.provider(provider)
	if pc == nil {
		s.writeError(ctx, rt, id, model, pipeline.Errorf(404, "invalid_request_error", "unknown_url", "No provider serves %s", truncate(path, 200)), start)
		return
	}

	freq := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	ctx.Request.Header.CopyTo(&freq.Header)
	for _, h := range hopHeaders {
		freq.Header.Del(h)
	}
	for _, h := range connectionListed(&ctx.Request.Header) {
		freq.Header.Del(h)
	}
	for _, h := range clientOnlyHeaders {
		freq.Header.Del(h)
	}
	// The original path: a decoded %3F must not become a query upstream.
	// canonicalPath refused every dot segment, so it stays under basePath.
	uri := pc.scheme + "://" + pc.host + pc.basePath + strings.TrimPrefix(raw, "/v1")
	if q := ctx.URI().QueryString(); len(q) > 0 {
		uri += "?" + string(q)
	}
	freq.SetRequestURI(uri)
	freq.Header.SetMethodBytes(ctx.Method())
	pc.setHeaders(&freq.Header, id)
	timeout := pc.cfg.FirstByteTimeout.D()
	if upload != nil {
		// The upload is a reader the client's connection feeds (the
		// upload owns the server's request stream; fasthttp never sees it
		// here, so it is released once). fasthttp's one timeout covers
		// sending it too: give it the server's read timeout on top, and
		// tell a slow client apart from a slow upstream afterwards.
		freq.SetBodyStream(upload, ctx.Request.Header.ContentLength())
		timeout += rt.Config.Server.ReadTimeout.D()
	} else {
		freq.SetBodyRaw(body)
	}
	resp.StreamBody = true
	freq.SetTimeout(timeout)
	if err := pc.hc.Do(freq, resp); err != nil {
		release(freq, resp)
		if upload != nil && upload.err != nil {
			err = upload.err // the client's side failed: not the upstream's fault
		} else {
			err = pc.transportError(err)
		}
		s.writeError(ctx, rt, id, model, err, start)
		return
	}
	upstreamSeconds.WithLabelValues(pc.cfg.Name).Observe(time.Since(start).Seconds())

	ctx.SetStatusCode(resp.StatusCode())
	listed := strings.Split(string(resp.Header.Peek("Connection")), ",")
	resp.Header.VisitAll(func(k, v []byte) {
		ks := string(k)
		for _, h := range listed {
			if strings.EqualFold(ks, strings.TrimSpace(h)) {
				return
			}
		}
		for _, h := range hopHeaders {
			if strings.EqualFold(ks, h) {
				return
			}
		}
		if strings.EqualFold(ks, "Content-Length") || strings.EqualFold(ks, "X-Request-Id") || strings.EqualFold(ks, "Server") || strings.EqualFold(ks, "Date") {
			return
		}
		ctx.Response.Header.SetBytesKV(k, v)
	})
	status := resp.StatusCode()
	conn := pc.conns.lookup(resp.LocalAddr())
	if conn != nil {
		_ = conn.SetReadDeadline(time.Time{})
	}
	idle := pc.cfg.StreamIdleTimeout.D()
	route := routeLabel(string(ctx.Path()))
	client := ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer rt.inflight.Add(-1)
		defer release(freq, resp)
		src := resp.BodyStream()
		buf := make([]byte, 32<<10)
		n := 0
		for src != nil {
			if conn != nil && idle > 0 {
				_ = conn.SetReadDeadline(time.Now().Add(idle))
			}
			k, err := src.Read(buf)
			if k > 0 {
				n += k
				if _, werr := w.Write(buf[:k]); werr != nil {
					break
				}
				if werr := w.Flush(); werr != nil {
					break
				}
			}
			if err != nil {
				if err != io.EOF {
					// A truncated upstream body must not end with a clean final
					// chunk: drop the client connection instead.
					_ = client.Close()
					status = 502
				}
				break
			}
		}
		requestsTotal.WithLabelValues(route, model, strconv.Itoa(status)).Inc()
		requestSeconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
		s.log.Info().Str("request_id", id).Str("path", route).Str("provider", pc.cfg.Name).Str("model", model).
			Int("status", status).Dur("latency", time.Since(start)).Int("bytes", n).Msg("request")
	})
}

// connectionListed returns the header names the Connection header lists.
func connectionListed(h *fasthttp.RequestHeader) []string {
	v := string(h.Peek("Connection"))
	if v == "" {
		return nil
	}
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" && !strings.EqualFold(f, "close") && !strings.EqualFold(f, "keep-alive") {
			out = append(out, f)
		}
	}
	return out
}
