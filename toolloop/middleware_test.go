package toolloop

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

func TestNameResolution(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{calcTool, timeTool, {Name: "get_city", Kind: "builtin", Builtin: "calculator"}, {Name: "get_cite", Kind: "builtin", Builtin: "calculator"}}, nil)
	for _, tc := range []struct {
		name, called, want string
	}{
		{"exact", "calculator", "calculator"},
		{"case-insensitive", "Calculator", "calculator"},
		{"close match", "calculater", "calculator"},
		{"two edits", "current-tme", "current_time"},
		{"too far", "calc", ""},
		{"ambiguous", "get_citx", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: tc.called, Arguments: []byte(`{"expression":"1"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if gjson.GetBytes(res.Content, "error.type").String() != "unknown_tool" {
					t.Fatalf("result %s", res.Content)
				}
				return
			}
			if res.Name != tc.want {
				t.Fatalf("resolved to %q, want %q (%s)", res.Name, tc.want, res.Content)
			}
		})
	}
}

func TestTruncateResult(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", 5000)
	for _, tc := range []struct {
		name    string
		content []byte
	}{
		{"string data", okContent([]byte(big))},
		{"json data", okContent([]byte(`{"x":"` + big + `"}`))},
		{"error", errContent(&ToolError{Kind: "x", Message: big}, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := truncateResult(tc.content, 1000, nil)
			if len(out) > 1000 || !gjson.ValidBytes(out) || !utf8.Valid(out) || !gjson.GetBytes(out, "truncated").Bool() ||
				!strings.Contains(gjson.GetBytes(out, "note").String(), "truncated") {
				t.Fatalf("len %d valid %v: %.200s", len(out), gjson.ValidBytes(out), out)
			}
		})
	}
}

func TestExtraToolMiddlewareAndPolicy(t *testing.T) {
	t.Parallel()
	var sawValidated bool
	cache := func(next pipeline.ToolHandler) pipeline.ToolHandler {
		return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			sawValidated = string(c.Arguments) == `{"expression":"1"}`
			return next.CallTool(ctx, c)
		})
	}
	l := newLoop(t, []config.Tool{calcTool, timeTool}, func(o *Options) {
		o.ToolMiddleware = []pipeline.ToolMiddleware{cache}
	})
	req := &pipeline.Request{Tenant: &pipeline.Tenant{Name: "t", Policy: toolPolicy(func(name string) bool { return name != "current_time" })}}
	res, _ := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "calculator", Arguments: []byte(`{"expression":"1"}`), Request: req})
	if res.IsError || !sawValidated {
		t.Fatalf("result %s, extra middleware ran: %v", res.Content, sawValidated)
	}
	res, _ = l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "current_time", Arguments: []byte(`{}`), Request: req})
	if gjson.GetBytes(res.Content, "error.type").String() != "not_allowed" {
		t.Fatalf("result %s", res.Content)
	}
}

func TestNewRejectsBadTools(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		tool config.Tool
		want string
	}{
		{"unknown builtin", config.Tool{Name: "x", Kind: "builtin", Builtin: "nope"}, "builtin"},
		{"bad schema", config.Tool{Name: "x", Kind: "builtin", Builtin: "calculator", Parameters: `{"type":"nonsense"}`}, "parameters"},
		{"http without url", config.Tool{Name: "x", Kind: "http"}, "url"},
		{"unknown kind", config.Tool{Name: "x", Kind: "mcp"}, "kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(Options{Tools: []config.Tool{tc.tool}})
			if err == nil || !strings.Contains(err.Error(), "tools[0]."+tc.want) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// TestBuiltinSlotWaitTimesOut: a builtin with a concurrency limit whose
// slot stays taken gives a timeout result after its timeout; builtins
// without a limit run without a timer, but waiting for a slot can block.
func TestBuiltinSlotWaitTimesOut(t *testing.T) {
	t.Parallel()
	limited := config.Tool{Name: "calculator", Kind: "builtin", Concurrency: 1, Timeout: config.Duration(50 * time.Millisecond)}
	l := newLoop(t, []config.Tool{limited}, nil)
	tl := l.registry().byName["calculator"]
	tl.sem <- struct{}{} // another call holds the only slot
	defer func() { <-tl.sem }()
	done := make(chan *pipeline.ToolResult, 1)
	go func() {
		res, _ := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "calculator", Arguments: []byte(`{"expression":"1"}`)})
		done <- res
	}()
	select {
	case res := <-done:
		if res == nil || !res.IsError || !strings.Contains(string(res.Content), "timed out") {
			t.Fatalf("result %+v, want a timeout error result", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call waited for the taken slot past the tool's timeout")
	}
}
