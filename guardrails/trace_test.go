package guardrails

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// TestFiredGuardrailsReported: what fired is a span event, a metric and a
// header naming the guardrail and action, never the matched text.
func TestFiredGuardrailsReported(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tp.Tracer("t").Start(context.Background(), "request")
	g := mustGuard(t, config.Guardrail{Name: "trace-pii", Stage: StageRequest, Kind: "pii", Action: "redact"})
	meta := &pipeline.Meta{}
	before := testutil.ToFloat64(metricFired.WithLabelValues("trace-pii", StageRequest, "redact"))
	if _, err := newChecker(ctx, []*guard{g}, meta).Check([]byte("mail zed@example.com")); err != nil {
		t.Fatal(err)
	}
	span.End()
	ev := rec.Ended()[0].Events()
	if len(ev) != 1 || ev[0].Name != "guardrail" {
		t.Fatalf("events %+v", ev)
	}
	var attrs []string
	for _, a := range ev[0].Attributes {
		attrs = append(attrs, string(a.Key)+"="+a.Value.AsString())
	}
	if got := strings.Join(attrs, ","); got != "gateway.guardrail=trace-pii,gateway.guardrail.stage=request,gateway.guardrail.action=redact" {
		t.Errorf("attributes %s", got)
	}
	if testutil.ToFloat64(metricFired.WithLabelValues("trace-pii", StageRequest, "redact")) != before+1 {
		t.Error("metric not counted")
	}
	if meta.Get(headerFired) != "trace-pii;redact" {
		t.Errorf("header %q", meta.Get(headerFired))
	}
}
