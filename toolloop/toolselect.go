package toolloop

import (
	"context"
	"strconv"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/toolselect"
)

// ToolSelector narrows the tools a request offers before its first round
// (LLM tool selection, *toolselect.Selector). Safe for concurrent use.
type ToolSelector interface {
	// Needed reports, without allocating, whether req with server more
	// server tools offers more tools than its model's max_tools.
	Needed(req *pipeline.Request, server int) bool
	// Select returns the request to serve, the server tools to keep (nil =
	// all) and what it did. It never fails: on failure every tool stays.
	Select(ctx context.Context, req *pipeline.Request, server []toolselect.Tool) (*pipeline.Request, map[string]bool, toolselect.Result)
}

var _ ToolSelector = (*toolselect.Selector)(nil)

// selection is what tool selection did for a request that enters the loop.
type selection struct {
	res   toolselect.Result
	calls int64 // model calls it made, counted against tool_loop.max_model_calls
}

// selectTools runs tool selection once per client request, before the fast
// path is decided: a client-only request with many tools is narrowed too.
// It returns the request and the server tools to go on with, and what it
// did (nil when selection did not run). The selector's call counts against
// max_model_calls but leaves the loop its first round and a final answer:
// with max_model_calls = 2 it is refused and every tool is offered.
func (l *Loop) selectTools(ctx context.Context, req *pipeline.Request, tools []*tool) (*pipeline.Request, []*tool, *selection) {
	sel := l.opts.Selector
	if sel == nil || !sel.Needed(req, len(tools)) {
		return req, tools, nil
	}
	server := make([]toolselect.Tool, len(tools))
	for i, t := range tools {
		server[i] = toolselect.Tool{Name: t.cfg.Name, Description: t.cfg.Description}
	}
	calls := &modelCalls{max: int64(l.cfg.MaxModelCalls) - 1}
	r, keep, res := sel.Select(&limitCtx{Context: ctx, calls: calls}, req, server)
	if res.Outcome == "" {
		return r, tools, nil // not needed after all
	}
	out := &selection{res: res, calls: calls.used.Load()}
	if keep == nil {
		return r, tools, out
	}
	kept := make([]*tool, 0, len(tools))
	for _, t := range tools {
		if keep[t.cfg.Name] {
			kept = append(kept, t)
		}
	}
	return r, kept, out
}

// modelCalls returns the model calls selection made (0 for nil).
func (sel *selection) modelCalls() int64 {
	if sel == nil {
		return 0
	}
	return sel.calls
}

// appendJSON adds "tool_select" to the x_gateway object tr: the
// outcome, the tools kept of those offered and the selector's own usage
// (never part of the response's usage).
func (sel *selection) appendJSON(tr []byte) []byte {
	if sel == nil || len(tr) == 0 {
		return tr
	}
	tr = append(tr[:len(tr)-1], `,"tool_select":{"outcome":`...)
	tr = appendJSONString(tr, []byte(sel.res.Outcome))
	tr = append(tr, `,"offered":`...)
	tr = strconv.AppendInt(tr, int64(sel.res.Offered), 10)
	tr = append(tr, `,"kept":`...)
	tr = strconv.AppendInt(tr, int64(sel.res.Kept), 10)
	tr = append(tr, `,"usage":{"prompt_tokens":`...)
	tr = strconv.AppendInt(tr, sel.res.Prompt, 10)
	tr = append(tr, `,"completion_tokens":`...)
	tr = strconv.AppendInt(tr, sel.res.Answer, 10)
	return append(tr, `}}}`...)
}
