package proxy

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
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

// handlePassthrough forwards any other /v1/* request to a provider: the one
// serving the body's model when it names a configured model, else the
// default provider. Bodies stream in both directions.
func (s *Server) handlePassthrough(ctx *fasthttp.RequestCtx, rt *Runtime, id string) {
	start := time.Now()
	if rt.Auth != nil {
		if _, err := rt.Auth(bearer(&ctx.Request.Header)); err != nil {
			s.writeError(ctx, rt, id, "", err, start)
			return
		}
	}
	provider := rt.Config.Server.DefaultProvider
	var body []byte
	model := ""
	// A JSON body of known size is read to route it by its model; anything
	// else (uploads, unknown sizes) streams through untouched.
	cl := ctx.Request.Header.ContentLength()
	streamed := true
	if bytes.HasPrefix(ctx.Request.Header.ContentType(), []byte("application/json")) && cl >= 0 {
		b, err := readBody(ctx, rt.Config.Server.MaxBodyBytes)
		if err != nil {
			s.writeError(ctx, rt, id, "", err, start)
			return
		}
		body, streamed = b, false
		if m := gjson.GetBytes(body, "model"); m.Type == gjson.String {
			if r := rt.Routes[m.Str]; r != nil && len(r.Deployments) > 0 {
				model = m.Str // only configured names become metric labels
				d := r.Deployments[0]
				provider = d.Provider
				if d.Upstream != m.Str {
					body, _ = sjson.SetBytes(body, "model", d.Upstream)
				}
			}
		}
	} else if !ctx.Request.IsBodyStream() {
		body, streamed = ctx.Request.Body(), false
	}
	pc := rt.Upstream.provider(provider)
	if pc == nil {
		s.writeError(ctx, rt, id, model, pipeline.Errorf(404, "invalid_request_error", "unknown_url", "No provider serves %s", truncate(string(ctx.Path()), 200)), start)
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
	uri := pc.scheme + "://" + pc.host + pc.basePath + strings.TrimPrefix(string(ctx.Request.URI().PathOriginal()), "/v1")
	if q := ctx.URI().QueryString(); len(q) > 0 {
		uri += "?" + string(q)
	}
	freq.SetRequestURI(uri)
	freq.Header.SetMethodBytes(ctx.Method())
	pc.setHeaders(&freq.Header, id)
	if streamed {
		// Hide the server's *requestStream from the client request: fasthttp
		// would release it when the upload ends, and the server again later.
		freq.SetBodyStream(struct{ io.Reader }{ctx.RequestBodyStream()}, ctx.Request.Header.ContentLength())
	} else {
		freq.SetBodyRaw(body)
	}
	resp.StreamBody = true
	freq.SetTimeout(pc.cfg.FirstByteTimeout.D())
	if err := pc.hc.Do(freq, resp); err != nil {
		release(freq, resp)
		s.writeError(ctx, rt, id, model, pc.transportError(err), start)
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
