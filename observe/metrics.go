package observe

import (
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
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}
