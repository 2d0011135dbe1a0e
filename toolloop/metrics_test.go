package toolloop

import (
	"context"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every call through the tool chain counts once, by tool and status, and
// observes its latency; a name no tool has counts as "unknown".
func TestToolCallMetrics(t *testing.T) {
	t.Parallel()
	const name = "calc_metrics_test" // used by no other test: the counters are global
	l := newLoop(t, []config.Tool{{Name: name, Kind: "builtin", Builtin: "calculator"}}, nil)
	unknown := testutil.ToFloat64(metricToolCalls.WithLabelValues("unknown", "error"))
	before := map[string]float64{} // the counters outlive a test run (-count)
	for _, status := range []string{"ok", "error"} {
		before[status] = testutil.ToFloat64(metricToolCalls.WithLabelValues(name, status))
	}
	for _, args := range []string{`{"expression":"1+1"}`, `{"expression":"2*3"}`, `{"expression":"1/0"}`, `{}`} {
		if _, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: name, Arguments: []byte(args)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "zzzzzzzzzzzzzzzzzzzz"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status string
		want   float64
	}{{"ok", 2}, {"error", 2}} {
		if got := testutil.ToFloat64(metricToolCalls.WithLabelValues(name, tc.status)) - before[tc.status]; got != tc.want {
			t.Errorf("%s calls: %v, want %v", tc.status, got, tc.want)
		}
	}
	if got := testutil.CollectAndCount(metricToolLatency, "gateway_tool_duration_seconds"); got == 0 {
		t.Error("no latency series")
	}
	if got := testutil.ToFloat64(metricToolCalls.WithLabelValues("unknown", "error")); got < unknown+1 {
		t.Errorf("unknown calls: %v, want at least %v", got, unknown+1)
	}
}
