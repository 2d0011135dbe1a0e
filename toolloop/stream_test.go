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
