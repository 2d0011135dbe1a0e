package guardrails

import (
	"context"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
)

// A tool call's arguments are the model's (or a client's) bytes. Whatever
// valid JSON they are, judging them value by value leaves valid JSON, and
// a text that is not JSON is never made to look like JSON by it.
func FuzzJudgeValues(f *testing.F) {
	for _, s := range []string{
		`{"card":4111111111111111,"n":1}`,
		`[4791234567, "call +4791234567", -12.5e+3, true, null]`,
		`{"to":"bob\u0040example.com","bob@example.com":{"x":[1,2,"DE89 3704 0044 0532 0130 00"]}}`,
		`"4111 1111 1111 1111"`,
		`{"a":"unterminated`,
	} {
		f.Add([]byte(s))
	}
	g, err := compile(config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		ck := newChecker(context.Background(), []*guard{g}, nil)
		whole, err := ck.Check(text)
		if err != nil {
			t.Fatalf("a redacting guard blocked: %v", err)
		}
		out, ok, err := keepValid(ck, text, whole)
		if err != nil {
			t.Fatalf("keepValid: %v", err)
		}
		if jsonvalid.Bytes(text) && (!ok || !jsonvalid.Bytes(out)) {
			t.Fatalf("valid %q judged to %q (ok %v)", text, out, ok)
		}
	})
}
