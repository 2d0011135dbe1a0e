package tracing

import (
	"testing"

	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// The config's service_name names the service, unless OTEL_SERVICE_NAME
// does: the environment wins.
func TestServiceNameEnvironmentWins(t *testing.T) {
	name := func() string {
		v, _ := serviceResource("from-config").Set().Value(semconv.ServiceNameKey)
		return v.AsString()
	}
	t.Setenv("OTEL_SERVICE_NAME", "")
	if got := name(); got != "from-config" {
		t.Fatalf("without the variable: %q", got)
	}
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	if got := name(); got != "from-env" {
		t.Fatalf("with OTEL_SERVICE_NAME: %q", got)
	}
}
