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

func init() {
	// go_gc_heap_live_bytes besides the defaults: the heap the last
	// collection found live, whatever the collector's pacing
	// (internal/gcfloor raises GOGC, so the next target no longer tells it).
	live := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}
	Registry.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(live)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}
