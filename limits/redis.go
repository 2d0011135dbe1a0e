package limits

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotTTL is how long a concurrency slot outlives a replica that died
// without releasing it.
const slotTTL = 15 * time.Minute

// takeScript checks every counter, then takes from all of them or none, in
// one round trip. Rates are GCRA: the key holds the theoretical arrival time
// (ms); a minute's worth of the limit is the burst. ARGV: now (ms), slot
// stale-before (ms), request id, then kind, limit, cost per key. Returns
// {denied index (0 = none), retry ms, remaining..., reset ms...}.
var takeScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local stale = tonumber(ARGV[2])
local id = ARGV[3]
local n = #KEYS
local denied, retry = 0, 0
local rem, reset, newtat = {}, {}, {}
for i = 1, n do
  local kind = ARGV[3 + (i-1)*3 + 1]
  local limit = tonumber(ARGV[3 + (i-1)*3 + 2])
  local cost = tonumber(ARGV[3 + (i-1)*3 + 3])
  if kind == 'r' then
    local t = 60000 / limit
    local tat = tonumber(redis.call('GET', KEYS[i]) or now)
    if tat < now then tat = now end
    local nt = tat + cost * t
    -- A cost of 0 (a later call of an admitted request) takes nothing but
    -- still needs one unit left: a counter at exactly zero is spent.
    local need = tat + math.max(cost, 1) * t
    if need - now > 60000 then
      if denied == 0 then denied = i; retry = need - now - 60000 end
      rem[i] = math.max(0, math.floor((60000 - (tat - now)) / t))
      reset[i] = tat - now
    else
      newtat[i] = nt
      rem[i] = math.max(0, math.floor((60000 - (nt - now)) / t))
      reset[i] = nt - now
    end
  elseif kind == 'c' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', stale)
    local cur = redis.call('ZCARD', KEYS[i])
    if cur + 1 > limit then
      if denied == 0 then denied = i end
      rem[i] = 0
    else
      rem[i] = limit - cur - 1
    end
    reset[i] = 0
  else
    local spent = tonumber(redis.call('GET', KEYS[i]) or 0)
    if spent >= limit then
      if denied == 0 then denied = i end
      rem[i] = 0
    else
      rem[i] = limit - spent
    end
    reset[i] = 0
  end
end
if denied == 0 then
  for i = 1, n do
    local kind = ARGV[3 + (i-1)*3 + 1]
    if kind == 'r' then
      redis.call('SET', KEYS[i], newtat[i], 'PX', math.ceil(newtat[i] - now) + 1000)
    elseif kind == 'c' then
      redis.call('ZADD', KEYS[i], now, id)
      redis.call('PEXPIRE', KEYS[i], 900000)
    end
  end
end
local out = {denied, math.ceil(retry)}
for i = 1, n do out[#out+1] = rem[i] end
for i = 1, n do out[#out+1] = math.ceil(reset[i]) end
return out
`)

// addScript moves a GCRA key forward by cost without a check (tokens
// already used). ARGV: now (ms), limit, cost.
var addScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local t = 60000 / tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local nt = tat + tonumber(ARGV[3]) * t
redis.call('SET', KEYS[1], nt, 'PX', math.ceil(nt - now) + 1000)
return 1
`)

// batchScript applies a numbered batch of additions (kindSeq first) in one
// step, once: KEYS[1] holds the number of the last batch its writer
// applied, and a batch at or below it is skipped. So a batch whose write
// failed with an unknown outcome (a timeout after Redis ran it) can be sent
// again without being counted twice. An operation that fails (a key of the
// wrong type) ends the script with an error reply, and Redis does not undo
// the operations before it, nor is the number set: the recorder drops such
// a batch rather than send it again. KEYS[i+1] is the key of the i-th
// operation. ARGV: the batch's number, now (ms), then per operation its
// code, and two arguments: r (GCRA advance, as addScript: limit, cost),
// i (INCRBY n), h (HINCRBY field, n), z (ZREM member), e (PEXPIREAT ms).
var batchScript = redis.NewScript(`
local seq = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or -1) >= seq then return 0 end
local now = tonumber(ARGV[2])
for i = 2, #KEYS do
  local j = 3 + (i-2)*3
  local op, k, a, b = ARGV[j], KEYS[i], ARGV[j+1], ARGV[j+2]
  if op == 'r' then
    local t = 60000 / tonumber(a)
    local tat = tonumber(redis.call('GET', k) or now)
    if tat < now then tat = now end
    local nt = tat + tonumber(b) * t
    redis.call('SET', k, nt, 'PX', math.ceil(nt - now) + 1000)
  elseif op == 'i' then
    redis.call('INCRBY', k, a)
  elseif op == 'h' then
    redis.call('HINCRBY', k, a, b)
  elseif op == 'z' then
    redis.call('ZREM', k, a)
  elseif op == 'e' then
    redis.call('PEXPIREAT', k, a)
  end
end
redis.call('SET', KEYS[1], seq, 'PX', ARGV[3 + (#KEYS-1)*3])
return 1
`)

// seqTTL is how long Redis keeps a writer's last batch number: far longer
// than a batch waits to be sent again.
const seqTTL = 24 * time.Hour

// redisStore keeps the counters in Redis, shared by every replica. A
// request's check is bounded by timeout as a whole (the script's EVALSHA
// and EVAL, a cluster's redirects and retries); the other calls by the
// client's own timeouts and their callers'. Safe for concurrent use.
type redisStore struct {
	rdb     redis.UniversalClient
	timeout time.Duration
}

var _ Store = (*redisStore)(nil)

// NewRedisStore returns a Store on rdb; keys are used as given (the caller
// prefixes them). timeout bounds a request's check (0: the client's own
// timeouts alone).
func NewRedisStore(rdb redis.UniversalClient, timeout time.Duration) Store {
	return &redisStore{rdb: rdb, timeout: timeout}
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func firstOr(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

func (s *redisStore) Take(ctx context.Context, now time.Time, id string, checks []check, tokens int64, out *outcome) error {
	keys := make([]string, len(checks))
	args := make([]any, 0, 3+3*len(checks))
	args = append(args, ms(now), ms(now.Add(-slotTTL)), id)
	for i, c := range checks {
		keys[i] = c.key
		args = append(args, string(rune(c.kind)), c.limit, c.costOf(tokens))
	}
	tctx := ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	vals, err := takeScript.Run(tctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return err
	}
	n := len(checks)
	if len(vals) != 2+2*n || vals[0] < 0 || vals[0] > int64(n) {
		// Not what the script returns: a store that answers otherwise (a
		// proxy in front of Redis, another program's script under our
		// name) is a store error, never an index out of range.
		return fmt.Errorf("limits: take script returned %d values (first %d) for %d checks", len(vals), firstOr(vals), n)
	}
	*out = outcome{denied: int(vals[0]) - 1, retryAfter: time.Duration(vals[1]) * time.Millisecond,
		remaining: vals[2 : 2+n], resetMS: vals[2+n:], buf: out.buf}
	return nil
}

func (s *redisStore) Add(ctx context.Context, now time.Time, adds []addition) error {
	if len(adds) > 0 && adds[0].kind == kindSeq {
		return s.addBatch(ctx, now, adds)
	}
	pipe := s.rdb.Pipeline()
	for _, a := range adds {
		switch a.kind {
		case kindRate:
			if a.n > 0 {
				addScript.Eval(ctx, pipe, []string{a.key}, ms(now), a.limit, a.rateCharge()) // EVALSHA cannot fall back inside a pipeline
			}
		case kindBudget:
			pipe.IncrBy(ctx, a.key, a.n)
		case kindRelease:
			pipe.ZRem(ctx, a.key, a.field)
		case kindUsage:
			for i, n := range a.row {
				if n != 0 {
					pipe.HIncrBy(ctx, a.key, a.field+metricNames[i], n)
				}
			}
		}
		if !a.until.IsZero() && a.kind != kindRate {
			pipe.ExpireAt(ctx, a.key, a.until)
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

func (s *redisStore) Usage(ctx context.Context, keys []string) ([]map[string]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	out := make([]map[string]int64, len(keys))
	for i, c := range cmds {
		out[i] = map[string]int64{}
		for f, v := range c.Val() {
			n, _ := strconv.ParseInt(v, 10, 64)
			out[i][f] = n
		}
	}
	return out, nil
}

// addBatch applies adds, a numbered batch (adds[0] is its kindSeq), in one
// batchScript: once however often it is sent (an error reply may leave it
// applied in part: see batchScript).
func (s *redisStore) addBatch(ctx context.Context, now time.Time, adds []addition) error {
	keys := []string{adds[0].key}
	args := []any{adds[0].n, ms(now)}
	op := func(key, code string, a, b any) {
		keys = append(keys, key)
		args = append(args, code, a, b)
	}
	for _, a := range adds[1:] {
		switch a.kind {
		case kindRate:
			if a.n > 0 {
				op(a.key, "r", a.limit, a.rateCharge())
			}
		case kindBudget:
			op(a.key, "i", a.n, 0)
		case kindRelease:
			op(a.key, "z", a.field, 0)
		case kindUsage:
			for i, n := range a.row {
				if n != 0 {
					op(a.key, "h", a.field+metricNames[i], n)
				}
			}
		}
		if !a.until.IsZero() && a.kind != kindRate {
			op(a.key, "e", ms(a.until), 0)
		}
	}
	args = append(args, seqTTL.Milliseconds())
	return batchScript.Run(ctx, s.rdb, keys, args...).Err()
}
