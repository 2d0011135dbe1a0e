package caching

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// NewToolResultCache returns a tool middleware that caches successful results
// of tools whose ttlFor(name) is positive, keyed by tenant, tool name and
// canonicalised arguments (so key order and whitespace in the model's
// arguments do not matter). Error and Stop results are never stored; calls
// with arguments that are not valid JSON are never cached. Store failures
// count as misses (metric gateway_cache_store_errors_total{cache="tool"}),
// and a call whose lookup failed stores nothing. ttlFor is called once per
// call and must be safe for concurrent use; so is the returned middleware.
func NewToolResultCache(store Store, ttlFor func(tool string) time.Duration) pipeline.ToolMiddleware {
	return func(next pipeline.ToolHandler) pipeline.ToolHandler {
		if store == nil || ttlFor == nil {
			return next
		}
		return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			ttl := ttlFor(c.Name)
			if ttl <= 0 || !jsonvalid.Bytes(c.Arguments) {
				return next.CallTool(ctx, c)
			}
			key := toolKey(c)
			val, ok, err := store.Get(ctx, key)
			if err != nil {
				// Fail open, and do not write to a store that just
				// failed: an unreachable Redis would cost the call a
				// second timeout.
				storeErrors.WithLabelValues("tool", "get").Inc()
				return next.CallTool(ctx, c)
			}
			if ok {
				toolHit.Inc()
				return &pipeline.ToolResult{CallID: c.ID, Name: c.Name, Content: append([]byte(nil), val...)}, nil
			}
			toolMiss.Inc()
			start := time.Now()
			res, err := next.CallTool(ctx, c)
			if err != nil || res == nil || res.IsError || res.Stop || len(res.Content) == 0 {
				return res, err
			}
			if res.Duration == 0 {
				res.Duration = time.Since(start)
			}
			if err := store.Set(context.WithoutCancel(ctx), key, append([]byte(nil), res.Content...), ttl); err != nil {
				storeErrors.WithLabelValues("tool", "set").Inc()
			}
			return res, nil
		})
	}
}

// toolKey is "tool:<tenant>:" and the hex SHA-256 of the tool name and the
// canonical arguments.
func toolKey(c *pipeline.ToolCall) string {
	buf := make([]byte, 0, len(c.Name)+len(c.Arguments)+8)
	buf = append(buf, keyVersion...)
	buf = append(buf, 0)
	buf = append(buf, c.Name...)
	buf = append(buf, 0)
	buf = appendCanonical(buf, c.Arguments)
	sum := sha256.Sum256(buf)
	tenant := ""
	if c.Request != nil && c.Request.Tenant != nil {
		tenant = c.Request.Tenant.Name
	}
	return "tool:" + tenant + ":" + hex.EncodeToString(sum[:])
}
