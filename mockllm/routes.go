package mockllm

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

const modelsCreated = 1767225600

// handle routes one request. Nothing taken from ctx outlives it except copies.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	if tc, ok := ctx.Conn().(*trackedConn); ok {
		tc.stream.Store(nil) // the previous response on this conn is fully written
	}
	reqID := s.requestID()
	ctx.Response.Header.Set("X-Request-Id", reqID)
	path := ctx.Path()
	switch {
	case string(path) == "/v1/chat/completions" || string(path) == "/v1/messages":
		if !ctx.IsPost() {
			s.record(ctx, "")
			methodNotAllowed(ctx, "POST")
			return
		}
		if string(path) == "/v1/messages" {
			s.messages(ctx, reqID)
			return
		}
		s.chat(ctx, reqID)
	case string(path) == "/v1/models" || bytes.HasPrefix(path, []byte("/v1/models/")):
		s.record(ctx, "")
		if !ctx.IsGet() {
			methodNotAllowed(ctx, "GET")
			return
		}
		s.listModels(ctx, path)
	case bytes.HasPrefix(path, []byte("/v1/")):
		s.record(ctx, "")
		s.echo(ctx)
	default:
		s.record(ctx, "")
		writeError(ctx, &apiError{status: 404, typ: "invalid_request_error", code: "unknown_url",
			message: "Unknown request URL: " + string(ctx.Method()) + " " + string(path) + "."})
	}
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, &apiError{status: 405, typ: "invalid_request_error", code: "method_not_allowed",
		message: "Method " + string(ctx.Method()) + " not allowed for " + string(ctx.Path()) + "; use " + allow + "."})
}

// writeError writes the OpenAI error envelope with e's status.
func writeError(ctx *fasthttp.RequestCtx, e *apiError) {
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(appendErrorObject(nil, e))
}

// chat answers POST /v1/chat/completions.
func (s *Server) chat(ctx *fasthttp.RequestCtx, reqID string) {
	body := ctx.PostBody()
	p, perr := parseChat(body)
	model := ""
	if p != nil {
		model = p.call.Model
	}
	n := s.rec.count(model)
	s.record(ctx, model)
	if perr != nil {
		s.refuse(ctx, perr)
		return
	}
	call := &p.call
	call.N = n
	if w, ok := s.window[call.Model]; ok && p.promptTokens > w {
		s.refuse(ctx, invalid("messages", "context_length_exceeded",
			"This model's maximum context length is "+strconv.Itoa(w)+" tokens. However, your messages resulted in "+
				strconv.Itoa(p.promptTokens)+" tokens. Please reduce the length of the messages."))
		return
	}
	turn := s.script(ctx, call)
	a := s.resolve(call, p, turn)
	if s.answerFault(ctx, turn.Fault, call.Model, writeFault) {
		return
	}
	if call.Stream {
		s.startStream(ctx, reqID, a, turn.Fault)
		return
	}
	s.complete(ctx, reqID, a, turn.Fault)
}

// script asks the responder for the Turn of call; the call's Header and
// Body are valid only while it runs.
func (s *Server) script(ctx *fasthttp.RequestCtx, call *Call) Turn {
	call.Header = func(name string) string { return string(ctx.Request.Header.Peek(name)) }
	turn := (*s.respond.Load())(call)
	call.Header, call.Body = nil, nil
	return turn
}

// answerFault answers with f's reset or status fault, if it has one (write
// writes a status fault), and reports whether it did.
func (s *Server) answerFault(ctx *fasthttp.RequestCtx, f *Fault, model string, write func(*fasthttp.RequestCtx, *Fault)) bool {
	switch {
	case f == nil:
		return false
	case f.Reset:
		s.logFault("reset", model)
		s.sleep(s.opts.FirstByteDelay)
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(resetConn)
		return true
	case f.Status != 0:
		s.logFault("status "+strconv.Itoa(f.Status), model)
		s.sleep(s.opts.FirstByteDelay)
		write(ctx, f)
		return true
	}
	return false
}

// refuse writes a validation error after the first-byte delay.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, e *apiError) {
	s.log.Debug().Str("code", e.code).Str("param", e.param).Msg("mockllm: refusing request")
	s.sleep(s.opts.FirstByteDelay)
	writeError(ctx, e)
}

// resolve applies the defaults of a Turn: ids, finish reason, usage, chunking.
func (s *Server) resolve(call *Call, p *parsed, t Turn) *answer {
	a := &answer{
		id:           "chatcmpl-mock-" + strconv.FormatUint(s.seqCompletion.Add(1), 10),
		created:      time.Now().Unix(),
		model:        call.Model,
		includeUsage: p.includeUsage,
		finish:       t.FinishReason,
	}
	if len(t.ToolCalls) > 0 {
		calls := make([]ToolCall, len(t.ToolCalls))
		copy(calls, t.ToolCalls)
		for i := range calls {
			if calls[i].ID == "" {
				calls[i].ID = "call_" + strconv.FormatUint(s.seqToolCall.Add(1), 10)
			}
		}
		t.ToolCalls = calls
	}
	a.turn = t
	if a.finish == "" {
		a.finish = "stop"
		if len(t.ToolCalls) > 0 {
			a.finish = "tool_calls"
		}
	}
	if t.Usage != nil {
		a.usage = *t.Usage
	} else {
		out := len(t.Text)
		for _, tc := range t.ToolCalls {
			out += len(tc.Name) + len(tc.Arguments)
		}
		a.usage = Usage{Prompt: p.promptTokens, Completion: max(1, out/4)}
	}
	a.chunking = s.opts.Chunking
	if t.Chunking != nil {
		a.chunking = *t.Chunking
	}
	a.chunking = a.chunking.withDefaults()
	return a
}

// faultError builds the envelope of a fault, with OpenAI-like defaults.
func faultError(f *Fault, defaultStatus int) *apiError {
	e := &apiError{status: f.Status, typ: f.Type, code: f.Code, message: f.Message}
	if e.status == 0 {
		e.status = defaultStatus
	}
	if e.typ == "" {
		switch {
		case e.status == 429:
			e.typ = "requests"
		case e.status >= 500:
			e.typ = "server_error"
		default:
			e.typ = "invalid_request_error"
		}
	}
	if e.code == "" {
		switch e.status {
		case 429:
			e.code = "rate_limit_exceeded"
		case 401:
			e.code = "invalid_api_key"
		}
	}
	if e.message == "" {
		e.message = "mock fault: " + http.StatusText(e.status)
	}
	return e
}

// writeFault answers with a status fault: envelope plus retry headers.
func writeFault(ctx *fasthttp.RequestCtx, f *Fault) {
	faultHeaders(ctx, f)
	writeError(ctx, faultError(f, 500))
}

// faultHeaders sets a status fault's retry and extra headers.
func faultHeaders(ctx *fasthttp.RequestCtx, f *Fault) {
	if f.RetryAfter != "" {
		ctx.Response.Header.Set("Retry-After", f.RetryAfter)
	}
	if f.RetryAfterMs != "" {
		ctx.Response.Header.Set("Retry-After-Ms", f.RetryAfterMs)
	}
	for k, v := range f.Headers {
		ctx.Response.Header.Set(k, v)
	}
}

// resetConn drops a hijacked connection without a byte, with an RST on TCP.
func resetConn(c net.Conn) {
	if tc, ok := c.(*trackedConn); ok {
		c = tc.Conn
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}

// startStream answers with SSE; the body is written by another goroutine.
func (s *Server) startStream(ctx *fasthttp.RequestCtx, reqID string, a *answer, f *Fault) {
	st := &stream{s: s, a: a, fault: f, firstDelay: s.opts.FirstByteDelay, chunkDelay: s.opts.ChunkDelay}
	if s.opts.StampHeld {
		st.received = time.Now()
	}
	if tc, ok := ctx.Conn().(*trackedConn); ok {
		tc.stream.Store(st)
	}
	if f != nil && f.Cut {
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) { st.runHijacked(c, reqID) })
		return
	}
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.SetBodyStreamWriter(st.bodyStreamWriter)
}

// complete answers a non-stream request with one chat.completion.
func (s *Server) complete(ctx *fasthttp.RequestCtx, reqID string, a *answer, f *Fault) {
	if f != nil && f.Stall > 0 {
		s.logFault("stall", a.model)
		s.sleep(f.Stall)
	}
	s.sleep(s.opts.FirstByteDelay)
	if f != nil && f.ErrorEvent {
		s.logFault("error_event", a.model)
		if f.ErrorOK {
			faultHeaders(ctx, f)
			e := faultError(f, 500)
			e.status = fasthttp.StatusOK
			writeError(ctx, e)
			return
		}
		writeFault(ctx, f)
		return
	}
	bp := eventBufs.Get().(*[]byte)
	body := appendCompletion((*bp)[:0], a)
	*bp = body
	switch {
	case f != nil && f.Cut:
		s.logFault("cut", a.model)
		head := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: " + reqID +
			"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		raw := append([]byte(head), body[:len(body)/2]...)
		eventBufs.Put(bp)
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) { _, _ = c.Write(raw) })
		return
	case f != nil && f.Malformed:
		s.logFault("malformed", a.model)
		body = body[:len(body)/2]
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
	eventBufs.Put(bp)
}
