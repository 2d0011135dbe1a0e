package fallback

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/gateway/observe"
)

// outcome is how one upstream attempt ended, as the attempts metric names it.
type outcome int

const (
	outcomeSuccess       outcome = iota // an answer (a body, or a stream that reached its first content)
	outcomeRetryable                    // transient failure: retried, then fallen back; a breaker failure
	outcomeContextLength                // the prompt does not fit this model's window
	outcomeClientError                  // the caller's fault or a non-upstream error: returned as is
	outcomeCanceled                     // the client left or the deadline passed mid-attempt
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"success", "retryable_error", "context_length", "client_error", "canceled"}

var (
	attemptsTotal = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_fallback_attempts_total",
		Help: "Upstream attempts made by the fallback middleware, by client-facing model, provider and outcome.",
	}, []string{"model", "provider", "outcome"})

	fallbacksTotal = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_fallback_fallbacks_total",
		Help: "Moves from one model to the next in a fallback chain, by the reason the previous model failed.",
	}, []string{"reason"})

	circuitState = observe.Factory.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_fallback_circuit_state",
		Help: "Circuit breaker state per deployment: 0 closed, 1 open, 2 half-open.",
	}, []string{"provider", "upstream"})
)

// circuitHolders are the breakers (of every live runtime) that set each
// deployment's circuit-state series.
var circuitHolders = observe.NewHeld(func(k depKey) { circuitState.DeleteLabelValues(k.provider, k.upstream) })

// holdCircuit returns the deployment's circuit-state gauge, held until
// circuitHolders.Release.
func holdCircuit(k depKey) prometheus.Gauge {
	circuitHolders.Hold(k)
	return circuitState.WithLabelValues(k.provider, k.upstream)
}

// Children resolved once: the request path never hashes label values.
var (
	fallbackOnError         = fallbacksTotal.WithLabelValues("error")
	fallbackOnContextLength = fallbacksTotal.WithLabelValues("context_length")
	fallbackOnCircuitOpen   = fallbacksTotal.WithLabelValues("circuit_open")
)

// attemptCounters returns the attempts counters of one (model, provider) pair,
// indexed by outcome.
func attemptCounters(model, provider string) [numOutcomes]prometheus.Counter {
	var c [numOutcomes]prometheus.Counter
	for i := range c {
		c[i] = attemptsTotal.WithLabelValues(model, provider, outcomeNames[i])
	}
	return c
}
