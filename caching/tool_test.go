package caching

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/pipeline"
)

func TestToolResultCache(t *testing.T) {
	t.Parallel()
	type call struct {
		tool, args, tenant string
		hit                bool
	}
	tests := []struct {
		name   string
		result func(c *pipeline.ToolCall) *pipeline.ToolResult
		calls  []call
	}{
		{name: "same canonical arguments hit", calls: []call{
			{tool: "weather", args: `{"city":"Oslo","units":"c"}`},
			{tool: "weather", args: "{ \"units\": \"c\",\n \"city\": \"Oslo\" }", hit: true},
			{tool: "weather", args: `{"city":"Bergen","units":"c"}`},
		}},
		{name: "ttl 0 never cached", calls: []call{
			{tool: "clock", args: `{}`},
			{tool: "clock", args: `{}`},
		}},
		{name: "tenants do not share", calls: []call{
			{tool: "weather", args: `{"city":"Oslo"}`, tenant: "a"},
			{tool: "weather", args: `{"city":"Oslo"}`, tenant: "b"},
			{tool: "weather", args: `{"city":"Oslo"}`, tenant: "a", hit: true},
		}},
		{name: "arguments nested past the bound never cached", calls: []call{
			// Their canonical form recurses once per level: 2M levels
			// took more than Go's 1 GB stack, a crash no recover catches.
			{tool: "weather", args: strings.Repeat("[", 2<<20) + strings.Repeat("]", 2<<20)},
			{tool: "weather", args: strings.Repeat("[", 2<<20) + strings.Repeat("]", 2<<20)},
		}},
		{name: "invalid arguments never cached", calls: []call{
			{tool: "weather", args: `{"city":`},
			{tool: "weather", args: `{"city":`},
		}},
		{name: "errors never cached", result: func(c *pipeline.ToolCall) *pipeline.ToolResult {
			return &pipeline.ToolResult{CallID: c.ID, Name: c.Name, Content: []byte(`{"status":"error","error":{}}`), IsError: true}
		}, calls: []call{
			{tool: "weather", args: `{}`},
			{tool: "weather", args: `{}`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			inner := pipeline.ToolHandlerFunc(func(_ context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
				n := runs.Add(1)
				if tt.result != nil {
					return tt.result(c), nil
				}
				return &pipeline.ToolResult{CallID: c.ID, Name: c.Name, Content: []byte(`{"status":"ok","data":` + strings.Repeat("1", int(n)) + `}`)}, nil
			})
			ttl := func(tool string) time.Duration {
				if tool == "clock" {
					return 0
				}
				return time.Minute
			}
			h := pipeline.ChainTools(inner, NewToolResultCache(NewMemoryStore(1<<20), ttl))
			var first []byte
			for i, c := range tt.calls {
				before := runs.Load()
				call := &pipeline.ToolCall{ID: "call_" + string(rune('a'+i)), Name: c.tool, Arguments: []byte(c.args),
					Request: &pipeline.Request{Tenant: &pipeline.Tenant{Name: c.tenant}}}
				res, err := h.CallTool(context.Background(), call)
				if err != nil {
					t.Fatal(err)
				}
				if hit := runs.Load() == before; hit != c.hit {
					t.Errorf("call %d: hit = %v, want %v", i, hit, c.hit)
				}
				if res.CallID != call.ID || res.Name != c.tool {
					t.Errorf("call %d: result for %q/%q", i, res.CallID, res.Name)
				}
				if i == 0 {
					first = res.Content
				} else if c.hit && !bytes.Equal(res.Content, first) {
					t.Errorf("call %d: cached content %s, want %s", i, res.Content, first)
				}
			}
		})
	}
}

func TestToolResultCacheStoreDown(t *testing.T) {
	t.Parallel()
	before := counterValue(storeErrors.WithLabelValues("tool", "get"))
	inner := pipeline.ToolHandlerFunc(func(_ context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		return &pipeline.ToolResult{CallID: c.ID, Content: []byte(`{"status":"ok"}`)}, nil
	})
	h := pipeline.ChainTools(inner, NewToolResultCache(failingStore{}, func(string) time.Duration { return time.Minute }))
	res, err := h.CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "t", Arguments: []byte(`{}`)})
	if err != nil || string(res.Content) != `{"status":"ok"}` {
		t.Fatalf("%v %v", res, err)
	}
	if counterValue(storeErrors.WithLabelValues("tool", "get")) <= before {
		t.Error("store error not counted")
	}
	// A store that just failed is not written to: with Redis unreachable,
	// each call would otherwise wait out a second timeout.
	st := &countingStore{}
	h = pipeline.ChainTools(inner, NewToolResultCache(st, func(string) time.Duration { return time.Minute }))
	if _, err := h.CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "t", Arguments: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if st.gets.Load() != 1 || st.sets.Load() != 0 {
		t.Errorf("after a failed get: %d gets, %d sets; want 1, 0", st.gets.Load(), st.sets.Load())
	}
}

// countingStore fails every call and counts them.
type countingStore struct{ gets, sets atomic.Int64 }

func (s *countingStore) Get(context.Context, string) ([]byte, bool, error) {
	s.gets.Add(1)
	return nil, false, errors.New("store down")
}

func (s *countingStore) Set(context.Context, string, []byte, time.Duration) error {
	s.sets.Add(1)
	return errors.New("store down")
}

func TestErrorLogRateLimited(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := newErrorLog(zerolog.New(&buf))
	// An interval no stall of a loaded machine reaches between the five
	// reports; it then passes by moving the last line back by the interval
	// (what report compares the clock with), not by sleeping.
	l.interval = time.Minute
	for range 5 {
		l.report("get", context.DeadlineExceeded)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 5 failures in one interval, want 1:\n%s", n, buf.String())
	}
	l.last.Add(-int64(l.interval)) // the interval has passed since that line
	l.report("get", context.DeadlineExceeded)
	if n := strings.Count(buf.String(), "\n"); n != 2 || !strings.Contains(buf.String(), `"suppressed":4`) {
		t.Fatalf("after the interval: %s", buf.String())
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
