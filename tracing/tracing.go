// Package tracing exports OpenTelemetry traces of the gateway's work: a
// server span per client request (continuing the client's W3C
// traceparent), a client span per upstream model call attempt, an
// execute_tool span per server tool call, and events for cache lookups and
// context edits. Attributes follow the OpenTelemetry GenAI semantic
// conventions. Off by default: when [tracing] is not enabled, none of its
// middleware is installed and the global propagator injects nothing.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/config"
)

// instrumentation names the tracer.
const instrumentation = "github.com/llmgw/gateway"

// Tracer holds one config's tracer provider. Safe for concurrent use.
type Tracer struct {
	tp      *sdktrace.TracerProvider
	tr      trace.Tracer
	content bool
	// kinds maps a configured provider's name to its kind (SetProviders):
	// gen_ai.provider.name is the kind's well-known name, the configured
	// name gateway.provider. Read-only once the build is done.
	kinds  map[string]string
	names  sync.Map // upstream model → its call spans' name
	nNames atomic.Int64
	// status maps an error to the HTTP status its client is answered with
	// (SetErrorStatus): the gateway's one mapper, so that a span says what
	// the access line says.
	status func(error) int
}

// propagator is W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// New builds the exporter and tracer provider of cfg, or returns nil when
// tracing is disabled. The exporter connects lazily: an unreachable
// collector costs dropped spans, never requests.
func New(ctx context.Context, cfg config.Tracing) (*Tracer, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	exp, err := exporter(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return NewWithExporter(cfg, exp), nil
}

// serviceResource is the process's resource named name, unless the
// environment names it (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): the
// environment's attributes win over the config's, as the README says.
func serviceResource(name string) *resource.Resource {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(name)))
	if err != nil {
		return resource.Default()
	}
	if env, err := resource.Merge(res, resource.Environment()); err == nil {
		res = env
	}
	return res
}

// NewWithExporter builds the tracer provider of cfg (enabled or not)
// around exp, batched as New does: for tests and benchmarks that export to
// memory.
func NewWithExporter(cfg config.Tracing, exp sdktrace.SpanExporter) *Tracer {
	ratio := 1.0
	if cfg.SampleRatio != nil {
		ratio = *cfg.SampleRatio
	}
	res := serviceResource(cfg.ServiceName)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(res),
	)
	// Outgoing upstream, http-tool and MCP requests carry traceparent.
	otel.SetTextMapPropagator(propagator)
	return &Tracer{tp: tp, tr: tp.Tracer(instrumentation), content: cfg.CaptureContent}
}

// exporter builds the OTLP exporter: options from config where set, the
// OTEL_EXPORTER_OTLP_* environment otherwise (the exporters read it).
func exporter(ctx context.Context, cfg config.Tracing) (*otlptrace.Exporter, error) {
	if cfg.Protocol == "grpc" {
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		if len(cfg.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		u := cfg.Endpoint
		if p, err := url.Parse(u); err == nil && (p.Path == "" || p.Path == "/") {
			u = strings.TrimSuffix(u, "/") + "/v1/traces" // the base endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	return otlptracehttp.New(ctx, opts...)
}

// SetProviders records the kind of each configured provider (by name),
// before the tracer serves a request.
func (t *Tracer) SetProviders(kinds map[string]string) {
	if t != nil {
		t.kinds = kinds
	}
}

// SetErrorStatus gives the tracer the gateway's mapping of an error to the
// HTTP status its client is answered with, before the tracer serves a
// request: a failed request's server span gets http.response.status_code.
func (t *Tracer) SetErrorStatus(f func(error) int) {
	if t != nil {
		t.status = f
	}
}

// providerName is gen_ai.provider.name for the provider configured as
// name: the GenAI conventions' well-known name of its kind ("openai" for
// any OpenAI-compatible API, "anthropic"), the gateway's own for its demo
// model, and name itself for one the tracer was not told of.
func (t *Tracer) providerName(name string) string {
	switch t.kinds[name] {
	case "openai":
		return "openai"
	case "anthropic":
		return "anthropic"
	case "mock":
		return "llmgw.mock"
	}
	return name
}

// Shutdown flushes and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) {
	if t != nil {
		_ = t.tp.Shutdown(ctx)
	}
}

// Event adds a named event with attrs to the span in ctx (a no-op without
// one). Counts are typed as numbers, as the chat spans' are.
func Event(ctx context.Context, name string, attrs ...attribute.KeyValue) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(name, trace.WithAttributes(attrs...))
}
