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

// redisLog is the go-redis logger of the whole process (redis.SetLogger is
// global): it writes go-redis's messages as warnings to the logger of the
// most recently built config that uses Redis, at most redisLogBurst lines a
// redisLogPeriod, each with the number of lines suppressed before it. Safe
// for concurrent use.
type redisLog struct {
	log        atomic.Pointer[zerolog.Logger]
	sampler    zerolog.BurstSampler
	suppressed atomic.Int64
}

var (
	redisLogger  = &redisLog{sampler: zerolog.BurstSampler{Burst: redisLogBurst, Period: redisLogPeriod}}
	redisLogOnce sync.Once
)

// useRedisLogger routes go-redis's messages to log from now on.
func useRedisLogger(log zerolog.Logger) {
	redisLogger.log.Store(&log)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger) })
}

// Printf implements go-redis's logging interface.
func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	if !l.sampler.Sample(zerolog.WarnLevel) {
		l.suppressed.Add(1)
		redisLinesSuppressed.Inc()
		return
	}
	log := l.log.Load()
	if log == nil {
		return
	}
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	log.Warn().Str("source", "go-redis").Int64("suppressed", l.suppressed.Swap(0)).Msg(msg)
}
