package toolloop

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// toolSet is the set of server tools offered to one request (model globs,
// tenant policy, allowed_tools). It travels in the context of the tool chain.
type toolSet struct {
	tools []*tool
}

func (s *toolSet) get(name string) *tool {
	for _, t := range s.tools {
		if t.cfg.Name == name {
			return t
		}
	}
	return nil
}

type toolSetKey struct{}

func withToolSet(ctx context.Context, s *toolSet) context.Context {
	return context.WithValue(ctx, toolSetKey{}, s)
}

// offered returns the tools the request may call: the request's set when the
// loop put one in ctx, else every configured tool.
func (l *Loop) offered(ctx context.Context) []*tool {
	if s, ok := ctx.Value(toolSetKey{}).(*toolSet); ok && s != nil {
		return s.tools
	}
	return l.registry().tools
}

// lookup returns the tool named name: from the request's offered set when
// the loop put one in ctx (a snapshot that cannot change under the call),
// else from the current registry.
func (l *Loop) lookup(ctx context.Context, name string) *tool {
	if s, ok := ctx.Value(toolSetKey{}).(*toolSet); ok && s != nil {
		return s.get(name)
	}
	return l.registry().byName[name]
}

// buildChain composes the function layer once, outermost first.
func (l *Loop) buildChain(outer pipeline.ToolMiddleware, extra []pipeline.ToolMiddleware) pipeline.ToolHandler {
	var mws []pipeline.ToolMiddleware
	if outer != nil {
		mws = append(mws, outer)
	}
	mws = append(mws, l.observeMW, l.resolveMW, l.policyMW, l.validateMW)
	mws = append(mws, extra...)
	mws = append(mws, l.capMW, l.retryMW, l.timeoutMW)
	return pipeline.ChainTools(pipeline.ToolHandlerFunc(l.execute), mws...)
}

func (l *Loop) errResult(c *pipeline.ToolCall, err error) *pipeline.ToolResult {
	return &pipeline.ToolResult{CallID: c.ID, Name: c.Name, Content: errContent(err, l.cfg.IncludeDetailedErrors), IsError: true}
}

// observeMW times the call, turns chain errors into error results (a tool
// failure is a result, not a request failure), counts and logs it.
func (l *Loop) observeMW(next pipeline.ToolHandler) pipeline.ToolHandler {
	return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		start := time.Now()
		res, err := next.CallTool(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			res = l.errResult(c, err)
		}
		if res == nil {
			res = l.errResult(c, errors.New("no result"))
		}
		res.Duration = time.Since(start)
		if res.CallID == "" {
			res.CallID = c.ID
		}
		if t := l.lookup(ctx, res.Name); t != nil {
			t.metrics.observe(res.Name, res.IsError, res.Duration.Seconds())
		} else {
			unknownTool.observe("unknown", res.IsError, res.Duration.Seconds())
		}
		if e := l.log.Debug(); e.Enabled() {
			status := "ok"
			if res.IsError {
				status = "error"
			}
			e.Str("tool", c.Name).Str("call_id", c.ID).Str("status", status).
				Dur("duration", res.Duration).Int("result_bytes", len(res.Content)).Msg("tool call")
		}
		return res, nil
	})
}

// resolveMW maps the called name onto an offered tool: exact, then
// case-insensitive, then a unique close match (nameAllowance).
func (l *Loop) resolveMW(next pipeline.ToolHandler) pipeline.ToolHandler {
	return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		tools := l.offered(ctx)
		t := l.resolve(tools, c.Name)
		if t == nil {
			names := make([]string, len(tools))
			for i, t := range tools {
				names[i] = t.cfg.Name
			}
			sort.Strings(names)
			res := l.errResult(c, &ToolError{Kind: "unknown_tool",
				Message: fmt.Sprintf("unknown tool %q; available tools: %s", c.Name, strings.Join(names, ", "))})
			res.Stop = l.cfg.TerminateOnUnknownCalls
			return res, nil
		}
		if t.cfg.Name != c.Name {
			l.log.Info().Str("called", c.Name).Str("resolved", t.cfg.Name).Msg("tool name resolved to a near miss")
			cc := *c
			cc.Name = t.cfg.Name
			c = &cc
		}
		res, err := next.CallTool(ctx, c)
		if res != nil {
			res.Name = t.cfg.Name
		}
		return res, err
	})
}

// resolve is resolveName, kept to the called name's MCP server: a name is
// resolved only to a tool whose name carries the same configured server
// prefix (the longest one each carries), or none when it carries none. When a server is down its tools are not
// offered, and a look-alike of another server's would run instead.
func (l *Loop) resolve(tools []*tool, name string) *tool {
	t := resolveName(tools, name, len(name)-len(l.carried(name)))
	if t == nil || t.cfg.Name == name || len(l.opts.ServerPrefixes) == 0 {
		return t
	}
	if !strings.EqualFold(l.carried(name), l.carried(t.cfg.Name)) {
		return nil
	}
	return t
}

// carried is the longest configured server prefix name begins with.
func (l *Loop) carried(name string) string {
	c := ""
	for _, p := range l.opts.ServerPrefixes {
		if len(p) > len(c) && len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			c = p
		}
	}
	return c
}

// maxNameDistance is the largest edit distance a near-miss name may have.
const maxNameDistance = 2

// nameAllowance is the edit distance a near miss may have from a called
// name whose own part (without its server's prefix) is n bytes long: a
// slip in a long name (calculater, get_wether) is one, but a short name
// a letter off is another word (lie and die, pid and pig, hand and
// hang), and running that tool instead would run something the model
// never asked for.
func nameAllowance(n int) int {
	switch {
	case n >= 10:
		return maxNameDistance
	case n >= 5:
		return 1
	}
	return 0
}

// resolveName finds the tool name calls: exact, then in another case,
// then the one tool within nameAllowance(core) edits, core being the
// length of name's own part.
func resolveName(tools []*tool, name string, core int) *tool {
	if i := nearest(len(tools), func(i int) string { return tools[i].cfg.Name }, name, core); i >= 0 {
		return tools[i]
	}
	return nil
}

// nearest is the index of the one of n names (nameOf) that name calls:
// exact, then in another case, then the one within nameAllowance(core)
// edits; -1 for none, or for two equally near.
func nearest(n int, nameOf func(int) string, name string, core int) int {
	for i := range n {
		if nameOf(i) == name {
			return i
		}
	}
	for i := range n {
		if strings.EqualFold(nameOf(i), name) {
			return i
		}
	}
	allowed := nameAllowance(core)
	if allowed == 0 {
		return -1
	}
	best, bestD, ties := -1, allowed+1, 0
	lname := strings.ToLower(name)
	for i := range n {
		d := editDistance(lname, strings.ToLower(nameOf(i)), allowed+1)
		switch {
		case d > allowed:
		case d < bestD:
			best, bestD, ties = i, d, 0
		case d == bestD:
			ties++
		}
	}
	if ties > 0 {
		return -1 // ambiguous: let the model choose again
	}
	return best
}

// editDistance is the edit distance of a and b in which swapping two
// neighbouring letters is one edit, as a deletion, an insertion or a
// substitution is (optimal string alignment: "serach" is one edit from
// "search", not two), or limit when it is at least limit (names are short;
// the cut keeps adversarial input cheap).
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	pprev := make([]int, len(b)+1) // the row before prev, for swaps
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pprev[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			// Each later row is at least this one's minimum (a swap reaches
			// back one row more, from a row whose minimum was at least
			// limit-1, plus one).
			return limit
		}
		pprev, prev, cur = prev, cur, pprev
	}
	return min(prev[len(b)], limit)
}

// policyMW denies tools the tenant's policy does not allow.
func (l *Loop) policyMW(next pipeline.ToolHandler) pipeline.ToolHandler {
	return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		var tenant *pipeline.Tenant
		if c.Request != nil {
			tenant = c.Request.Tenant
		}
		if !tenant.AllowsTool(c.Name) {
			return l.errResult(c, &ToolError{Kind: "not_allowed", Message: fmt.Sprintf("tool %q is not allowed for this caller", c.Name)}), nil
		}
		return next.CallTool(ctx, c)
	})
}

// retryMW runs idempotent tools up to two more times after an error result
// (not after invalid arguments or a policy denial: the same call would fail
// the same way).
func (l *Loop) retryMW(next pipeline.ToolHandler) pipeline.ToolHandler {
	return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		t := l.lookup(ctx, c.Name)
		res, err := next.CallTool(ctx, c)
		if t == nil || !t.cfg.Idempotent {
			return res, err
		}
		for attempt := 1; attempt <= 2 && ctx.Err() == nil; attempt++ {
			if err == nil && (res == nil || !res.IsError || final(gjson.GetBytes(res.Content, "error.type").String())) {
				break
			}
			l.log.Debug().Str("tool", c.Name).Int("attempt", attempt+1).Msg("retrying idempotent tool")
			res, err = next.CallTool(ctx, c)
		}
		return res, err
	})
}

// final reports whether an error result of this type would come back the
// same on a retry (an agent tool's expert that refused would refuse again).
func final(errType string) bool {
	return errType == "invalid_arguments" || errType == "not_allowed" || errType == "refused"
}

// timeoutMW bounds one attempt by the tool's timeout.
func (l *Loop) timeoutMW(next pipeline.ToolHandler) pipeline.ToolHandler {
	return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		t := l.lookup(ctx, c.Name)
		if t == nil || t.inProcess {
			return next.CallTool(ctx, c)
		}
		tctx, cancel := context.WithTimeout(ctx, t.timeout)
		defer cancel()
		res, err := next.CallTool(tctx, c)
		if ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) && (err != nil || res == nil || res.IsError) {
			return l.errResult(c, &ToolError{Kind: "timeout", Message: fmt.Sprintf("the tool timed out after %s", t.timeout)}), nil
		}
		return res, err
	})
}

// execute is the terminal tool handler: it runs the executor and wraps its
// output in the result envelope.
func (l *Loop) execute(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
	t := l.lookup(ctx, c.Name)
	if t == nil {
		return l.errResult(c, &ToolError{Kind: "unknown_tool", Message: fmt.Sprintf("unknown tool %q", c.Name)}), nil
	}
	if t.sem != nil {
		select {
		case t.sem <- struct{}{}:
			defer func() { <-t.sem }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	sz := sizeOf(ctx)
	if sz != nil {
		*sz = outputSize{}
	}
	data, err := t.exec.run(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return l.errResult(c, err), nil
	}
	return &pipeline.ToolResult{CallID: c.ID, Name: c.Name, Content: okContent(data)}, nil
}
