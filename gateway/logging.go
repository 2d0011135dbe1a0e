package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
)

// registerSecrets hands cfg's secrets to the process log redactor before
// anything built from cfg can log, and its providers' addresses to the
// masking of forwarded upstream error messages.
func registerSecrets(cfg *config.Config) {
	observe.Secrets.Add(cfg.Secrets()...)
	observe.UpstreamAddrs.Add(cfg.UpstreamAddrs()...)
}

var redisLinesSuppressed = observe.Factory.NewCounter(prometheus.CounterOpts{
	Name: "gateway_redis_log_lines_suppressed_total",
	Help: "go-redis log lines not written because too many came in a short time.",
})

// Redis client messages are rate limited: an outage makes go-redis report
// every failed dial, one per request.
const (
	redisLogBurst  = 5
	redisLogPeriod = 10 * time.Second
)

// libraryLog is the logger of a library whose logging is the whole
// process's (go-redis's redis.SetLogger, OpenTelemetry's error handler):
// it writes the library's messages as warnings to the logger of the most
// recently built config, at most redisLogBurst lines a redisLogPeriod,
// each with the number of lines suppressed before it, and never to stderr
// outside the logger (an unreachable trace collector reports every failed
// export). Safe for concurrent use.
type libraryLog struct {
	source     string // the "source" field of its lines
	prefix     string // taken off each message
	counter    prometheus.Counter
	log        atomic.Pointer[zerolog.Logger]
	sampler    zerolog.BurstSampler
	suppressed atomic.Int64
}

var otelLinesSuppressed = observe.Factory.NewCounter(prometheus.CounterOpts{
	Name: "gateway_otel_log_lines_suppressed_total",
	Help: "OpenTelemetry error lines (failed span exports) not written because too many came in a short time.",
})

var (
	redisLogger = &libraryLog{source: "go-redis", prefix: "redis: ", counter: redisLinesSuppressed,
		sampler: zerolog.BurstSampler{Burst: redisLogBurst, Period: redisLogPeriod}}
	redisLogOnce sync.Once
	otelLogger   = &libraryLog{source: "otel", counter: otelLinesSuppressed,
		sampler: zerolog.BurstSampler{Burst: redisLogBurst, Period: redisLogPeriod}}
	otelLogOnce sync.Once
)

// useRedisLogger routes go-redis's messages to log from now on.
func useRedisLogger(log zerolog.Logger) {
	redisLogger.log.Store(&log)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger) })
}

// useOtelLogger routes OpenTelemetry's errors to log from now on.
func useOtelLogger(log zerolog.Logger) {
	otelLogger.log.Store(&log)
	otelLogOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { otelLogger.Printf(context.Background(), "%v", err) }))
	})
}

// Printf implements go-redis's logging interface.
func (l *libraryLog) Printf(_ context.Context, format string, v ...any) {
	if !l.sampler.Sample(zerolog.WarnLevel) {
		l.suppressed.Add(1)
		l.counter.Inc()
		return
	}
	log := l.log.Load()
	if log == nil {
		return
	}
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), l.prefix)
	log.Warn().Str("source", l.source).Int64("suppressed", l.suppressed.Swap(0)).Msg(msg)
}
