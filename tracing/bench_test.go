package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmgw/gateway/pipeline"
)

// BenchmarkTracing measures what tracing adds to a request with one upstream
// call: a server span and a client span, recorded and exported in batches
// (to an in-memory exporter).
func BenchmarkTracing(b *testing.B) {
	up := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5}}`)}, nil
	})
	body := []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`)
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled", sdktrace.AlwaysSample()}, {"ratio=0.01", sdktrace.TraceIDRatioBased(0.01)}} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(c.sampler))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			t := &Tracer{tp: tp, tr: tp.Tracer(instrumentation)}
			h := pipeline.Chain(t.ModelCall(up), t.Request())
			b.ReportAllocs()
			for b.Loop() {
				r := &pipeline.Request{Model: "gpt-x", Body: body, Meta: &pipeline.Meta{}}
				if _, err := h.Chat(context.Background(), r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
