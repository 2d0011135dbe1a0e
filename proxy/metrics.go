package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/gateway/observe"
)

var (
	requestsTotal = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_requests_total", Help: "Client requests by route, model and status.",
	}, []string{"route", "model", "status"})
	requestSeconds = observe.Factory.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gateway_request_duration_seconds", Help: "Time from request to the last response byte.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"route"})
	firstByteSeconds = observe.Factory.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gateway_time_to_first_byte_seconds", Help: "Time from request to the first response body byte.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route"})
	upstreamSeconds = observe.Factory.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gateway_upstream_duration_seconds", Help: "Time from sending an upstream request to its response headers.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"provider"})
	activeStreams = observe.Factory.NewGauge(prometheus.GaugeOpts{
		Name: "gateway_active_streams", Help: "Streamed responses being written now.",
	})
	panics = observe.Panics

	// Handles resolved once (finish runs for every request).
	requestCounts = observe.NewLabeled(func(k requestKey) prometheus.Counter {
		return requestsTotal.WithLabelValues(k.route, k.model, statusLabel(k.status))
	})
	requestSecondsOf = observe.NewLabeled(func(route string) prometheus.Observer { return requestSeconds.WithLabelValues(route) })
	firstByteOf      = observe.NewLabeled(func(route string) prometheus.Observer { return firstByteSeconds.WithLabelValues(route) })
)

// requestKey is the label values of gateway_requests_total: a route label
// (routeLabel), a configured model name or "", and a status.
type requestKey struct {
	route, model string
	status       int
}
