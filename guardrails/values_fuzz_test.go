package guardrails

import (
	"context"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
)

// A tool call's arguments are the model's (or a client's) bytes. Whatever
// valid JSON they are, what keepValid keeps is valid JSON with nothing
// left for the guard to redact, and what it refuses is the whole-text
// redaction (which the caller withholds).
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
	cut, err := compile(config.Guardrail{Name: "len", Kind: "max_length", Action: "redact", MaxLength: 40, Window: 16}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		// With a max_length cut beside the pattern guard: a cut is never
		// undone by the value-by-value judgement.
		ck := newChecker(context.Background(), []*guard{g, cut}, nil)
		whole, err := ck.Check(text)
		if err != nil {
			t.Fatalf("a redacting guard blocked: %v", err)
		}
		out, ok, err := keepValid(ck, text, whole)
		if err != nil {
			t.Fatalf("keepValid: %v", err)
		}
		if !jsonvalid.Bytes(text) {
			return
		}
		if !ok {
			if string(out) != string(whole) {
				t.Fatalf("refused %q, but returned %q, not the whole-text %q", text, out, whole)
			}
			return
		}
		again, err := newChecker(context.Background(), []*guard{g}, nil).Check(out)
		if !jsonvalid.Bytes(out) || err != nil || string(again) != string(out) {
			t.Fatalf("valid %q kept as %q, which is not valid or not clean (%q)", text, out, again)
		}
	})
}
