package guardrails

import (
	"github.com/llmgw/gateway/observe"
	"github.com/prometheus/client_golang/prometheus"
)

var metricFired = observe.Factory.NewCounterVec(prometheus.CounterOpts{
	Name: "gateway_guardrail_fired_total",
	Help: "Guardrails that matched, by guardrail, stage and action (block|redact|flag); once per request and stage (per call at the tool stages).",
}, []string{"guardrail", "stage", "action"})
