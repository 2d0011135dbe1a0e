package limits

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/gateway/observe"
)

// Labels are configured names only (tenants from [[keys]], models from
// [[models]]), so their number is bounded.
var (
	tokensTotal = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_tokens_total", Help: "Tokens of upstream calls, by tenant, model and kind (input, output, cached).",
	}, []string{"tenant", "model", "kind"})
	costTotal = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_cost_microdollars_total", Help: "Priced spend of upstream calls in micro-dollars, by tenant and model.",
	}, []string{"tenant", "model"})
	limited = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_limited_total", Help: "Requests refused by a limit, by kind (r rate, c concurrency, b budget).",
	}, []string{"kind"})
	storeErrors = observe.Factory.NewCounter(prometheus.CounterOpts{
		Name: "gateway_limits_store_errors_total", Help: "Limit checks and usage writes that could not reach their store.",
	})
	recordsDropped = observe.Factory.NewCounter(prometheus.CounterOpts{
		Name: "gateway_usage_records_dropped_total", Help: "Usage counter updates dropped (queue full or store down).",
	})
)
