package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// A planning answer served from the response cache carries the plan, as
// the live answer does: x_gateway.todos of the JSON answer and of the last
// chunk of a stream (with or without usage), whichever form filled the
// entry. Nothing else of the original run's x_gateway is shown.
func TestCacheHitKeepsTodos(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(todosConfig, "{{SYSTEM}}", "", 1)+`
[middleware.cache]
enabled = true
`, mockllm.Options{Respond: planModel})
	schema := wiretest.LoadSchema(t)
	want := gjson.Parse(planRounds[len(planRounds)-1]).Raw
	ask := func(q string, stream, usage bool) (string, string, gjson.Result) {
		t.Helper()
		p := det(q)
		if !stream {
			var hr *http.Response
			if _, err := h.client.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&hr)); err != nil {
				t.Fatal(err)
			}
			raw, _ := h.lastRaw()
			if err := schema.Completion(raw); err != nil {
				t.Fatalf("schema: %v\n%s", err, raw)
			}
			return gjson.GetBytes(raw, "choices.0.message.content").Str, hr.Header.Get("x-gateway-cache"), gjson.GetBytes(raw, "x_gateway")
		}
		if usage {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		var hr *http.Response
		acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: usage}, schema, option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		return acc.Choices[0].Message.Content, hr.Header.Get("x-gateway-cache"), gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway")
	}
	type step struct {
		stream, usage bool
		header        string
	}
	for q, steps := range map[string][]step{
		"plan (json first)":   {{false, false, "miss"}, {false, false, "hit"}, {true, true, "hit"}, {true, false, "hit"}},
		"plan (stream first)": {{true, false, "miss"}, {true, false, "hit"}, {true, true, "hit"}, {false, false, "hit"}},
	} {
		for i, s := range steps {
			content, hv, xg := ask(q, s.stream, s.usage)
			if hv != s.header || content != "All three steps are done." {
				t.Fatalf("%s, step %d: x-gateway-cache %q (want %q), content %q", q, i, hv, s.header, content)
			}
			if got := gjson.Parse(xg.Get("todos").Raw).Raw; got != want {
				t.Fatalf("%s, step %d (stream %v, usage %v, %s): x_gateway %s, want todos %s", q, i, s.stream, s.usage, hv, xg.Raw, want)
			}
			if hv == "hit" && xg.Get("rounds").Exists() {
				t.Fatalf("%s, step %d: a hit shows the original run's trace: %s", q, i, xg.Raw)
			}
		}
	}
}
