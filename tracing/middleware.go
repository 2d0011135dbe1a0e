package tracing

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/pipeline"
)

// maxContent bounds a captured prompt or answer attribute.
const maxContent = 16 << 10

// The gateway's own span attributes.
const (
	attrAttempt  = attribute.Key("gateway.attempt")  // 1-based, per client request
	attrRetry    = attribute.Key("gateway.retry")    // the same deployment was tried before
	attrFallback = attribute.Key("gateway.fallback") // the model is not the one the client asked for
	attrTenant   = attribute.Key("gateway.tenant")
	attrStream   = attribute.Key("gateway.stream")
)

// requestState counts the attempts of one client request.
type requestState struct {
	mu    sync.Mutex
	n     int
	tried map[string]bool
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
			ctx, span := t.tr.Start(ctx, "POST "+pipeline.ChatEndpoint, trace.WithSpanKind(trace.SpanKindServer))
			if !span.IsRecording() {
				// Not sampled: the context still carries the trace for
				// propagation, and nothing else is spent on it.
				return next.Chat(ctx, r)
			}
			span.SetAttributes(
				semconv.HTTPRequestMethodPost, semconv.URLPath(pipeline.ChatEndpoint),
				semconv.GenAIOperationNameChat, semconv.GenAIRequestModel(r.Model), attrStream.Bool(r.Stream),
			)
			r.TraceID = span.SpanContext().TraceID().String()
			ctx = context.WithValue(ctx, stateKey{}, &requestState{tried: map[string]bool{}})
			resp, err := next.Chat(ctx, r)
			if r.Tenant != nil {
				span.SetAttributes(attrTenant.String(r.Tenant.Name))
			}
			// What the request layer decided, as events: the cache lookup's
			// result and the context edits of the whole request so far.
			if v := r.Meta.Get("x-gateway-cache"); v != "" {
				span.AddEvent("gateway.cache_lookup", trace.WithAttributes(attribute.String("gateway.cache.result", v)))
			}
			if v := r.Meta.Get("x-gateway-context-edits"); v != "" {
				span.AddEvent("gateway.context_edit", trace.WithAttributes(attribute.String("gateway.context_edits", v)))
			}
			if err != nil {
				fail(span, err)
				span.End()
				return resp, err
			}
			if resp.Stream == nil {
				span.SetAttributes(semconv.HTTPResponseStatusCode(200))
				span.End()
				return resp, nil
			}
			resp.Stream = &spanStream{Stream: resp.Stream, span: span}
			return resp, nil
		})
	}
}

// ModelCall wraps the upstream handler, innermost on every model's call
// layer: a client span per upstream attempt, marked with its attempt number
// and whether it is a retry or a fallback, with the GenAI request and usage
// attributes.
func (t *Tracer) ModelCall(next pipeline.Handler) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		target := r.TargetOrDefault()
		upstream, provider, model := r.Model, "", r.Model
		if target != nil {
			upstream, provider, model = target.Upstream, target.Provider, target.Model
		}
		attempt, retry := 1, false
		if st, _ := ctx.Value(stateKey{}).(*requestState); st != nil {
			st.mu.Lock()
			st.n++
			attempt = st.n
			key := provider + "\x00" + upstream
			retry = st.tried[key]
			st.tried[key] = true
			st.mu.Unlock()
		}
		ctx, span := t.tr.Start(ctx, "chat "+upstream, trace.WithSpanKind(trace.SpanKindClient))
		if !span.IsRecording() {
			return next.Chat(ctx, r)
		}
		span.SetAttributes(
			semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(provider),
			semconv.GenAIRequestModel(upstream), attrAttempt.Int(attempt), attrRetry.Bool(retry),
			attrFallback.Bool(model != "" && model != r.Model), attrStream.Bool(r.Stream),
		)
		if t.content {
			span.SetAttributes(attribute.String("gen_ai.input.messages", clip(gjson.GetBytes(r.Body, "messages").Raw)))
		}
		resp, err := next.Chat(ctx, r)
		if err != nil {
			fail(span, err)
			span.End()
			return resp, err
		}
		span.SetAttributes(semconv.GenAIResponseModel(upstream))
		if resp.Stream == nil {
			answered(span, gjson.GetBytes(resp.Body, "usage"), gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str)
			if t.content {
				span.SetAttributes(attribute.String("gen_ai.output.messages", clip(gjson.GetBytes(resp.Body, "choices.0.message").Raw)))
			}
			span.End()
			return resp, nil
		}
		resp.Stream = &spanStream{Stream: resp.Stream, span: span, usage: true}
		return resp, nil
	})
}

// Tool returns the tool-layer middleware: an execute_tool span per call.
func (t *Tracer) Tool() pipeline.ToolMiddleware {
	return func(next pipeline.ToolHandler) pipeline.ToolHandler {
		return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			ctx, span := t.tr.Start(ctx, "execute_tool "+c.Name, trace.WithSpanKind(trace.SpanKindInternal))
			if !span.IsRecording() {
				return next.CallTool(ctx, c)
			}
			span.SetAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(c.Name), semconv.GenAIToolCallID(c.ID))
			if t.content {
				span.SetAttributes(attribute.String("gen_ai.tool.call.arguments", clip(string(c.Arguments))))
			}
			res, err := next.CallTool(ctx, c)
			switch {
			case err != nil:
				fail(span, err)
			case res != nil && res.IsError:
				span.SetStatus(codes.Error, "tool error")
				span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
			}
			if t.content && res != nil {
				span.SetAttributes(attribute.String("gen_ai.tool.call.result", clip(string(res.Content))))
			}
			span.End()
			return res, err
		})
	}
}

// answered records an upstream call's usage and finish reason.
func answered(span trace.Span, usage gjson.Result, finish string) {
	if usage.IsObject() {
		span.SetAttributes(
			semconv.GenAIUsageInputTokens(int(usage.Get("prompt_tokens").Int())),
			semconv.GenAIUsageOutputTokens(int(usage.Get("completion_tokens").Int())),
		)
	}
	if finish != "" {
		span.SetAttributes(semconv.GenAIResponseFinishReasons(finish))
	}
}

func fail(span trace.Span, err error) {
	span.RecordError(err)
	status := "error"
	var pe *pipeline.Error
	var ue *pipeline.UpstreamError
	switch {
	case errors.As(err, &pe):
		status = strconv.Itoa(pe.Status)
	case errors.As(err, &ue):
		status = "upstream_" + strconv.Itoa(ue.Status)
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(status))
	span.SetStatus(codes.Error, status)
}

// clip bounds s without splitting a character: an invalid UTF-8 attribute
// would make the exporter drop its whole batch.
func clip(s string) string {
	if len(s) > maxContent {
		s = s[:maxContent]
	}
	return strings.ToValidUTF8(s, "")
}

func pairs(kv []string) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, attribute.String(kv[i], kv[i+1]))
	}
	return out
}

var (
	usageKey  = []byte(`"usage"`)
	finishKey = []byte(`"finish_reason"`)
)

// spanStream ends its span when the stream ends; a model call's span also
// takes the usage chunk and the finish reason.
type spanStream struct {
	pipeline.Stream
	span   trace.Span
	usage  bool
	finish string
	ended  bool
}

func (s *spanStream) Next() ([]byte, error) {
	chunk, err := s.Stream.Next()
	switch {
	case err == nil && s.usage:
		if bytes.Contains(chunk, usageKey) {
			answered(s.span, gjson.GetBytes(chunk, "usage"), "")
		}
		if bytes.Contains(chunk, finishKey) {
			if f := gjson.GetBytes(chunk, "choices.0.finish_reason"); f.Type == gjson.String {
				s.finish = f.Str
			}
		}
	case err == io.EOF:
		s.end(nil)
	case err != nil:
		s.end(err)
	}
	return chunk, err
}

func (s *spanStream) Close() {
	s.Stream.Close()
	s.end(nil)
}

func (s *spanStream) end(err error) {
	if s.ended {
		return
	}
	s.ended = true
	if err != nil {
		fail(s.span, err)
	}
	if s.finish != "" {
		s.span.SetAttributes(semconv.GenAIResponseFinishReasons(s.finish))
	}
	s.span.End()
}
