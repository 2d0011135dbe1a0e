package toolloop

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The agent tool's model call passes Options.Admit with the caller's
// request: a denial is a not_allowed result (never retried, the model is not
// called), and an admitted call carries the body Admit rewrote.
func TestAgentToolAdmit(t *testing.T) {
	t.Parallel()
	tenant := &pipeline.Tenant{Name: "team"}
	for _, tc := range []struct {
		name      string
		admit     func(r *pipeline.Request) error
		wantCalls int64
		check     func(t *testing.T, res *pipeline.ToolResult, body []byte)
	}{
		{"denied", func(r *pipeline.Request) error {
			if r.Tenant != tenant || r.Model != "expert" || r.Stream {
				t.Errorf("admit saw tenant %v model %q stream %v", r.Tenant, r.Model, r.Stream)
			}
			return pipeline.ModelNotFound("expert")
		}, 0, func(t *testing.T, res *pipeline.ToolResult, _ []byte) {
			r := gjson.ParseBytes(res.Content)
			if !res.IsError || r.Get("error.type").Str != "not_allowed" || !strings.Contains(r.Get("error.message").Str, "'expert' does not exist or you do not have access") {
				t.Fatalf("result %s", res.Content)
			}
		}},
		{"rate limited", func(r *pipeline.Request) error {
			return &pipeline.Error{Status: 429, Code: "rate_limit_exceeded", Message: "Rate limit reached for requests"}
		}, 0, func(t *testing.T, res *pipeline.ToolResult, _ []byte) {
			// Retryable: not the permanent not_allowed.
			r := gjson.ParseBytes(res.Content)
			if !res.IsError || r.Get("error.type").Str != "limit_reached" || !strings.Contains(r.Get("error.message").Str, "Rate limit") {
				t.Fatalf("result %s", res.Content)
			}
		}},
		{"admitted with a clamp", func(r *pipeline.Request) error {
			b, err := sjson.SetBytes(r.Body, "max_completion_tokens", 7)
			r.Body = b
			return err
		}, 1, func(t *testing.T, res *pipeline.ToolResult, body []byte) {
			if res.IsError || gjson.GetBytes(body, "max_completion_tokens").Int() != 7 {
				t.Fatalf("result %s, body %s", res.Content, body)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			var body []byte
			expert := &pipeline.Route{Name: "expert", ModelLayer: pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				calls.Add(1)
				body = r.Body
				return &pipeline.Response{Body: []byte(completion("e1", "42", "", "stop", 1, 1))}, nil
			})}
			var logs bytes.Buffer
			l := newLoop(t, []config.Tool{{Name: "ask_expert", Kind: "agent", Model: "expert", Idempotent: true}}, func(o *Options) {
				o.Lookup = func(string) *pipeline.Route { return expert }
				o.Admit = tc.admit
				o.Logger = zerolog.New(&logs)
			})
			req := &pipeline.Request{ID: "r", Model: "gpt-x", Tenant: tenant, Stream: true, Meta: &pipeline.Meta{}}
			res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "ask_expert",
				Arguments: []byte(`{"instruction":"x"}`), Request: req})
			if err != nil {
				t.Fatal(err)
			}
			if calls.Load() != tc.wantCalls {
				t.Fatalf("expert calls %d, want %d", calls.Load(), tc.wantCalls)
			}
			tc.check(t, res, body)
			// A denial is logged with who was refused what; nothing else is.
			denied := strings.Contains(logs.String(), `"message":"agent tool: model call denied by the caller's policy"`)
			if want := tc.wantCalls == 0; denied != want ||
				want && (!strings.Contains(logs.String(), `"tenant":"team"`) ||
					!strings.Contains(logs.String(), `"code":"model_not_found"`) && !strings.Contains(logs.String(), `"code":"rate_limit_exceeded"`)) {
				t.Fatalf("logs: %s", logs.String())
			}
		})
	}
}
