package contextedit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/gateway/observe"
)

// Outcomes of one pass of the middleware (label "outcome").
const (
	outcomeSkipped  = "skipped"  // the cheap bound proved the request under budget
	outcomeUnder    = "under"    // counted; nothing new to edit
	outcomeCleared  = "cleared"  // new tool results cleared
	outcomeDropped  = "dropped"  // turns dropped as the last resort
	outcomeRejected = "rejected" // context_length_exceeded returned
)

var (
	metricCalls = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_context_edit_calls_total",
		Help: "Upstream calls seen by context editing, by route and outcome (skipped, under, cleared, dropped, rejected).",
	}, []string{"route", "outcome"})
	// skippedCalls is metricCalls' skipped outcome by route, resolved once
	// per route: most calls are skipped.
	skippedCalls = observe.NewLabeled(func(route string) prometheus.Counter {
		return metricCalls.WithLabelValues(route, outcomeSkipped)
	})
	metricCleared = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_context_edit_cleared_total",
		Help: "Tool results newly cleared by context editing, by route.",
	}, []string{"route"})
	metricSaved = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_context_edit_tokens_saved_total",
		Help: "Prompt tokens removed by newly decided context edits (clears and dropped turns), by route.",
	}, []string{"route"})
	metricLastResort = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_context_edit_last_resort_total",
		Help: "Requests still over the context window after clearing, by route and result (error, drop_turns, drop_failed).",
	}, []string{"route", "result"})
)
