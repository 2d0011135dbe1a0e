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
		Name: "gateway_usage_records_dropped_total", Help: "Usage counter updates dropped (queue full, the backlog kept through a store outage full, the token-rate corrections of a failed write, or a batch Redis refused).",
	})
	backlogGauge = observe.Factory.NewGauge(prometheus.GaugeOpts{
		Name: "gateway_usage_records_backlog", Help: "Usage counter updates whose store write failed, kept to be written again.",
	})
)

// meterCounters are the Prometheus counters of one tenant and model,
// resolved once instead of on every call.
type meterCounters struct {
	input, output, cached, cost prometheus.Counter
}

// add counts one call. Its caller made t sane and micro is a cost; a
// negative is skipped all the same: a Prometheus counter's Add panics on
// one, and the panic would be the request's, or the process's.
func (m *meterCounters) add(t tokens, micro int64) {
	addCounter(m.input, t.input)
	addCounter(m.output, t.output)
	addCounter(m.cached, t.cached)
	addCounter(m.cost, micro)
}

// addCounter adds n to c when it is positive.
func addCounter(c prometheus.Counter, n int64) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// meterKey names the counters of a tenant and model.
type meterKey struct{ tenant, model string }

// counters returns the counters of tenant and model.
func (l *Limiter) counters(tenant, model string) *meterCounters {
	k := meterKey{tenant, model}
	l.metersMu.RLock()
	m := l.meters[k]
	l.metersMu.RUnlock()
	if m != nil {
		return m
	}
	m = &meterCounters{
		input:  tokensTotal.WithLabelValues(tenant, model, "input"),
		output: tokensTotal.WithLabelValues(tenant, model, "output"),
		cached: tokensTotal.WithLabelValues(tenant, model, "cached"),
		cost:   costTotal.WithLabelValues(tenant, model),
	}
	l.metersMu.Lock()
	defer l.metersMu.Unlock()
	if old := l.meters[k]; old != nil {
		return old
	}
	l.meters[k] = m
	return m
}
