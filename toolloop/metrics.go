package toolloop

import (
	"sync"

	"github.com/llmgw/gateway/observe"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	metricToolCalls = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_tool_calls_total",
		Help: "Server-side tool calls by tool and status (ok|error). Unknown names count as tool=\"unknown\".",
	}, []string{"tool", "status"})
	metricToolLatency = observe.Factory.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gateway_tool_duration_seconds",
		Help:    "Server-side tool call latency, through the whole tool chain.",
		Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"tool"})
	metricIterations = observe.Factory.NewHistogram(prometheus.HistogramOpts{
		Name:    "gateway_toolloop_iterations",
		Help:    "Model calls per client request that entered the tool loop.",
		Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20},
	})
	metricLoopEnd = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_toolloop_end_total",
		Help: "Why the tool loop ended (answer, client_tool_calls, approval, tool_choice, tool_stop, cut, max_tokens, max_iterations, wall_time, max_consecutive_errors, max_model_calls, max_tool_calls, max_calls, error, canceled).",
	}, []string{"reason"})
)

// toolMetrics are one tool's handles of metricToolCalls and
// metricToolLatency, each resolved on its first use (a tool that was never
// called, or never failed, shows no series, as with WithLabelValues per
// call). Safe for concurrent use; never copied.
type toolMetrics struct {
	once    [3]sync.Once // ok, error, latency
	calls   [2]prometheus.Counter
	latency prometheus.Observer
}

// observe counts one call of the tool named name that took d seconds.
func (m *toolMetrics) observe(name string, isErr bool, seconds float64) {
	i, status := 0, "ok"
	if isErr {
		i, status = 1, "error"
	}
	m.once[i].Do(func() { m.calls[i] = metricToolCalls.WithLabelValues(name, status) })
	m.calls[i].Inc()
	m.once[2].Do(func() { m.latency = metricToolLatency.WithLabelValues(name) })
	m.latency.Observe(seconds)
}

// unknownTool counts the calls of names no offered tool has.
var unknownTool toolMetrics
