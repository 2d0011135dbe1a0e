package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
)

const chatRoute = "/v1/chat/completions"

// handleChat is POST /v1/chat/completions: ingress, the request layer, then
// one JSON body or an SSE stream written by the sink.
func (s *Server) handleChat(ctx *fasthttp.RequestCtx, rt *Runtime, id string) {
	start := time.Now()
	body, err := readBody(ctx, rt.Config.Server.MaxBodyBytes)
	if err != nil {
		s.writeError(ctx, rt, id, "", err, start)
		return
	}
	in, err := parseChat(body)
	if err != nil {
		s.writeError(ctx, rt, id, "", err, start)
		return
	}
	route := rt.Routes[in.model]
	if route == nil {
		s.writeError(ctx, rt, id, "", modelNotFound(in.model), start) // no client-chosen metric labels

		return
	}
	req := &pipeline.Request{
		ID: id, Start: start, Body: body, Model: in.model, Stream: in.stream, IncludeUsage: in.includeUsage,
		Route: route, Credential: bearer(&ctx.Request.Header), Meta: &pipeline.Meta{},
		Hints: pipeline.Hints{
			Cache:     string(ctx.Request.Header.Peek("X-Gateway-Cache")),
			ToolTrace: string(ctx.Request.Header.Peek("X-Gateway-Tool-Trace")) == "1",
		},
	}
	rctx, cancel := context.WithCancel(s.base)
	resp, err := rt.Chat.Chat(rctx, req)
	if err != nil {
		cancel()
		s.setMetaHeaders(ctx, req)
		s.writeError(ctx, rt, id, in.model, err, start)
		return
	}
	s.setMetaHeaders(ctx, req)
	if resp.Stream == nil {
		cancel()
		ctx.SetContentType("application/json")
		ctx.SetBody(resp.Body)
		elapsed := time.Since(start)
		requestsTotal.WithLabelValues(chatRoute, in.model, "200").Inc()
		requestSeconds.WithLabelValues(chatRoute).Observe(elapsed.Seconds())
		firstByteSeconds.WithLabelValues(chatRoute).Observe(elapsed.Seconds())
		s.accessLog(req, 200, elapsed, elapsed, len(resp.Body), usageOf(resp.Body))
		return
	}
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	sk := &sink{s: s, rt: rt, req: req, stream: resp.Stream, cancel: cancel, conn: ctx.Conn()}
	activeStreams.Inc()
	ctx.SetBodyStreamWriter(sk.run)
}

func (s *Server) setMetaHeaders(ctx *fasthttp.RequestCtx, req *pipeline.Request) {
	for _, h := range req.Meta.Headers() {
		ctx.Response.Header.Set(h.Key, h.Value)
	}
}

// readBody copies the request body (the pipeline outlives the handler),
// refusing bodies over max with 413.
func readBody(ctx *fasthttp.RequestCtx, max int) ([]byte, error) {
	tooLarge := pipeline.Errorf(413, "invalid_request_error", "request_too_large",
		"The request body exceeds the limit of %d bytes.", max)
	if cl := ctx.Request.Header.ContentLength(); cl > max {
		// Read (and drop) a moderately oversized body so the client, still
		// sending, gets to read the 413 instead of a connection reset.
		if cl <= 4*max && ctx.Request.IsBodyStream() {
			_, _ = io.Copy(io.Discard, io.LimitReader(ctx.RequestBodyStream(), int64(cl)))
		} else {
			ctx.SetConnectionClose()
		}
		return nil, tooLarge
	}
	if ctx.Request.IsBodyStream() {
		b, err := io.ReadAll(io.LimitReader(ctx.RequestBodyStream(), int64(max)+1))
		if err != nil {
			return nil, pipeline.BadRequest("", "could not read the request body")
		}
		if len(b) > max {
			return nil, tooLarge
		}
		return b, nil
	}
	b := ctx.Request.Body()
	if len(b) > max {
		return nil, tooLarge
	}
	return append([]byte(nil), b...), nil
}

// sink writes a Stream to the client as SSE, flushing every event. It runs
// in fasthttp's body-writer goroutine after the handler returned, and uses
// only its own copies.
type sink struct {
	s      *Server
	rt     *Runtime
	req    *pipeline.Request
	stream pipeline.Stream
	cancel context.CancelFunc
	conn   net.Conn
}

var usageKey = []byte(`"usage":{`)

func (k *sink) run(w *bufio.Writer) {
	defer activeStreams.Dec()
	defer k.rt.inflight.Add(-1)
	start := k.req.Start
	stop := func() {}
	if k.conn != nil {
		stop = watchPeer(k.conn, k.cancel)
	}
	var (
		buf     []byte
		written int
		ttfb    time.Duration
		usage   gjson.Result
		status  = 200
		failure error
	)
	for {
		chunk, err := k.stream.Next()
		if err != nil {
			if err != io.EOF { // an UpstreamError may wrap io.EOF: that is a cut, not an end
				failure = err
			}
			break
		}
		if len(chunk) > 0 && chunk[0] == ':' {
			buf = sse.AppendComment(buf[:0], chunk[1:])
		} else {
			if bytes.Contains(chunk, usageKey) {
				if u := gjson.GetBytes(chunk, "usage"); u.IsObject() {
					usage = u // GetBytes copies: safe after chunk is reused
				}
			}
			buf = sse.AppendData(buf[:0], chunk)
		}
		if _, err := w.Write(buf); err != nil {
			failure = pipeline.ErrClientGone
			break
		}
		if err := w.Flush(); err != nil {
			failure = pipeline.ErrClientGone
			break
		}
		if ttfb == 0 {
			ttfb = time.Since(start)
		}
		written += len(buf)
	}
	stop()
	k.stream.Close() // before cancel: a cancel would fire the stream's AfterFunc on a pooled connection
	k.cancel()
	if failure != nil && errors.Is(failure, context.Canceled) && k.s.base.Err() != nil {
		// The shutdown grace period ended: tell the client, never end quietly.
		failure = pipeline.Errorf(503, "server_error", "server_shutting_down", "the gateway is shutting down; retry the request")
	}
	switch {
	case failure == nil:
		if _, err := w.Write(sse.Done); err == nil && w.Flush() == nil {
			written += len(sse.Done)
		}
	case errors.Is(failure, pipeline.ErrClientGone) || errors.Is(failure, context.Canceled):
		status = 499
	default:
		env := mapError(failure)
		status = env.logStatus
		buf = sse.AppendError(buf[:0], env.body)
		if _, err := w.Write(buf); err == nil && w.Flush() == nil {
			written += len(buf)
		}
		k.s.log.Warn().Str("request_id", k.req.ID).AnErr("cause", failure).Msg("stream ended with an error")
	}
	if ttfb == 0 {
		ttfb = time.Since(start)
	}
	elapsed := time.Since(start)
	requestsTotal.WithLabelValues(chatRoute, k.req.Model, strconv.Itoa(status)).Inc()
	requestSeconds.WithLabelValues(chatRoute).Observe(elapsed.Seconds())
	firstByteSeconds.WithLabelValues(chatRoute).Observe(ttfb.Seconds())
	k.s.accessLog(k.req, status, elapsed, ttfb, written, usage)
}

// usageOf reads the usage object of a chat.completion body.
func usageOf(body []byte) gjson.Result { return gjson.GetBytes(body, "usage") }

func (s *Server) accessLog(req *pipeline.Request, status int, elapsed, ttfb time.Duration, n int, usage gjson.Result) {
	var ev *zerolog.Event
	if status >= 500 {
		ev = s.log.Warn()
	} else {
		ev = s.log.Info()
	}
	if !ev.Enabled() {
		return
	}
	ev = ev.Str("request_id", req.ID).Str("method", "POST").Str("path", chatRoute).Str("model", req.Model)
	if t := req.TargetOrDefault(); t != nil {
		ev = ev.Str("provider", t.Provider)
	}
	if req.Tenant != nil {
		ev = ev.Str("tenant", req.Tenant.Name)
	}
	ev = ev.Int("status", status).Bool("stream", req.Stream).Dur("latency", elapsed).Dur("ttfb", ttfb).Int("bytes", n)
	if usage.IsObject() {
		ev = ev.Int64("prompt_tokens", usage.Get("prompt_tokens").Int()).
			Int64("completion_tokens", usage.Get("completion_tokens").Int()).
			Int64("cached_tokens", usage.Get("prompt_tokens_details.cached_tokens").Int())
	}
	if m := req.Meta.Get("x-gateway-model"); m != "" {
		ev = ev.Str("answered_by", m)
	}
	ev.Msg("request")
}
