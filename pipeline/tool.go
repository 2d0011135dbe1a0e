package pipeline

import (
	"context"
	"time"
)

// ToolCall is one server-side tool call the model asked for.
// Arguments is the JSON text the model produced, owned by the call.
type ToolCall struct {
	ID        string
	Name      string
	Arguments []byte
	Request   *Request // the chat call that produced it (tenant, model, hints)
}

// ToolResult is what the model sees for a call: Content is a JSON document,
// {"status":"ok","data":...} or {"status":"error","error":{...}}. A tool
// failure is a result, not an error.
type ToolResult struct {
	CallID   string
	Name     string
	Content  []byte
	IsError  bool
	Stop     bool // end the loop after this turn without another model call
	Duration time.Duration
}

// ToolHandler runs one tool call. Implementations are safe for concurrent use.
type ToolHandler interface {
	CallTool(ctx context.Context, c *ToolCall) (*ToolResult, error)
}

// ToolHandlerFunc adapts a function to ToolHandler.
type ToolHandlerFunc func(ctx context.Context, c *ToolCall) (*ToolResult, error)

// CallTool calls f.
func (f ToolHandlerFunc) CallTool(ctx context.Context, c *ToolCall) (*ToolResult, error) {
	return f(ctx, c)
}

// ToolMiddleware wraps a ToolHandler (the function layer).
type ToolMiddleware func(next ToolHandler) ToolHandler

// ChainTools composes mws around h once, at start. mws[0] is the outermost; a
// nil middleware is skipped.
func ChainTools(h ToolHandler, mws ...ToolMiddleware) ToolHandler { return compose(h, mws) }
