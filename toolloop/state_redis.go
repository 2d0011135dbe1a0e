package toolloop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/redisread"
	"github.com/llmgw/gateway/jsonvalid"
)

// RedisState is a StateStore in Redis, shared by every gateway replica: a
// mixed turn started on one replica can be continued on another. Each turn
// is one string key with a TTL. Every call is bounded by the client's
// timeouts (gateway builds the client with [redis].timeout). Safe for
// concurrent use.
//
// A turn is bounded by tool_loop.state_max_bytes, as in MemoryState (which
// keeps no turn larger than its whole bound): Save refuses a longer one and
// Load treats a longer value as missing without reading it, so a shared or
// compromised Redis cannot make the gateway allocate whatever length its
// reply declares.
type RedisState struct {
	client   redis.Cmdable
	prefix   string
	ttl      time.Duration
	maxBytes int
}

var (
	_ StateStore   = (*RedisState)(nil)
	_ StateClaimer = (*RedisState)(nil)
	_ ClaimAger    = (*RedisState)(nil)
)

// RedisStateOption configures a RedisState.
type RedisStateOption func(*RedisState)

// RedisStateMaxBytes bounds the encoded size of one turn
// (tool_loop.state_max_bytes); n <= 0 leaves the bound as it is.
func RedisStateMaxBytes(n int) RedisStateOption {
	return func(r *RedisState) {
		if n > 0 {
			r.maxBytes = n
		}
	}
}

// NewRedisState stores turns under prefix+key for ttl (tool_loop.state_ttl,
// defaulted by config). Without RedisStateMaxBytes a turn is bounded by
// config's default tool_loop.state_max_bytes.
func NewRedisState(client redis.Cmdable, prefix string, ttl time.Duration, opts ...RedisStateOption) *RedisState {
	r := &RedisState{client: client, prefix: prefix, ttl: ttl, maxBytes: config.Defaults().ToolLoop.StateMaxBytes}
	for _, o := range opts {
		o(r)
	}
	return r
}

// errTurnTooLarge: a turn over the store's bound, which Load would not read.
var errTurnTooLarge = errors.New("toolloop: turn larger than tool_loop.state_max_bytes")

// Save writes t with the store's TTL; a turn over the bound is not written.
func (r *RedisState) Save(ctx context.Context, key string, t *HiddenTurn) error {
	b := encodeTurn(t)
	if len(b) > r.maxBytes {
		return fmt.Errorf("%w (%d > %d bytes)", errTurnTooLarge, len(b), r.maxBytes)
	}
	return r.client.Set(ctx, r.prefix+key, b, r.ttl).Err()
}

// Claim sets key (a marker no Load decodes: the claim's time in Unix
// milliseconds) only when it is not set, with the store's TTL, in one SET
// NX: StateClaimer, across replicas.
func (r *RedisState) Claim(ctx context.Context, key string) (bool, error) {
	return r.client.SetNX(ctx, r.prefix+key, strconv.FormatInt(time.Now().UnixMilli(), 10), r.ttl).Result()
}

// ClaimedAt reads the time of key's claim (ClaimAger); a claim of another
// form (an earlier version's "claimed") tells none.
func (r *RedisState) ClaimedAt(ctx context.Context, key string) (time.Time, bool, error) {
	v, err := redisread.Script.Eval(ctx, r.client, []string{r.prefix + key}, 32).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	b, _, err := redisread.Value(v)
	if err != nil {
		return time.Time{}, false, nil
	}
	ms, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(ms), true, nil
}

// Load reads keys in one round trip: a pipeline of bounded GETs (one
// script call per key, EVAL rather than EVALSHA, since a pipeline cannot
// fall back on NOSCRIPT) rather than one MGET, because the keys hash to
// different slots of a Redis Cluster (a cluster client splits the pipeline
// by node). A value that does not decode, or is over the bound, counts as
// missing.
func (r *RedisState) Load(ctx context.Context, keys []string) ([]*HiddenTurn, error) {
	pipe := r.client.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = redisread.Script.Eval(ctx, pipe, []string{r.prefix + k}, r.maxBytes)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]*HiddenTurn, len(keys))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil {
			continue
		}
		switch b, oversized, err := redisread.Value(v); {
		case oversized:
			metricState.WithLabelValues("load_oversized").Inc()
		case err == nil:
			out[i], _ = decodeTurn(b)
		}
	}
	return out, nil
}

// encodeTurn writes {"p":[prior],"a":assistant,"r":[results],"c":[ids],"s":unix_ms};
// the messages are valid JSON already and are embedded as is.
func encodeTurn(t *HiddenTurn) []byte {
	b := make([]byte, 0, t.size()+32)
	b = append(b, `{"p":[`...)
	b = append(b, t.Prior...)
	b = append(b, `],"a":`...)
	b = append(b, t.Assistant...)
	b = append(b, `,"r":[`...)
	for i, r := range t.ToolResults {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r...)
	}
	b = append(b, `],"c":[`...)
	for i, id := range t.ClientIDs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, []byte(id))
	}
	b = append(b, `],"s":`...)
	b = strconv.AppendInt(b, t.Saved.UnixMilli(), 10)
	return append(b, '}')
}

var errBadTurn = errors.New("toolloop: stored turn does not decode")

// decodeTurn parses what encodeTurn wrote; it copies what it keeps.
func decodeTurn(b []byte) (*HiddenTurn, error) {
	if !jsonvalid.Bytes(b) {
		return nil, errBadTurn
	}
	res := gjson.GetManyBytes(b, "a", "r", "c", "s", "p")
	if !res[0].IsObject() || !res[1].IsArray() || !res[2].IsArray() || !res[4].IsArray() {
		return nil, errBadTurn
	}
	t := &HiddenTurn{Assistant: []byte(res[0].Raw), Saved: time.UnixMilli(res[3].Int())}
	if p := bytes.TrimSpace([]byte(res[4].Raw)); len(p) > 2 {
		t.Prior = bytes.TrimSpace(p[1 : len(p)-1])
	}
	res[1].ForEach(func(_, v gjson.Result) bool {
		t.ToolResults = append(t.ToolResults, []byte(v.Raw))
		return true
	})
	res[2].ForEach(func(_, v gjson.Result) bool {
		t.ClientIDs = append(t.ClientIDs, v.String())
		return true
	})
	if len(t.ClientIDs) == 0 {
		return nil, errBadTurn
	}
	return t, nil
}
