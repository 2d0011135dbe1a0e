package toolloop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// HiddenTurn is what the client never saw of a round that handed client
// calls out: the server-only rounds of the same client request before it,
// and for a mixed turn (server and client calls together) the assistant
// message with every tool call of the turn and the server calls' tool
// messages, as raw JSON (a round of client calls alone has no tool
// messages). Owned by the store once saved; read-only after Load.
type HiddenTurn struct {
	Prior       []byte   // earlier hidden rounds: messages separated by ',' (no brackets); may be empty
	Assistant   []byte   // {"role":"assistant",...,"tool_calls":[all calls]}
	ToolResults [][]byte // {"role":"tool","tool_call_id":...} of the server calls, in call order; may be empty
	ClientIDs   []string // ids of the client calls returned to the client
	Saved       time.Time
}

// size is the turn's approximate memory footprint in bytes.
func (t *HiddenTurn) size() int {
	n := len(t.Prior) + len(t.Assistant) + 64
	for _, r := range t.ToolResults {
		n += len(r) + 24
	}
	for _, id := range t.ClientIDs {
		n += len(id) + 16
	}
	return n
}

// StateStore keeps hidden turns so that the client's follow-up request,
// which only carries the client calls' results, can be rebuilt into the
// history the model produced before it goes upstream (docs/architecture.md §3).
//
// Keys come from StateKey: the caller's tenant and the first client-visible
// tool-call id of the turn. Entries expire after the store's TTL; a store
// may also drop entries early to stay within its bounds. Implementations are
// safe for concurrent use and own the turns they are given.
type StateStore interface {
	Save(ctx context.Context, key string, t *HiddenTurn) error
	// Load returns one turn per key, nil where none is kept (expired,
	// evicted, never saved). A failing store returns an error; the caller
	// then treats every key as missing.
	Load(ctx context.Context, keys []string) ([]*HiddenTurn, error)
}

// StateClaimer is implemented by a StateStore that can claim a key once:
// the first Claim of a key reports true, every later one (until the store's
// TTL or bounds drop the claim) false, on every replica that shares the
// store. settle claims a call awaiting approval before it applies a
// decision, so that one decision runs the call once, however many requests
// (concurrent, or one carrying the answer twice) bring it.
type StateClaimer interface {
	Claim(ctx context.Context, key string) (bool, error)
}

// ClaimAger is implemented by a StateClaimer that can tell when a key was
// claimed (ok false when it is not, or the claim does not say): a claim
// far older than its call could run was left by a request that never
// finished the call, whose gateway replica stopped while it ran.
type ClaimAger interface {
	ClaimedAt(ctx context.Context, key string) (at time.Time, ok bool, err error)
}

// StateKey is the store key of the turn whose first client call has id,
// for tenant (nil when the gateway is open). The tenant is part of the key
// so that one tenant can never splice another's hidden tool results into
// its history by replaying a call id; hashing bounds the key's length.
func StateKey(t *pipeline.Tenant, id string) string {
	return tenantHash(sha256.New(), t, id, 16)
}

// tenantHash is the hex of the first n bytes of h over the tenant's name
// (empty for nil), a NUL and s: a digest of s that no other tenant's s
// shares. h is fresh (sha256, or an HMAC for a tag only the gateway can
// make).
func tenantHash(h hash.Hash, t *pipeline.Tenant, s string, n int) string {
	if t != nil {
		h.Write([]byte(t.Name))
	}
	h.Write([]byte{0})
	h.Write([]byte(s))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:n])
}
