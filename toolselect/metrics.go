package toolselect

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/gateway/observe"
)

// Outcomes of a selection, the values of Result.Outcome and of the metric's
// outcome label.
const (
	OutcomeSelected  = "selected"  // the selector picked the tools
	OutcomeCached    = "cached"    // an earlier selection of the same tools and turn was reused
	OutcomeError     = "error"     // the selector's call failed: every tool offered
	OutcomeMalformed = "malformed" // its answer was not a list of enough known names: every tool offered
	OutcomeRefused   = "refused"   // the caller's policy, limits or max_model_calls refused the call: every tool offered
	OutcomeSkipped   = "skipped"   // no user turn to select for: every tool offered
)

var metricSelections = observe.Factory.NewCounterVec(prometheus.CounterOpts{
	Name: "gateway_tool_select_total",
	Help: "LLM tool selections by outcome: selected, cached, and the fail-open ones that offered every tool (error, malformed, refused, skipped).",
}, []string{"outcome"})
