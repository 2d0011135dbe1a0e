package toolloop

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"
)

// RedisState is a StateStore in Redis, shared by every gateway replica: a
// mixed turn started on one replica can be continued on another. Each turn
// is one string key with a TTL. Every call is bounded by the client's
// timeouts (gateway builds the client with [redis].timeout). Safe for
// concurrent use.
type RedisState struct {
	client redis.Cmdable
	prefix string
	ttl    time.Duration
}

var _ StateStore = (*RedisState)(nil)

// NewRedisState stores turns under prefix+key for ttl (tool_loop.state_ttl,
// defaulted by config).
func NewRedisState(client redis.Cmdable, prefix string, ttl time.Duration) *RedisState {
	return &RedisState{client: client, prefix: prefix, ttl: ttl}
}

// Save writes t with the store's TTL.
func (r *RedisState) Save(ctx context.Context, key string, t *HiddenTurn) error {
	return r.client.Set(ctx, r.prefix+key, encodeTurn(t), r.ttl).Err()
}

// Load reads keys in one round trip: a pipeline of GETs rather than one
// MGET, because the keys hash to different slots of a Redis Cluster (a
// cluster client splits the pipeline by node). A value that does not decode
// counts as missing.
func (r *RedisState) Load(ctx context.Context, keys []string) ([]*HiddenTurn, error) {
	pipe := r.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, r.prefix+k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]*HiddenTurn, len(keys))
	for i, c := range cmds {
		if b, err := c.Bytes(); err == nil {
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
	if !gjson.ValidBytes(b) {
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
