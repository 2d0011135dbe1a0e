package fallback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// maxEventBytes bounds a breaker message read from Redis; longer ones are
// ignored.
const maxEventBytes = 1024

// breakerEvent is one replica's circuit transition: opened until a time
// (when it may half-open), or closed again after a successful probe.
type breakerEvent struct {
	open               bool
	replica            string
	until              time.Time // open only
	provider, upstream string
}

// encodeEvent writes "o|c \x00 replica \x00 until-ms \x00 provider \x00 upstream".
func encodeEvent(ev breakerEvent) string {
	kind := "c"
	if ev.open {
		kind = "o"
	}
	return kind + "\x00" + ev.replica + "\x00" + strconv.FormatInt(ev.until.UnixMilli(), 10) + "\x00" + ev.provider + "\x00" + ev.upstream
}

// decodeEvent parses what encodeEvent wrote; ok is false for anything else.
func decodeEvent(s string) (ev breakerEvent, ok bool) {
	if len(s) > maxEventBytes {
		return ev, false
	}
	f := strings.SplitN(s, "\x00", 5)
	if len(f) != 5 || (f[0] != "o" && f[0] != "c") {
		return ev, false
	}
	ms, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return ev, false
	}
	return breakerEvent{open: f[0] == "o", replica: f[1], until: time.UnixMilli(ms), provider: f[3], upstream: f[4]}, true
}

// depField is the field of a deployment in the hash of open circuits.
func depField(provider, upstream string) string { return provider + "\x00" + upstream }

// SharedBreakers carries circuit transitions between the replicas sharing
// one Redis ([middleware.fallback] shared_breakers), so that a deployment
// one replica finds failing is avoided by all of them. The request path
// never calls Redis: a transition is queued and published by a background
// goroutine (PUBLISH, plus a hash of open circuits that a replica reads
// whenever it (re)subscribes, so one joining late or reconnecting catches
// up), and another goroutine applies the others' transitions to the local
// breakers as they arrive. When Redis is unreachable each replica simply
// keeps its own breakers. Openings carry wall-clock times: replicas'
// clocks are assumed to agree to well within a cooldown.
//
// Build one per runtime with NewSharedBreakers, hand it to New through
// Options.Shared, and Close it after the runtime's last request. Safe for
// concurrent use.
type SharedBreakers struct {
	rdb     redis.UniversalClient
	channel string // pub/sub channel of transitions
	key     string // hash: deployment → open-until (unix ms)
	id      string // this replica; its own messages are skipped
	timeout time.Duration
	log     zerolog.Logger

	out    chan breakerEvent // transitions to publish; when full, dropped
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewSharedBreakers shares breakers through rdb under prefix (the [redis]
// prefix); timeout bounds each publish. The caller owns rdb.
func NewSharedBreakers(rdb redis.UniversalClient, prefix string, timeout time.Duration, log zerolog.Logger) *SharedBreakers {
	var id [8]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &SharedBreakers{
		rdb: rdb, channel: prefix + "breakers:events", key: prefix + "breakers", id: hex.EncodeToString(id[:]),
		timeout: timeout, log: log, out: make(chan breakerEvent, 64), ctx: ctx, cancel: cancel,
	}
}

// Close stops the goroutines and waits for them.
func (s *SharedBreakers) Close() {
	s.cancel()
	s.wg.Wait()
}

// start runs the publisher and the subscriber, which applies every other
// replica's transition with apply. Only the first call starts them.
func (s *SharedBreakers) start(apply func(breakerEvent)) {
	s.once.Do(func() {
		s.wg.Add(2)
		go s.publishLoop()
		go s.subscribeLoop(apply)
	})
}

// send queues a local transition without blocking (it runs under a
// breaker's lock); a transition that does not fit is dropped.
func (s *SharedBreakers) send(ev breakerEvent) {
	ev.replica = s.id
	select {
	case s.out <- ev:
	default:
		s.log.Warn().Str("provider", ev.provider).Str("upstream", ev.upstream).Msg("shared breakers: queue full; transition not shared")
	}
}

func (s *SharedBreakers) publishLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case ev := <-s.out:
			ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
			pipe := s.rdb.Pipeline()
			if ev.open {
				pipe.HSet(ctx, s.key, depField(ev.provider, ev.upstream), ev.until.UnixMilli())
			} else {
				pipe.HDel(ctx, s.key, depField(ev.provider, ev.upstream))
			}
			pipe.Publish(ctx, s.channel, encodeEvent(ev))
			if _, err := pipe.Exec(ctx); err != nil && s.ctx.Err() == nil {
				s.log.Warn().Err(err).Str("provider", ev.provider).Str("upstream", ev.upstream).Msg("shared breakers: Redis unavailable; transition kept local")
			}
			cancel()
		}
	}
}

func (s *SharedBreakers) subscribeLoop(apply func(breakerEvent)) {
	defer s.wg.Done()
	ps := s.rdb.Subscribe(s.ctx, s.channel)
	defer ps.Close()
	// The channel pings the connection and resubscribes after a failure;
	// each (re)subscription is a chance to catch up on openings missed.
	ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(time.Second))
	for {
		select {
		case <-s.ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return // the client was closed under us
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					s.catchUp(apply)
				}
			case *redis.Message:
				if ev, ok := decodeEvent(m.Payload); ok && ev.replica != s.id {
					apply(ev)
				}
			}
		}
	}
}

// catchUp applies the circuits other replicas hold open now.
func (s *SharedBreakers) catchUp(apply func(breakerEvent)) {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	open, err := s.rdb.HGetAll(ctx, s.key).Result()
	if err != nil {
		return // the next resubscription tries again
	}
	for f, v := range open {
		if ev, ok := decodeOpen(f, v); ok {
			apply(ev)
		}
	}
}

// decodeOpen parses one entry of the hash of open circuits (depField →
// open-until in unix ms); ok is false for anything else.
func decodeOpen(field, value string) (ev breakerEvent, ok bool) {
	if len(field)+len(value) > maxEventBytes {
		return ev, false
	}
	provider, upstream, ok := strings.Cut(field, "\x00")
	ms, err := strconv.ParseInt(value, 10, 64)
	if !ok || err != nil {
		return ev, false
	}
	return breakerEvent{open: true, until: time.UnixMilli(ms), provider: provider, upstream: upstream}, true
}
