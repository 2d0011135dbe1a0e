package toolloop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

// A tool that panics (a bug) fails its call, as a tool's error does, also
// when the turn's calls run in parallel on goroutines of their own, where
// the panic would otherwise end the process; the other call's result and
// the answer are unaffected.
func TestPanickingToolFailsItsCall(t *testing.T) {
	before := testutil.ToFloat64(observe.Panics)
	m := &fakeModel{turns: []turnFn{
		always(nil, completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}},{"id":"c2","type":"function","function":{"name":"current_time","arguments":"{\"timezone\":\"UTC\"}"}}]`, "tool_calls", 1, 1)),
		always(nil, completion("up-2", "done", "", "stop", 1, 1)),
	}}
	l := newLoop(t, []config.Tool{calcTool, timeTool}, func(o *Options) {
		o.ToolMiddleware = append(o.ToolMiddleware, func(next pipeline.ToolHandler) pipeline.ToolHandler {
			return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
				if c.Name == "current_time" {
					panic("a bug in a tool")
				}
				return next.CallTool(ctx, c)
			})
		})
	})
	if !*l.cfg.Parallel {
		t.Fatal("the default runs a turn's calls in parallel; this test needs it")
	}
	resp, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(resp.Body, "choices.0.message.content").Str; got != "done" {
		t.Fatalf("answer %q", got)
	}
	tm := toolMessages(m.body(1))
	if len(tm) != 2 || !strings.Contains(tm[0].Get("content").Str, `"result":3`) || !strings.Contains(tm[1].Get("content").Str, "the tool failed") {
		t.Fatalf("tool results %v", tm)
	}
	if n := testutil.ToFloat64(observe.Panics) - before; n < 1 {
		t.Fatalf("gateway_panics_total rose by %v", n)
	}
}

// A layer that panics in a streamed loop's later round (which runs on the
// stream's worker goroutine) ends the stream with an error, not the
// process.
func TestPanickingRoundEndsTheStream(t *testing.T) {
	m := &fakeModel{turns: []turnFn{
		always(toolRound("up-1", "c1", "calculator", `{"expression":"1+2"}`, 1, 1), ""),
		func(*pipeline.Request) ([]string, string) { panic("a bug in a layer") },
	}}
	l := newLoop(t, []config.Tool{calcTool}, nil)
	resp, err := l.Chat(context.Background(), request(m, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	for {
		_, err := resp.Stream.Next()
		if err == nil {
			continue
		}
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 500 {
			t.Fatalf("stream ended with %v, want an internal error", err)
		}
		return
	}
}

// An approved call whose tool panics fails its call like any other: the
// model sees "the tool failed" and the request still gets its answer.
func TestPanickingApprovedToolFailsItsCall(t *testing.T) {
	m := &fakeModel{turns: []turnFn{
		always(nil, completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+2\"}"}}]`, "tool_calls", 1, 1)),
		always(nil, completion("up-2", "done", "", "stop", 1, 1)),
	}}
	st := NewMemoryState(time.Hour, 100, 1<<20)
	l := newLoop(t, []config.Tool{gatedCalc}, func(o *Options) {
		o.State = st
		o.ToolMiddleware = append(o.ToolMiddleware, func(next pipeline.ToolHandler) pipeline.ToolHandler {
			return pipeline.ToolHandlerFunc(func(context.Context, *pipeline.ToolCall) (*pipeline.ToolResult, error) {
				panic("a bug in a tool")
			})
		})
	})
	resp, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	msg := gjson.GetBytes(resp.Body, "choices.0.message")
	id := msg.Get("tool_calls.0.id").Str
	if !strings.HasPrefix(id, approvalPrefix) {
		t.Fatalf("no call awaiting approval: %s", resp.Body)
	}
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"what is 1+2?"},` + msg.Raw +
		`,{"role":"tool","tool_call_id":` + q(id) + `,"content":"{\"decision\":\"approve\"}"}]}`
	resp, err = l.Chat(context.Background(), request(m, false, body))
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(resp.Body, "choices.0.message.content").Str; got != "done" {
		t.Fatalf("answer %q", got)
	}
	if tm := toolMessages(m.body(1)); len(tm) != 1 || !strings.Contains(tm[0].Get("content").Str, "the tool failed") {
		t.Fatalf("tool results %v", tm)
	}
}
