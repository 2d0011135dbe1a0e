package toolloop

import (
	"context"
	"reflect"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// ToolSource supplies server tools that appear and disappear at run time
// (the tools of MCP servers). Implementations are safe for concurrent use.
type ToolSource interface {
	// Version changes whenever Tools would return a different set. It is
	// called on every request that may use server tools: one atomic load.
	Version() uint64
	// Tools returns the current definitions (Parameters holds the JSON
	// schema). The slice is read-only and may be shared.
	Tools() []config.Tool
	// Call runs the tool named name. data is JSON or text for the model;
	// isError marks a failure the model can act on, whose data is the
	// message (the tool's, or its server's answer to the call, such as a
	// JSON-RPC error); err is a transport failure (the tool's server is
	// unreachable).
	Call(ctx context.Context, name string, args []byte) (data []byte, isError bool, err error)
}

// registry returns the current tool registry: the configured tools plus,
// when a ToolSource is set, its tools at its current version. The fast path
// is two atomic loads; a changed version rebuilds the snapshot once.
func (l *Loop) registry() *registry {
	r := l.cur.Load()
	if l.opts.Source == nil || r.version == l.opts.Source.Version() {
		return r
	}
	return l.refresh()
}

// refresh rebuilds the snapshot from the source. Schemas are compiled here,
// when the tools are listed, never per call; an unchanged tool keeps its
// compiled schema and its concurrency semaphore.
func (l *Loop) refresh() *registry {
	l.refreshMu.Lock()
	defer l.refreshMu.Unlock()
	prev := l.cur.Load()
	src := l.opts.Source
	v := src.Version()
	if prev.version == v {
		return prev
	}
	// Read the version before the tools: a change in between leaves the
	// stored version behind, so the next request refreshes again.
	defs := src.Tools()
	next := &registry{version: v, byName: make(map[string]*tool, len(l.static.tools)+len(defs))}
	next.tools = append(make([]*tool, 0, len(l.static.tools)+len(defs)), l.static.tools...)
	for _, t := range l.static.tools {
		next.byName[t.cfg.Name] = t
	}
	for _, tc := range defs {
		if next.byName[tc.Name] != nil {
			l.log.Warn().Str("tool", tc.Name).Msg("tool loop: a dynamic tool has the name of a configured tool; the configured one is kept")
			continue
		}
		t := prev.byName[tc.Name]
		if t == nil || t.exec == nil || !reflect.DeepEqual(t.cfg, tc) {
			var err error
			if t, err = l.sourceTool(tc); err != nil {
				l.log.Warn().Err(err).Str("tool", tc.Name).Msg("tool loop: a dynamic tool's schema does not compile; skipped")
				continue
			}
		}
		next.tools = append(next.tools, t)
		next.byName[tc.Name] = t
	}
	l.cur.Store(next)
	return next
}

// sourceTool builds the tool entry of a dynamic tool.
func (l *Loop) sourceTool(tc config.Tool) (*tool, error) {
	src := l.opts.Source
	name := tc.Name
	exec := execFunc(func(ctx context.Context, c *pipeline.ToolCall) ([]byte, error) {
		data, isErr, err := src.Call(ctx, name, c.Arguments)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &ToolError{Kind: "tool_error", Message: "the tool's server is unreachable", Detail: err}
		}
		if isErr {
			// The server's own message is meant for the model.
			return nil, &ToolError{Kind: "tool_error", Message: string(data)}
		}
		return data, nil
	})
	return newTool(tc, tc.Parameters, exec, &l.opts)
}
