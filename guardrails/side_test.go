package guardrails

import (
	"context"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// The response stage judges what an answer shows beside its texts and
// calls, in the JSON answer and the stream alike: the tool loop's x_gateway
// (a pending call's arguments, the to-do list, traced calls), a message's
// other members (annotations, reasoning_details) and a provider's own
// top-level ones (citations). An address redacted in the content is not
// shown one member further down; a Responses answer's server calls
// (mcp_call items) are judged too.
func TestResponseStageJudgesSideMembers(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", PII: []string{"email"}, Window: 16})
	const mail = "eve@example.com"
	xg := `{"awaiting_approval":[{"id":"call_gwa_1","name":"send","arguments":"{\"to\":\"` + mail + `\"}"}],"todos":[{"content":"write to ` + mail + `","status":"pending"}]}`
	other := `"annotations":[{"type":"url_citation","url_citation":{"url":"https://x/?e=` + mail + `","title":"` + mail + `","start_index":0,"end_index":2}}],"reasoning_details":[{"type":"reasoning.text","text":"think ` + mail + `"}]`
	body := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","citations":["https://x/` + mail + `"],"choices":[{"index":0,"message":{"role":"assistant","content":"hi",` +
		other + `},"logprobs":null,"finish_reason":"stop"}],"x_gateway":` + xg + `}`)
	out, err := checkAnswer(newChecker(context.Background(), []*guard{pii}, nil), body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out == nil || strings.Contains(string(out), mail) || !gjson.ValidBytes(out) {
		t.Fatalf("JSON: %s", out)
	}
	if gjson.GetBytes(out, "x_gateway.todos.0.status").Str != "pending" || gjson.GetBytes(out, "choices.0.message.content").Str != "hi" {
		t.Fatalf("JSON: more than the address changed: %s", out)
	}

	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","content":"hi"}` + chunkTail),
		[]byte(chunkHead + `{` + other + `}` + chunkTail),
		[]byte(strings.Replace(chunkHead, `{"id"`, `{"citations":["https://x/`+mail+`"],"id"`, 1) + `{},"logprobs":null,"finish_reason":"stop"}],"x_gateway":` + xg + `}`),
	}
	var all strings.Builder
	for _, c := range mustDrain(t, newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil)) {
		if !gjson.ValidBytes(c) {
			t.Fatalf("invalid chunk %s", c)
		}
		all.Write(c)
	}
	if s := all.String(); strings.Contains(s, mail) || !strings.Contains(s, "reasoning.text") || !strings.Contains(s, `"todos"`) {
		t.Fatalf("stream: %s", s)
	}

	var held heldCalls
	held.ck = newChecker(context.Background(), []*guard{pii}, nil)
	held.note(&pipeline.ServerCall{Name: "lookup", Arguments: []byte(`{"q":"` + mail + `"}`), Output: []byte(`{"owner":"` + mail + `"}`)})
	for _, c := range held.take() {
		if strings.Contains(string(c.Arguments)+string(c.Output), mail) || !gjson.ValidBytes(c.Arguments) {
			t.Fatalf("server call: %s %s", c.Arguments, c.Output)
		}
	}
}

// A max_length guard bounds the answer's texts, not its side members: a
// to-do list longer than the bound is shown whole.
func TestSideMembersOutsideMaxLength(t *testing.T) {
	t.Parallel()
	cut := mustGuard(t, config.Guardrail{Name: "short", Kind: "max_length", Action: "redact", MaxLength: 5})
	const todo = "a to-do item much longer than five"
	body := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop"}],"x_gateway":{"todos":[{"content":"` + todo + `","status":"pending"}]}}`)
	out, err := checkAnswer(newChecker(context.Background(), []*guard{cut}, nil), body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && gjson.GetBytes(out, "x_gateway.todos.0.content").Str != todo {
		t.Fatalf("JSON: %s", out)
	}
	chunks := [][]byte{[]byte(chunkHead + `{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop"}],"x_gateway":{"todos":[{"content":"` + todo + `","status":"pending"}]}}`)}
	for _, c := range mustDrain(t, newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{cut}, nil)) {
		if x := gjson.GetBytes(c, "x_gateway.todos.0.content"); x.Exists() && x.Str != todo {
			t.Fatalf("stream: %s", c)
		}
	}
}

// Side strings that are no one's text (ids, types, names, signatures) are
// not judged: a block guard does not fire on them, and an id the client
// sends back is not redacted. A pending call's arguments are JSON text,
// judged as the answer's calls' are: a redaction that would break the JSON
// withholds the answer rather than showing broken arguments.
func TestSideOpaqueAndArguments(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "words", Kind: "regex", Action: "block", Patterns: []string{`falcon`}})
	body := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi",` +
		`"reasoning_details":[{"type":"reasoning.encrypted","id":"falcon-1","data":"falcon","signature":"falcon"}]},"logprobs":null,"finish_reason":"stop"}],` +
		`"x_gateway":{"awaiting_approval":[{"id":"call_falcon","name":"falcon","arguments":"{}"}]}}`)
	if _, err := checkAnswer(newChecker(context.Background(), []*guard{block}, nil), body, nil); err != nil {
		t.Fatalf("an opaque string was judged: %v", err)
	}
	cut := mustGuard(t, config.Guardrail{Name: "cut", Kind: "regex", Action: "redact", Patterns: []string{`secret[^ ]*`}})
	args := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop"}],` +
		`"x_gateway":{"awaiting_approval":[{"id":"call_1","name":"f","arguments":"{\"k\":\"secret\"}"}]}}`)
	out, err := checkAnswer(newChecker(context.Background(), []*guard{cut}, nil), args, nil)
	if err == nil {
		if a := gjson.GetBytes(out, "x_gateway.awaiting_approval.0.arguments"); out != nil && !gjson.Valid(a.Str) {
			t.Fatalf("broken arguments shown: %s", a.Str)
		}
	}
}
