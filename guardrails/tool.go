package guardrails

import (
	"bytes"
	"context"
	"errors"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/toolloop"
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
			c, err := e.checkInput(ctx, c)
			if err != nil {
				return nil, err
			}
			res, err := next.CallTool(ctx, c)
			if err != nil || res == nil {
				return res, err
			}
			return e.checkOutput(ctx, c, res)
		})
	}
}

// checkInput returns c, or a copy of it with the arguments the tool_input
// guards redacted.
func (e *Engine) checkInput(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolCall, error) {
	args, err := e.checkJSON(ctx, c, StageToolInput, c.Arguments)
	if err != nil || args == nil {
		return c, err
	}
	edited := *c
	edited.Arguments = args
	return &edited, nil
}

// checkOutput returns res, or a copy of it with the content the tool_output
// guards redacted; nil with the error when they block it.
func (e *Engine) checkOutput(ctx context.Context, c *pipeline.ToolCall, res *pipeline.ToolResult) (*pipeline.ToolResult, error) {
	content, err := e.checkJSON(ctx, c, StageToolOutput, res.Content)
	switch {
	case err != nil:
		return nil, err
	case content == nil:
		return res, nil
	}
	edited := *res
	edited.Content = content
	return &edited, nil
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

// checkJSON checks a JSON text (the arguments or the result of call c) with
// the guards of stage that check c's tool for c's tenant; nil when
// unchanged or when no guard applies. A block, or a redaction that leaves
// invalid JSON, is a content_blocked tool error.
func (e *Engine) checkJSON(ctx context.Context, c *pipeline.ToolCall, stage string, text []byte) ([]byte, error) {
	var t *pipeline.Tenant
	var meta *pipeline.Meta
	if c.Request != nil {
		t, meta = c.Request.Tenant, c.Request.Meta
	}
	gs := forTool(e.guards(t, stage), c.Name)
	if len(gs) == 0 {
		return nil, nil
	}
	ck := newChecker(ctx, gs, meta)
	out, err := ck.Check(text)
	valid := true
	if err == nil {
		out, valid, err = judgeJSON(ck, text, out) // arguments.go
	}
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
	if !valid {
		return nil, &toolloop.ToolError{Kind: "content_blocked", Message: "a guardrail's redaction could not be applied; the content was withheld"}
	}
	return append([]byte(nil), out...), nil
}
