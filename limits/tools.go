package limits

import (
	"context"
	"fmt"

	"github.com/llmgw/gateway/pipeline"
)

// ToolLimit returns the tool-layer middleware for tool_calls_per_minute:
// every server tool call takes one from the matching counters; over the
// limit the call does not run and the model gets an error result saying
// so (a tool failure is a result, not a request failure).
func (l *Limiter) ToolLimit() pipeline.ToolMiddleware {
	return func(next pipeline.ToolHandler) pipeline.ToolHandler {
		has := false
		for _, r := range l.rules {
			has = has || r.tools > 0
		}
		if !has {
			return next
		}
		return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			var r pipeline.Request
			if c.Request != nil {
				r = *c.Request
			}
			tenant, key := who(&r)
			now := l.now()
			checks := l.scopeOf(tenant, key, r.Model, now).tools
			if len(checks) == 0 {
				return next.CallTool(ctx, c)
			}
			var out outcome
			if err := l.store.Take(ctx, now, c.ID, checks, 0, &out); err != nil {
				if err := l.storeFailed(err); err == nil {
					return next.CallTool(ctx, c)
				}
				out = outcome{denied: 0}
			}
			if out.denied < 0 {
				return next.CallTool(ctx, c)
			}
			limited.WithLabelValues("x").Inc()
			msg := fmt.Sprintf("tool call rate limit reached (%d per minute); try again later or answer without this tool", checks[out.denied].limit)
			return &pipeline.ToolResult{CallID: c.ID, Name: c.Name, IsError: true,
				Content: fmt.Appendf(nil, `{"status":"error","error":{"type":"rate_limit_exceeded","message":%q}}`, msg)}, nil
		})
	}
}
