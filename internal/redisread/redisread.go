// Package redisread reads a Redis string only when it fits a bound, in one
// round trip: a value longer than the bound never leaves Redis, so a shared
// or compromised Redis cannot make the gateway allocate whatever length its
// reply declares. The response cache, the Responses store and the tool
// loop's turn state read through it.
package redisread

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Script returns the string at KEYS[1] when it is at most ARGV[1] bytes
// long, its length (an integer reply) when it is longer, and nil when there
// is none; like GET, it fails on a key that does not hold a string. Run it
// with Run (EVALSHA, falling back to EVAL), or with Eval inside a pipeline,
// which cannot fall back on NOSCRIPT.
var Script = redis.NewScript(`
local n = redis.call('STRLEN', KEYS[1])
if n > tonumber(ARGV[1]) then return n end
return redis.call('GET', KEYS[1])
`)

// Value reads a reply of Script: the value, or oversized when the value was
// over the bound (a miss the caller counts).
func Value(reply any) (b []byte, oversized bool, err error) {
	switch v := reply.(type) {
	case string:
		return []byte(v), false, nil
	case int64:
		return nil, true, nil
	default:
		return nil, false, fmt.Errorf("redisread: unexpected reply %T", reply)
	}
}
