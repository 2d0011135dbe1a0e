package guardrails

import (
	"bytes"
	"context"
	"errors"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/toolloop"
	"github.com/tidwall/gjson"
)

// ToolMiddleware is the tool layer's middleware of the tool_input and
// tool_output stages; nil for a nil Engine. A blocked input is an error
// result for the model and the tool does not run; a blocked output
// replaces the result with one; redactions apply to the raw JSON text (a
// redaction that would break it blocks instead).
func (e *Engine) ToolMiddleware() pipeline.ToolMiddleware {
	if e == nil {
		return nil
	}
	return func(next pipeline.ToolHandler) pipeline.ToolHandler {
		return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			var t *pipeline.Tenant
			var meta *pipeline.Meta
			if c.Request != nil {
				t, meta = c.Request.Tenant, c.Request.Meta
			}
			if in := forTool(e.guards(t, StageToolInput), c.Name); len(in) > 0 {
				args, err := checkJSON(ctx, in, meta, c.Arguments)
				if err != nil {
					return nil, err
				}
				if args != nil {
					cc := *c
					cc.Arguments = args
					c = &cc
				}
			}
			res, err := next.CallTool(ctx, c)
			if err != nil || res == nil {
				return res, err
			}
			if out := forTool(e.guards(t, StageToolOutput), c.Name); len(out) > 0 {
				content, err := checkJSON(ctx, out, meta, res.Content)
				if err != nil {
					return nil, err
				}
				if content != nil {
					r := *res
					r.Content = content
					res = &r
				}
			}
			return res, nil
		})
	}
}

// forTool returns the guards of gs that check the tool name.
func forTool(gs []*guard, name string) []*guard {
	var out []*guard
	for _, g := range gs {
		if g.appliesToTool(name) {
			out = append(out, g)
		}
	}
	return out
}

// checkJSON checks a JSON text (arguments or a result); nil when unchanged.
// A block, or a redaction that leaves invalid JSON, is a content_blocked
// tool error.
func checkJSON(ctx context.Context, gs []*guard, meta *pipeline.Meta, text []byte) ([]byte, error) {
	out, err := newChecker(ctx, gs, meta).Check(text)
	var b *Blocked
	if errors.As(err, &b) {
		return nil, &toolloop.ToolError{Kind: "content_blocked", Message: b.Error()}
	}
	if err != nil {
		return nil, err
	}
	if bytes.Equal(out, text) {
		return nil, nil
	}
	if len(text) > 0 && gjson.ValidBytes(text) && !gjson.ValidBytes(out) {
		return nil, &toolloop.ToolError{Kind: "content_blocked", Message: "a guardrail's redaction could not be applied; the content was withheld"}
	}
	return append([]byte(nil), out...), nil
}
