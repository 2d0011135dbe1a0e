package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// changingIDs is an upstream whose stream gives each chunk an id of its
// own (Foundry Local's "chat.id.N"), after a keep-alive chunk of another id
// when keepAlive is set (omlx sends one before the real chunks).
func changingIDs(keepAlive bool) http.HandlerFunc {
	return numberedIDs(keepAlive, func(i int) string { return fmt.Sprintf(`"id":"chat.id.%d",`, i) })
}

// numberedIDs is changingIDs with the id member of the i-th chunk given by
// id ("" for none).
func numberedIDs(keepAlive bool, id func(i int) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if keepAlive {
			fmt.Fprint(w, "data: {\"id\":\"chatcmpl-keepalive\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up-model\",\"choices\":[]}\n\n")
		}
		chunks := []string{
			`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`,
			`"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}`,
		}
		for i, c := range chunks {
			fmt.Fprintf(w, "data: {%s\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up-model\",%s}\n\n", id(i), c)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// A relayed stream carries one completion id, whatever ids the upstream
// gave its chunks: openai-go's accumulator drops every chunk whose id is
// not the first one's, so the answer came out empty (no content, no finish,
// no usage) unless the request offered tools, whose path re-streams the
// chunks under one id.
func TestRelayedStreamKeepsOneID(t *testing.T) {
	t.Parallel()
	for i, handler := range []http.HandlerFunc{changingIDs(false), changingIDs(true)} {
		up := httptest.NewServer(handler)
		t.Cleanup(up.Close)
		h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
		p := userMsg("hi")
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		acc, _, err := h.streamChat(p, wiretest.Options{WantUsage: true}, wiretest.LoadSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello there" || acc.Choices[0].FinishReason != "stop" || acc.Usage.TotalTokens != 7 {
			t.Fatalf("upstream %d: accumulated %+v usage %+v", i, acc.Choices, acc.Usage)
		}
		if ids := chunkIDs(h); len(ids) != 1 {
			t.Fatalf("upstream %d: chunk ids %v, want one", i, ids)
		}
	}
}

// An upstream whose first chunks carry no id, and whose later ones are
// numbered or empty: every chunk carries one id of the gateway's, as a
// tool loop's stream does. The id was read only before the first content
// (here never), so the numbered chunks and the empty one, which
// openai-go's accumulator drops, went out as they came (a review), and the
// first chunks went without one, which OpenAI's schema refuses (a wire
// probe).
func TestRelayedStreamIDFromTheFirstThatHasOne(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(numberedIDs(false, func(i int) string {
		switch i {
		case 0, 1:
			return ""
		case 4:
			return `"id":"",`
		}
		return fmt.Sprintf(`"id":"c.%d",`, i)
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	p := userMsg("hi")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), p)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello there" || acc.Choices[0].FinishReason != "stop" || acc.Usage.TotalTokens != 7 {
		t.Fatalf("accumulated %+v usage %+v", acc.Choices, acc.Usage)
	}
	ids := chunkIDs(h)
	if len(ids) != 1 {
		t.Fatalf("chunk ids %v, want one", ids)
	}
	for id := range ids {
		if !strings.HasPrefix(id, "chatcmpl-gw") {
			t.Fatalf("chunk id %q, want one of the gateway's", id)
		}
	}
}

// chunkIDs returns the ids of the chunks of the harness's last stream.
func chunkIDs(h *harness) map[string]bool {
	raw, _ := h.lastRaw()
	ids := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && data != "[DONE]" {
			ids[gjson.Get(data, "id").Str] = true
		}
	}
	return ids
}
