package caching

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/observe"
)

var (
	responseResults = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_response_cache_requests_total",
		Help: "Response cache decisions: hit, miss, bypass, coalesced (served by a concurrent identical request's upstream call).",
	}, []string{"result"})
	responseStores = observe.Factory.NewCounter(prometheus.CounterOpts{
		Name: "gateway_response_cache_stores_total",
		Help: "Answers written to the response cache.",
	})
	storeErrors = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_cache_store_errors_total",
		Help: "Cache store failures, treated as misses (fail open).",
	}, []string{"cache", "op"})
	toolResults = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_tool_cache_requests_total",
		Help: "Tool-result cache lookups by result: hit or miss.",
	}, []string{"result"})
	promptTokens = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_prompt_cache_tokens_total",
		Help: "Prompt tokens by kind (prompt, cached, cache_write) per provider and upstream model; cached/prompt is the prompt-cache hit ratio.",
	}, []string{"provider", "model", "kind"})
	// promptTokensOf resolves promptTokens once per label set: it counts
	// every answer.
	promptTokensOf = observe.NewLabeled(func(k tokenKey) prometheus.Counter {
		return promptTokens.WithLabelValues(k.provider, k.model, k.kind)
	})
)

// tokenKey is the label values of promptTokens: configured provider and
// model names, and a kind.
type tokenKey struct{ provider, model, kind string }

// Pre-resolved children for the hot paths.
var (
	resultHit       = responseResults.WithLabelValues("hit")
	resultMiss      = responseResults.WithLabelValues("miss")
	resultBypass    = responseResults.WithLabelValues("bypass")
	resultCoalesced = responseResults.WithLabelValues("coalesced")
	toolHit         = toolResults.WithLabelValues("hit")
	toolMiss        = toolResults.WithLabelValues("miss")
)

// errorLog logs store failures at most once per interval, with the number of
// failures it kept quiet about. Safe for concurrent use.
type errorLog struct {
	log        zerolog.Logger
	interval   time.Duration
	last       atomic.Int64 // unix nanos of the last line written
	suppressed atomic.Int64
}

func newErrorLog(log zerolog.Logger) *errorLog {
	return &errorLog{log: log, interval: 10 * time.Second}
}

func (l *errorLog) report(op string, err error) {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if last != 0 && now-last < int64(l.interval) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return
	}
	l.log.Warn().Err(err).Str("op", op).Int64("suppressed", l.suppressed.Swap(0)).
		Msg("cache store unavailable; serving without cache")
}
