package toolloop

import (
	"context"
	"errors"
	"testing"
	"time"

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
