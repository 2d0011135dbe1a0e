package guardrails

import (
	"context"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
)

// The response stage judges the reasoning a model streams before its
// answer (reasoning_content, or reasoning) as it judges the answer: an
// address split across chunks, or in a chunk beside the content, is
// redacted in the stream and in the JSON answer alike, and a blocked word
// in it blocks.
func TestResponseStageJudgesReasoning(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", PII: []string{"email"}, Window: 16})
	for _, key := range [...]string{"reasoning_content", "reasoning"} {
		chunks := [][]byte{
			[]byte(chunkHead + `{"role":"assistant","` + key + `":"mail bob@exa"}` + chunkTail),
			[]byte(chunkHead + `{"` + key + `":"mple.com then"}` + chunkTail),
			[]byte(chunkHead + `{"` + key + `":" c@d.io","content":"to e@f.io"}` + chunkTail),
			[]byte(chunkHead + `{"` + key + `":" and more reasoning held back"}` + chunkTail),
			[]byte(chunkHead + `{"content":" done"},"logprobs":null,"finish_reason":"stop"}]}`),
		}
		s := newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil)
		var reasoning, content strings.Builder
		roles := 0
		for _, c := range mustDrain(t, s) {
			d := gjson.GetBytes(c, "choices.0.delta")
			if d.Get(key).Str != "" && content.Len() > 0 {
				t.Fatalf("%s: reasoning %q came after the content %q", key, d.Get(key).Str, content.String())
			}
			reasoning.WriteString(d.Get(key).Str)
			content.WriteString(d.Get("content").Str)
			if d.Get("role").Exists() {
				roles++
			}
		}
		const wantR, wantC = "mail [REDACTED] then [REDACTED] and more reasoning held back", "to [REDACTED] done"
		if reasoning.String() != wantR || content.String() != wantC || roles != 1 {
			t.Fatalf("%s stream: reasoning %q content %q roles %d", key, reasoning.String(), content.String(), roles)
		}
		body := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"to e@f.io done","` +
			key + `":"mail bob@example.com then c@d.io and more reasoning held back"},"logprobs":null,"finish_reason":"stop"}]}`)
		out, err := checkAnswer(newChecker(context.Background(), []*guard{pii}, nil), body, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg := gjson.GetBytes(out, "choices.0.message")
		if msg.Get(key).Str != wantR || msg.Get("content").Str != wantC {
			t.Fatalf("%s JSON: %s", key, msg.Raw)
		}
	}
	// The reasoning held back when the answer begins goes out before it,
	// whether the answer begins in a chunk of its own or in the chunk that
	// ends the reasoning (vLLM's reasoning parsers send both at </think>).
	for _, order := range [][][]byte{{
		[]byte(chunkHead + `{"role":"assistant","reasoning_content":"a long reasoning text, held in part"}` + chunkTail),
		[]byte(chunkHead + `{"content":"an answer much longer than the window of sixteen bytes"}` + chunkTail),
		[]byte(chunkHead + `{},"logprobs":null,"finish_reason":"stop"}]}`),
	}, {
		[]byte(chunkHead + `{"role":"assistant","reasoning_content":"a long reasoning text, held in part"}` + chunkTail),
		[]byte(chunkHead + `{"reasoning_content":" and its end","content":"an answer much longer than the window of sixteen bytes"}` + chunkTail),
		[]byte(chunkHead + `{},"logprobs":null,"finish_reason":"stop"}]}`),
	}} {
		seenContent := false
		for _, c := range mustDrain(t, newStream(context.Background(), &sliceStream{chunks: order}, []*guard{pii}, nil)) {
			d := gjson.GetBytes(c, "choices.0.delta")
			if d.Get("reasoning_content").Str != "" && seenContent {
				t.Fatalf("reasoning %q went out after the answer began", d.Get("reasoning_content").Str)
			}
			seenContent = seenContent || d.Get("content").Str != ""
		}
	}
	block := mustGuard(t, config.Guardrail{Name: "words", Kind: "regex", Action: "block", Patterns: []string{`(?i)falcon`}})
	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","reasoning_content":"project Fal"}` + chunkTail),
		[]byte(chunkHead + `{"reasoning_content":"con is secret"}` + chunkTail),
		[]byte(chunkHead + `{"content":"fine"},"logprobs":null,"finish_reason":"stop"}]}`),
	}
	s := newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{block}, nil)
	shown, err := drainStream(s)
	if !isContentBlocked(err) {
		t.Fatalf("stream: err %v after %q", err, shown)
	}
	for _, c := range shown {
		if strings.Contains(string(c), "Fal") {
			t.Fatalf("shown %s before the block", c)
		}
	}
	body := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"fine","reasoning_content":"project Falcon is secret"},"logprobs":null,"finish_reason":"stop"}]}`)
	if _, err := checkAnswer(newChecker(context.Background(), []*guard{block}, nil), body, nil); !isContentBlocked(asClientError(err)) && !isContentBlocked(err) {
		t.Fatalf("JSON: err %v", err)
	}
}
