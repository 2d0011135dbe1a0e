package toolloop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// A model call a tool makes may not take the last call of the request; the
// loop's own round may. Outside a loop nothing is counted.
func TestModelCallLimitReservesTheLastCall(t *testing.T) {
	t.Parallel()
	ok := &pipeline.Response{Body: []byte(`{}`)}
	h := ModelCallLimit(pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return ok, nil }))
	m := &modelCalls{max: 3}
	ctx := context.WithValue(context.Background(), modelCallsKey{}, m)
	round, tool := &pipeline.Request{}, &pipeline.Request{}
	m.round.Store(round)
	steps := []struct {
		r    *pipeline.Request
		fail bool
	}{{round, false}, {tool, false}, {tool, true}, {round, false}, {round, true}}
	for i, s := range steps {
		_, err := h.Chat(ctx, s.r)
		if s.fail != errors.Is(err, ErrModelCallLimit) {
			t.Fatalf("step %d: err %v, want refused=%v", i, err, s.fail)
		}
	}
	if _, err := h.Chat(context.Background(), tool); err != nil {
		t.Fatalf("outside a loop: %v", err)
	}
}

// A round after the first must pass AdmitRound (the tenant's limits), and
// its refusal is returned as it is, without calling the model; the first
// round (the request layer admitted it) and a tool's own call (its tool
// admitted it) are not admitted again.
func TestModelCallLimitAdmitsLaterRounds(t *testing.T) {
	t.Parallel()
	ok := &pipeline.Response{Body: []byte(`{}`)}
	var called int
	h := ModelCallLimit(pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		called++
		return ok, nil
	}))
	refusal := pipeline.Errorf(429, pipeline.TypeInsufficientQuota, pipeline.CodeInsufficientQuota, "spent")
	var admitted []*pipeline.Request
	refuse := false
	m := &modelCalls{max: 100, admit: func(r *pipeline.Request) error {
		admitted = append(admitted, r)
		if refuse {
			return refusal
		}
		return nil
	}}
	ctx := context.WithValue(context.Background(), modelCallsKey{}, m)
	first, second, third, tool := &pipeline.Request{}, &pipeline.Request{}, &pipeline.Request{}, &pipeline.Request{}
	m.first.Store(first)
	m.round.Store(first)
	for _, r := range []*pipeline.Request{first, tool} {
		if _, err := h.Chat(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	m.round.Store(second)
	if _, err := h.Chat(ctx, second); err != nil {
		t.Fatal(err)
	}
	m.round.Store(third)
	refuse = true
	if _, err := h.Chat(ctx, third); err != refusal {
		t.Fatalf("refused round: err %v, want the refusal as it is", err)
	}
	if len(admitted) != 2 || admitted[0] != second || admitted[1] != third || called != 3 {
		t.Fatalf("admitted %d calls, model called %d times; want the later rounds admitted and 3 calls", len(admitted), called)
	}
}

// BenchmarkModelCallLimit is the cost ModelCallLimit adds to every model
// call: a context lookup outside a loop, and a count inside one.
func BenchmarkModelCallLimit(b *testing.B) {
	ok := &pipeline.Response{Body: []byte(`{}`)}
	h := ModelCallLimit(pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return ok, nil }))
	// A context as deep as a request's inside the loop: cancel, values.
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		base = context.WithValue(base, benchKey(i), i)
	}
	r := &pipeline.Request{}
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"outside a loop", base},
		{"in a loop", context.WithValue(base, modelCallsKey{}, &modelCalls{max: 1 << 62})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Chat(tc.ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type benchKey int

// The session's limit context carries the counter and defers the rest to
// the request's context: values, and cancellation into derived contexts.
func TestLimitCtx(t *testing.T) {
	t.Parallel()
	type k struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), k{}, "v"))
	m := &modelCalls{max: 2}
	lc := &limitCtx{Context: parent, calls: m}
	child, stop := context.WithCancel(lc)
	defer stop()
	if child.Value(modelCallsKey{}) != m || child.Value(k{}) != "v" {
		t.Fatal("values not carried")
	}
	cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the request's cancellation did not reach a context derived from the limit context")
	}
}

// A call past max_calls is refused naming the setting that holds the
// limit: an MCP server's tools share mcp_servers.max_calls, which the
// message named tools.max_calls (an MCP probe).
func TestMaxCallsRefusalNamesItsSetting(t *testing.T) {
	t.Parallel()
	for kind, key := range map[string]string{"builtin": "(tools.max_calls)", "mcp": "(mcp_servers.max_calls)"} {
		l := newLoop(t, []config.Tool{calcTool}, nil)
		tools := l.static.tools
		tools[0].cfg.MaxCalls, tools[0].cfg.Kind = 1, kind
		s := l.newSession(request(nil, false, userBody+`}`), &plan{set: &toolSet{tools: tools}})
		calls := []pipeline.ToolCall{{ID: "a", Name: "calculator"}, {ID: "b", Name: "calculator"}}
		results := make([]*pipeline.ToolResult, len(calls))
		s.admit(calls, results)
		if results[0] != nil || results[1] == nil || !strings.Contains(string(results[1].Content), key) {
			t.Fatalf("%s: results %v, want the second refused naming %s", kind, results, key)
		}
	}
}
