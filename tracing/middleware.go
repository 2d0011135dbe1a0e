package tracing

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// maxContent bounds a captured prompt or answer attribute.
const maxContent = 16 << 10

// The gateway's own span attributes.
const (
	attrAttempt  = attribute.Key("gateway.attempt")  // 1-based, per client request
	attrRetry    = attribute.Key("gateway.retry")    // the same deployment was tried before
	attrFallback = attribute.Key("gateway.fallback") // the model is not the one the client asked for
	attrTenant   = attribute.Key("gateway.tenant")
	attrProvider = attribute.Key("gateway.provider") // the provider's configured name
	attrStream   = attribute.Key("gateway.stream")
)

// Span start options and names, built once instead of per span.
var (
	serverSpan   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientSpan   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	internalSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
)

const serverSpanName = "POST " + pipeline.ChatEndpoint

// maxCallNames bounds Tracer.names (one per upstream model, from config).
const maxCallNames = 1024

// requestState counts the attempts of one client request.
type requestState struct {
	mu    sync.Mutex
	n     int
	round int           // the tool-loop round tried holds (pipeline.Request.Round)
	tried []deployment  // in round
	first [2]deployment // tried's first backing array: most requests try one or two
}

// deployment is a provider and upstream model tried.
type deployment struct{ provider, upstream string }

// attempt counts an attempt at provider's upstream model in a tool-loop
// round: its 1-based number in the request, and whether that deployment
// was tried before in the same round (a later round's call of it is no
// retry).
func (s *requestState) attempt(provider, upstream string, round int) (n int, retry bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if round != s.round {
		s.round, s.tried = round, s.tried[:0]
	}
	d := deployment{provider, upstream}
	if slices.Contains(s.tried, d) {
		return s.n, true
	}
	if s.tried == nil {
		s.tried = s.first[:0]
	}
	s.tried = append(s.tried, d)
	return s.n, false
}

type stateKey struct{}

// Request returns the request-layer middleware (install it outermost): a
// server span per client request, the child of the client's traceparent
// when it sent one. The span of a stream ends when the stream is closed.
func (t *Tracer) Request() pipeline.Middleware {
	return func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			if r.Hints.TraceParent != "" {
				ctx = propagator.Extract(ctx, propagation.MapCarrier{"traceparent": r.Hints.TraceParent, "tracestate": r.Hints.TraceState})
			}
			name, path := serverSpanName, urlPathChat
			if r.Messages.Input {
				name, path = responsesSpanName, urlPathResponses // a Responses request, translated to chat
			}
			ctx, span := t.tr.Start(ctx, name, serverSpan...)
			if sc := span.SpanContext(); sc.HasTraceID() {
				// The access line's trace_id, sampled or not: an unsampled
				// request's upstream calls carry the trace too.
				r.TraceID = sc.TraceID().String()
			}
			if !span.IsRecording() {
				// Not sampled: the context still carries the trace for
				// propagation, and nothing else is spent on it.
				return next.Chat(ctx, r)
			}
			a := newAttrs()
			a.add(semconv.HTTPRequestMethodPost, path, semconv.GenAIOperationNameChat,
				semconv.GenAIRequestModel(r.Model), attrStream.Bool(r.Stream))
			ctx = context.WithValue(ctx, stateKey{}, &requestState{})
			resp, err := next.Chat(ctx, r)
			if r.Tenant != nil {
				a.add(attrTenant.String(r.Tenant.Name))
			}
			// What the request layer decided, as events: the cache lookup's
			// result and the context edits of the whole request so far.
			if v := r.Meta.Get("x-gateway-cache"); v != "" {
				span.AddEvent("gateway.cache_lookup", cacheResult(v))
			}
			if v := r.Meta.Get("x-gateway-context-edits"); v != "" {
				span.AddEvent("gateway.context_edit", trace.WithAttributes(attribute.String("gateway.context_edits", v)))
			}
			if err != nil {
				fail(span, a, err)
				t.statusOf(a, err)
				a.end(span)
				return resp, err
			}
			if resp.Stream == nil {
				a.add(status200)
				a.end(span)
				return resp, nil
			}
			resp.Stream = &spanStream{Stream: resp.Stream, span: span, attrs: a, server: true, status: t.status}
			return resp, nil
		})
	}
}

var (
	urlPathChat      = semconv.URLPath(pipeline.ChatEndpoint)
	urlPathResponses = semconv.URLPath(responsesEndpoint)
	status200        = semconv.HTTPResponseStatusCode(200)
)

// responsesEndpoint is the Responses API's path, whose requests the
// pipeline serves translated to chat (pipeline.MessageMap.Input).
const (
	responsesEndpoint = "/v1/responses"
	responsesSpanName = "POST " + responsesEndpoint
)

// cacheResults are the events' options of the response cache's answers.
var cacheResults = map[string]trace.EventOption{}

func init() {
	for _, v := range []string{"hit", "miss", "bypass"} {
		cacheResults[v] = trace.WithAttributes(attribute.String("gateway.cache.result", v))
	}
	for _, f := range []string{"stop", "length", "tool_calls", "content_filter", "function_call"} {
		finishReasons[f] = semconv.GenAIResponseFinishReasons(f)
	}
}

func cacheResult(v string) trace.EventOption {
	if o, ok := cacheResults[v]; ok {
		return o
	}
	return trace.WithAttributes(attribute.String("gateway.cache.result", v))
}

// ModelCall wraps the upstream handler, innermost on every model's call
// layer: a client span per upstream attempt, marked with its attempt number
// and whether it is a retry or a fallback, with the GenAI request and usage
// attributes.
func (t *Tracer) ModelCall(next pipeline.Handler) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if unsampled(ctx) {
			return next.Chat(ctx, r)
		}
		target := r.TargetOrDefault()
		upstream, provider, model := r.Model, "", r.Model
		if target != nil {
			upstream, provider, model = target.Upstream, target.Provider, target.Model
		}
		attempt, retry := 1, false
		if st, _ := ctx.Value(stateKey{}).(*requestState); st != nil {
			attempt, retry = st.attempt(provider, upstream, r.Round)
		}
		ctx, span := t.tr.Start(ctx, t.callName(upstream), clientSpan...)
		if !span.IsRecording() {
			return next.Chat(ctx, r)
		}
		a := newAttrs()
		a.add(
			semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(t.providerName(provider)), attrProvider.String(provider),
			semconv.GenAIRequestModel(upstream), attrAttempt.Int(attempt), attrRetry.Bool(retry),
			attrFallback.Bool(model != "" && model != r.Model), attrStream.Bool(r.Stream),
		)
		if t.content {
			a.add(attribute.String("gen_ai.input.messages", clip(gjson.GetBytes(r.Body, "messages").Raw)))
		}
		resp, err := next.Chat(ctx, r)
		if err != nil {
			fail(span, a, err)
			var ue *pipeline.UpstreamError
			if errors.As(err, &ue) && ue.Kind == pipeline.UpstreamStatus {
				a.add(semconv.HTTPResponseStatusCode(ue.Status)) // the upstream's answer to this call
			}
			a.end(span)
			return resp, err
		}
		a.add(semconv.GenAIResponseModel(upstream))
		if resp.Stream == nil {
			usage, finish := answerOf(resp.Body)
			answered(a, usage, finish)
			if t.content {
				a.add(attribute.String("gen_ai.output.messages", clip(gjson.GetBytes(resp.Body, "choices.0.message").Raw)))
			}
			a.end(span)
			return resp, nil
		}
		ss := &spanStream{Stream: resp.Stream, span: span, attrs: a, usage: true}
		if t.content {
			ss.text = []byte{} // the answer's text, for gen_ai.output.messages
		}
		resp.Stream = ss
		return resp, nil
	})
}

// unsampled reports whether ctx carries a span that is not sampled. Its
// children are never sampled either (the sampler is parent-based), so the
// call and tool layers start no span for them: nothing is spent on a
// request that is not traced, and its outgoing requests carry the request's
// traceparent (not sampled) unchanged.
func unsampled(ctx context.Context) bool {
	sc := trace.SpanContextFromContext(ctx)
	return sc.IsValid() && !sc.IsSampled()
}

// callName is the span name of a call to upstream, "chat <model>", built
// once per upstream model.
func (t *Tracer) callName(upstream string) string {
	if v, ok := t.names.Load(upstream); ok {
		return v.(string)
	}
	n := "chat " + upstream
	if t.nNames.Add(1) <= maxCallNames {
		t.names.Store(upstream, n)
	}
	return n
}

// Tool returns the tool-layer middleware: an execute_tool span per call.
func (t *Tracer) Tool() pipeline.ToolMiddleware {
	return func(next pipeline.ToolHandler) pipeline.ToolHandler {
		return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			if unsampled(ctx) {
				return next.CallTool(ctx, c)
			}
			// The name the model wrote, bounded and valid UTF-8: the span is
			// started before the loop resolves it (an unknown or misspelt
			// name comes straight from the upstream's answer).
			name := clipTo(c.Name, maxToolName)
			ctx, span := t.tr.Start(ctx, "execute_tool "+name, internalSpan...)
			if !span.IsRecording() {
				return next.CallTool(ctx, c)
			}
			a := newAttrs()
			a.add(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolCallID(c.ID))
			if t.content {
				a.add(attribute.String("gen_ai.tool.call.arguments", clip(string(c.Arguments))))
			}
			res, err := next.CallTool(ctx, c)
			if res != nil && res.Name != "" && res.Name != c.Name {
				// Resolved to a configured tool (a near miss): the span
				// names the tool that ran.
				name = clipTo(res.Name, maxToolName)
				span.SetName("execute_tool " + name)
			}
			a.add(semconv.GenAIToolName(name))
			switch {
			case err != nil:
				fail(span, a, err)
			case res != nil && res.IsError:
				span.SetStatus(codes.Error, "tool error")
				a.add(semconv.ErrorTypeKey.String("tool_error"))
			}
			if t.content && res != nil {
				a.add(attribute.String("gen_ai.tool.call.result", clip(string(res.Content))))
			}
			a.end(span)
			return res, err
		})
	}
}

// Prompt-cache usage, when the upstream reports it: the GenAI names of the
// semantic conventions after v1.37.
const (
	usageCacheRead  = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	usageCacheWrite = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
)

// answered records an upstream call's usage (with its prompt-cache reads and
// writes when reported) and finish reason.
func answered(a *attrs, usage gjson.Result, finish string) {
	if u, ok := wire.ParseChatUsage(usage); ok {
		a.add(semconv.GenAIUsageInputTokens(int(u.Prompt)), semconv.GenAIUsageOutputTokens(int(u.Completion)))
		if u.Cached > 0 {
			a.add(usageCacheRead.Int64(u.Cached))
		}
		if u.CacheWrite > 0 {
			a.add(usageCacheWrite.Int64(u.CacheWrite))
		}
	}
	if finish != "" {
		a.add(finishReason(finish))
	}
}

// answerOf reads the usage object and the first choice's finish reason of
// a chat completion in one pass over a read-only view of body: what answered
// keeps of them is numbers and finishReason's copy.
func answerOf(body []byte) (usage gjson.Result, finish string) {
	seen := false
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str == "usage" && !usage.Exists(): // the first, as gjson.Get reads it
			usage = v
		case k.Str == "choices" && !seen:
			finish, seen = v.Get("0.finish_reason").Str, true
		}
		return true
	})
	return usage, finish
}

// finishReasons are the attributes of the usual finish reasons, built once:
// a string slice attribute is costly to build.
var finishReasons = map[string]attribute.KeyValue{}

func finishReason(f string) attribute.KeyValue {
	if kv, ok := finishReasons[f]; ok {
		return kv
	}
	return semconv.GenAIResponseFinishReasons(strings.Clone(f)) // f may be a view of a body
}

// statusOf adds the HTTP status a failed request's client is answered with.
func (t *Tracer) statusOf(a *attrs, err error) {
	if t.status != nil {
		a.add(semconv.HTTPResponseStatusCode(t.status(err)))
	}
}

// Refused records the server span of a chat or Responses request refused
// before the request layer ran (no key, a body that is no request, a model
// the config does not have): started at start, ended now, failed with err
// and the status the client was answered with. traceparent and tracestate
// are the client's headers. The span is a trace of its own, sampled by the
// ratio alone, linked to the client's: a caller without a key cannot make
// the gateway record spans (a sampled traceparent is always continued),
// nor write them into a trace of its choosing. It returns the span's trace
// id, for the access line ("" when none was recorded).
func (t *Tracer) Refused(traceparent, tracestate string, responses bool, start time.Time, err error) (traceID string) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start), trace.WithNewRoot()}
	if traceparent != "" {
		remote := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate}))
		if remote.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote}))
		}
	}
	name, path := serverSpanName, urlPathChat
	if responses {
		name, path = responsesSpanName, urlPathResponses
	}
	_, span := t.tr.Start(context.Background(), name, opts...)
	if !span.IsRecording() {
		return ""
	}
	a := newAttrs()
	a.add(semconv.HTTPRequestMethodPost, path, semconv.GenAIOperationNameChat)
	fail(span, a, err)
	t.statusOf(a, err)
	a.end(span)
	return span.SpanContext().TraceID().String()
}

func fail(span trace.Span, a *attrs, err error) {
	span.RecordError(err)
	status := "error"
	var pe *pipeline.Error
	var ue *pipeline.UpstreamError
	switch {
	case errors.As(err, &pe):
		status = strconv.Itoa(pe.Status)
	case errors.As(err, &ue) && ue.Kind == pipeline.UpstreamStatus:
		status = "upstream_" + strconv.Itoa(ue.Status)
	case errors.As(err, &ue):
		status = "upstream_" + ue.Kind.String() // no status: upstream_cut, upstream_timeout…
	}
	a.add(semconv.ErrorTypeKey.String(status))
	span.SetStatus(codes.Error, status)
}

// attrs collects a span's attributes until the span ends, so that they
// reach it in one SetAttributes call: the SDK copies its slice on every
// call that adds to it. The SDK keeps a copy, so buffers are pooled.
type attrs struct{ kv []attribute.KeyValue }

var attrPool = sync.Pool{New: func() any { return &attrs{kv: make([]attribute.KeyValue, 0, 16)} }}

func newAttrs() *attrs { return attrPool.Get().(*attrs) }

func (a *attrs) add(kv ...attribute.KeyValue) { a.kv = append(a.kv, kv...) }

// end sets the attributes on span, ends it, and gives the buffer back.
func (a *attrs) end(span trace.Span) {
	span.SetAttributes(a.kv...)
	span.End()
	clear(a.kv)
	a.kv = a.kv[:0]
	attrPool.Put(a)
}

// maxToolName bounds a tool name on a span (OpenAI's own bound is 64).
const maxToolName = 128

// clip bounds s without splitting a character: an invalid UTF-8 attribute
// would make the exporter drop its whole batch.
func clip(s string) string { return clipTo(s, maxContent) }

// clipTo is clip with a bound of n bytes.
func clipTo(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}

var (
	usageKey  = []byte(`"usage"`)
	finishKey = []byte(`"finish_reason"`)
)

// spanStream ends its span when the stream ends; a model call's span also
// takes the usage chunk and the finish reason. Close may run while Next
// does (pipeline.Stream), so mu guards what both touch.
type spanStream struct {
	pipeline.Stream
	span   trace.Span
	server bool // the request's span, which carries the HTTP status
	// status maps a stream's failure to the status its access line shows
	// (Tracer.SetErrorStatus; nil: none).
	status func(error) int
	usage  bool
	mu     sync.Mutex
	attrs  *attrs // nil once ended
	finish string
	// text is the content the stream's chunks carried, up to maxContent,
	// when content is captured (nil otherwise): at its end it is the
	// call's gen_ai.output.messages, as a JSON answer's message is.
	text []byte
}

func (s *spanStream) Next() ([]byte, error) {
	chunk, err := s.Stream.Next()
	switch {
	case err == nil && s.usage:
		if s.text != nil && len(s.text) < maxContent {
			if c := gjson.GetBytes(chunk, "choices.0.delta.content"); c.Type == gjson.String {
				s.mu.Lock()
				s.text = append(s.text, c.Str...)
				s.mu.Unlock()
			}
		}
		hasUsage, hasFinish := bytes.Contains(chunk, usageKey), bytes.Contains(chunk, finishKey)
		if !hasUsage && !hasFinish {
			break
		}
		s.mu.Lock()
		if s.attrs != nil {
			if hasUsage {
				answered(s.attrs, gjson.GetBytes(chunk, "usage"), "")
			}
			if hasFinish {
				if f := gjson.GetBytes(chunk, "choices.0.finish_reason"); f.Type == gjson.String {
					s.finish = f.Str
				}
			}
		}
		s.mu.Unlock()
	case err == io.EOF:
		s.end(nil)
	case err != nil:
		s.end(err)
	}
	return chunk, err
}

func (s *spanStream) Close() { s.CloseFor(nil) }

// CloseFor closes the stream; err is why the client's stream ended before
// its end (pipeline.CloseStream), which the span records as it would a
// failure of the stream itself: a client that left (499 on its access
// line, and on the span), a failure of a layer above. A stream closed
// before its end for no reason the sink gave counts as answered (200).
func (s *spanStream) CloseFor(err error) {
	s.Stream.Close()
	s.end(err)
}

func (s *spanStream) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attrs == nil {
		return
	}
	switch {
	case err != nil:
		fail(s.span, s.attrs, err)
		if s.server && s.status != nil {
			// The head went out as 200, but the access line shows the
			// failure's status (502 for a cut, 499 for a client that
			// left), and so does the span.
			s.attrs.add(semconv.HTTPResponseStatusCode(s.status(err)))
		}
	case s.server:
		s.attrs.add(status200) // the stream's head was a 200, as a JSON answer's
	}
	if s.finish != "" {
		s.attrs.add(finishReason(s.finish))
	}
	if s.text != nil {
		msg := jsonstring.Append([]byte(`{"role":"assistant","content":`), clip(string(s.text[:min(len(s.text), maxContent)])))
		s.attrs.add(attribute.String("gen_ai.output.messages", string(append(msg, '}'))))
	}
	s.attrs.end(s.span)
	s.attrs = nil
}
