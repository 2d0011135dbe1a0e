package observe

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Registry is the one registry /metrics serves. Safe for concurrent use.
var Registry = prometheus.NewRegistry()

// Factory registers new collectors in Registry. Declare metrics as
// package-level variables: observe.Factory.NewCounterVec(...).
var Factory = promauto.With(Registry)

// Panics counts the panics recovered on a request's behalf (a bug): in the
// server's serving of a request or a stream, and on the goroutines the tool
// loop runs a request's tool calls and rounds on. Each is logged with its
// stack.
var Panics = Factory.NewCounter(prometheus.CounterOpts{
	Name: "gateway_panics_total", Help: "Requests whose serving panicked (a bug): answered 500 or cut, or a tool call failed, logged with the stack.",
})

func init() {
	// go_gc_heap_live_bytes besides the defaults: the heap the last
	// collection found live, whatever the collector's pacing
	// (internal/gcfloor raises GOGC, so the next target no longer tells it).
	live := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}
	Registry.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(live)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}
