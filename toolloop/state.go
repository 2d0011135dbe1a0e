package toolloop

import (
	"context"
	"time"
)

// HiddenTurn is what the client never saw of a mixed turn (server and client
// calls together): the assistant message with every tool call of the turn
// and the server calls' tool messages, as raw JSON. Owned by the store once
// saved.
type HiddenTurn struct {
	Assistant   []byte   // {"role":"assistant",...,"tool_calls":[all calls]}
	ToolResults [][]byte // {"role":"tool","tool_call_id":...} of the server calls, in call order
	ClientIDs   []string // ids of the client calls returned to the client
	Saved       time.Time
}

// StateStore keeps hidden turns so that the client's follow-up request,
// which only carries the client calls' results, can be rebuilt into a valid
// history before it goes upstream. Implementations are safe for concurrent
// use. Key is the first client call id of the turn.
//
// TODO(state): a memory (LRU, tool_loop.state_ttl/state_max_entries) and a
// Redis implementation, and the rebuild of the follow-up request in Chat
// (find an assistant message whose tool_calls ids match ClientIDs, splice the
// hidden calls and results back in). Today Save is called when a store is
// configured and nothing reads it.
type StateStore interface {
	Save(ctx context.Context, key string, t *HiddenTurn) error
	Load(ctx context.Context, key string) (*HiddenTurn, error)
}
