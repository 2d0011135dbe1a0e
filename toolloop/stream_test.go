package toolloop

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// An upstream that sends running usage totals on several chunks is counted
// once per round, not once per chunk.
func TestRunningUsageTotalsCountedOnce(t *testing.T) {
	t.Parallel()
	m := &fakeModel{turns: []turnFn{
		always(append(toolRound("up-1", "c1", "calculator", `{"expression":"1"}`, 10, 1), usageChunk("up-1", 10, 1, 2)), ""),
		always(append(textRound("up-2", "done", 20, 2), usageChunk("up-2", 20, 2, 2), usageChunk("up-2", 20, 2, 2)), ""),
	}}
	l := newLoop(t, []config.Tool{calcTool}, nil)
	req := request(m, true, userBody+`,"stream":true,"stream_options":{"include_usage":true}}`)
	req.IncludeUsage = true
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), true)
	if u := gjson.ParseBytes(sum.Usage); u.Get("prompt_tokens").Int() != 30 || u.Get("total_tokens").Int() != 33 {
		t.Fatalf("usage %s, want prompt 30 total 33 (last usage of each round, once)", sum.Usage)
	}
}

// An upstream that reports no usage (no usage chunk, no finish chunk, just
// [DONE]) gets no made-up usage: the loop's stream sent a usage chunk of
// zeros when the client asked for usage, which a client, the access log
// and a cache entry took for the real count. It now sends none, as the
// JSON answer of the same rounds has none and the relay passes none on;
// the made-up finish_reason "stop" stays (rule 12 needs one).
func TestNoUsageReportedNoneMadeUp(t *testing.T) {
	t.Parallel()
	noUsage := func(rounds ...[]string) []turnFn {
		var turns []turnFn
		for _, r := range rounds {
			var kept []string
			for _, c := range r {
				if !strings.Contains(c, `"choices":[]`) && !strings.Contains(c, `"finish_reason":"`) {
					kept = append(kept, c)
				}
			}
			turns = append(turns, always(kept, ""))
		}
		return turns
	}
	for _, tc := range []struct {
		name  string
		tools []config.Tool
		body  string
		turns []turnFn
	}{
		{name: "client tools only", body: `,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`,
			turns: noUsage(textRound("up-1", "Hi there", 0, 0))},
		{name: "server tool rounds", tools: []config.Tool{calcTool},
			turns: noUsage(toolRound("up-1", "c1", "calculator", `{"expression":"1+2"}`, 0, 0), textRound("up-2", "It is 3", 0, 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &fakeModel{turns: tc.turns}
			l := newLoop(t, tc.tools, nil)
			req := request(m, true, userBody+tc.body+`,"stream":true,"stream_options":{"include_usage":true}}`)
			resp, err := l.Chat(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			raw := sse(t, resp.Stream)
			sum := checkStream(t, raw, false) // fails on any usage object
			if sum.FinishReason != "stop" || sum.Usage != nil {
				t.Fatalf("finish %q usage %s, want stop and no usage", sum.FinishReason, sum.Usage)
			}
		})
	}
}

// An upstream error that wraps io.EOF (a cut) is an error for the client,
// never a clean end with a finish chunk.
func TestCutWrappingEOFIsNotAnEnd(t *testing.T) {
	t.Parallel()
	cut := &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Err: io.EOF}
	model := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		chunks := textRound("up-1", "hello there", 1, 1)[:2]
		i := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
			if i < len(chunks) {
				i++
				return []byte(chunks[i-1]), nil
			}
			return nil, cut
		}}}, nil
	})
	l := newLoop(t, []config.Tool{calcTool}, nil)
	req := &pipeline.Request{Body: []byte(userBody + `,"stream":true}`), Model: "gpt-x", Stream: true,
		Route: &pipeline.Route{Name: "gpt-x", ModelLayer: model}, Meta: &pipeline.Meta{}}
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	for {
		c, err := resp.Stream.Next()
		if err == io.EOF {
			t.Fatal("a cut upstream ended the client stream cleanly")
		}
		if err != nil {
			return
		}
		if strings.Contains(string(c), `"finish_reason":"stop"`) {
			t.Fatalf("finish chunk after a cut: %s", c)
		}
	}
}
