package guardrails

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

func redactingChecker(t testing.TB) *checker {
	t.Helper()
	g := mustGuard(t, config.Guardrail{Name: "re", Kind: "regex", Action: "redact", Replacement: "[X]", Window: 16, Patterns: []string{`secret-[0-9]+`}})
	return newChecker(context.Background(), []*guard{g}, nil)
}

// TestRedactManyPartsIsLinear: a request of thousands of parts that each
// need a redaction is rewritten in one copy of its body: twice the parts
// cost about twice the bytes. One sjson write per part copied the body per
// part, four times the bytes for twice the parts (seconds of CPU for a few
// hundred kilobytes).
func TestRedactManyPartsIsLinear(t *testing.T) {
	alloc := func(parts int) uint64 {
		var b strings.Builder
		b.WriteString(`{"model":"m","messages":[{"role":"user","content":"secret-1 \"q\""},{"role":"user","content":[`)
		for i := range parts {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"type":"text","text":"a secret-42 b"}`)
		}
		b.WriteString(`]}]}`)
		body := []byte(b.String())
		ck := redactingChecker(t)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := checkRequest(context.Background(), ck, body)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) || strings.Contains(string(out), "secret-") {
			t.Fatalf("not redacted: %.200s", out)
		}
		if got := gjson.GetBytes(out, "messages.0.content").Str; got != `[X] "q"` {
			t.Fatalf("string content %q", got)
		}
		if got := gjson.GetBytes(out, "messages.1.content."+strconv.Itoa(parts-1)+".text").Str; got != "a [X] b" {
			t.Fatalf("last part %q", got)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	small, large := alloc(4000), alloc(8000)
	if float64(large) > 3*float64(small) {
		t.Fatalf("4,000 parts allocated %d bytes, 8,000 parts %d: more than linear", small, large)
	}
}

// FuzzCheckRequest: whatever the body, the redacted request (or answer) is
// valid JSON whose texts are the checker's output for the original texts,
// one for one (nil when no text changed).
func FuzzCheckRequest(f *testing.F) {
	f.Add(`{"messages":[{"content":"x secret-1"},{"content":[{"text":"secret-22\u00e9"},{"text":5},"s"]}]}`)
	f.Add(`{"messages":[{"content":"no"}],"choices":[{"message":{"content":"secret-3"}}]}`)
	f.Add(`{"messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"secret-4"},{"refusal":7}],"refusal":"secret-5","reasoning_content":"x secret-6","reasoning":"secret-7","name":"secret-8"}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		body := []byte(doc)
		if !json.Valid(body) {
			return // the proxy refuses a body that is not JSON before any layer runs
		}
		for _, answer := range []bool{false, true} {
			var out []byte
			var err error
			if answer {
				out, err = checkAnswer(redactingChecker(t), body, nil)
			} else {
				out, err = checkRequest(context.Background(), redactingChecker(t), body)
			}
			if errors.Is(err, errFixedRedacted) {
				continue // a side text's name or value matched (FuzzSideTexts)
			}
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			if out == nil {
				out = body
			}
			if !json.Valid(out) {
				t.Fatalf("%s -> %s: not JSON", doc, out)
			}
			in, got := texts(body, answer), texts(out, answer)
			if len(in) != len(got) {
				t.Fatalf("%s -> %s: %d texts, want %d", doc, out, len(got), len(in))
			}
			for i := range in {
				out, _ := redactingChecker(t).Check([]byte(in[i]))
				// as JSON writes it: invalid UTF-8 becomes U+FFFD
				want := in[i] // unchanged: not rewritten
				if string(out) != in[i] {
					want = gjson.ParseBytes(jsonstring.Append(nil, string(out))).Str
				}
				if got[i] != want {
					t.Fatalf("%s -> %s: text %d is %q, want %q", doc, out, i, got[i], want)
				}
			}
		}
	})
}

// texts lists the texts the request stage (or the answer stage) checks.
func texts(body []byte, answer bool) []string {
	var out []string
	if answer {
		gjson.GetBytes(body, "choices").ForEach(func(_, ch gjson.Result) bool {
			if c := ch.Get("message.content"); c.Type == gjson.String {
				out = append(out, c.Str)
			}
			return true
		})
		return out
	}
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		c := m.Get("content")
		if c.Type == gjson.String {
			out = append(out, c.Str)
		}
		if c.IsArray() {
			c.ForEach(func(_, p gjson.Result) bool {
				for _, k := range []string{"text", "refusal"} {
					if t := p.Get(k); t.Type == gjson.String {
						out = append(out, t.Str)
					}
				}
				return true
			})
		}
		for _, k := range []string{"refusal", "reasoning_content", "reasoning"} {
			if t := m.Get(k); t.Type == gjson.String {
				out = append(out, t.Str)
			}
		}
		return true
	})
	return out
}

// A request-stage max_length counts a message, whatever its parts: a
// message of two text parts is cut at the limit once, not each part at it,
// and the next message starts its own count.
func TestRequestMaxLengthCountsTheMessage(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "short", Stage: "request", Kind: "max_length", Action: "redact", MaxLength: 5})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"ééé"},{"type":"text","text":"abcdefgh"},{"type":"text","text":"z"}]},{"role":"user","content":"123456"}]}`)
	out, err := checkRequest(context.Background(), newChecker(context.Background(), []*guard{g}, nil), body)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	gjson.GetBytes(out, "messages.0.content.#.text").ForEach(func(_, v gjson.Result) bool { got = append(got, v.Str); return true })
	if strings.Join(got, "|") != "ééé|ab|" || gjson.GetBytes(out, "messages.1.content").Str != "12345" {
		t.Fatalf("parts %q, next message %q", got, gjson.GetBytes(out, "messages.1.content").Str)
	}
	block := mustGuard(t, config.Guardrail{Name: "short", Stage: "request", Kind: "max_length", Action: "block", MaxLength: 5})
	_, err = checkRequest(context.Background(), newChecker(context.Background(), []*guard{block}, nil),
		[]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"abc"},{"type":"text","text":"def"}]}]}`))
	if err == nil {
		t.Fatal("a message of 6 characters in two parts passed a block at 5")
	}
}

// A chat request's texts are judged whatever the case of their names, and
// every one of a repeated name: an upstream decoding with Go's
// encoding/json reads "Content" as a message's content, and one that keeps
// the last of two equal names reads the second. They used to pass
// unjudged.
func TestRequestNamesInAnyCase(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "b", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`secret-[0-9]+`}})
	tests := []struct {
		name, body, path, want string
	}{
		{name: "a message's content", body: `{"model":"m","messages":[{"role":"user","Content":"say secret-1"}]}`,
			path: "messages.0.Content", want: "say [X]"},
		{name: "a part's text", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","TEXT":"say secret-2"}]}]}`,
			path: "messages.0.content.0.TEXT", want: "say [X]"},
		{name: "a tool call's arguments", body: `{"model":"m","messages":[{"role":"assistant","Tool_Calls":[{"id":"c","Function":{"name":"f","Arguments":"{\"q\":\"secret-3\"}"}}]}]}`,
			path: "messages.0.Tool_Calls.0.Function.Arguments", want: `{"q":"[X]"}`},
		{name: "a tool's description", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"Tools":[{"type":"function","function":{"name":"f","Description":"say secret-4"}}]}`,
			path: "Tools.0.function.Description", want: "say [X]"},
		{name: "a repeated part text", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"fine","text":"say secret-5"}]}]}`,
			path: "messages.0.content.0.text", want: "fine"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			var pe *pipeline.Error
			if _, err := checkRequest(context.Background(), newChecker(context.Background(), []*guard{block}, nil), body); !errors.As(err, &pe) || pe.Code != pipeline.CodeContentBlocked {
				t.Fatalf("block: %v, want 400 content_blocked", err)
			}
			if texts, err := messageTexts(body); err != nil || !strings.Contains(string(texts), "secret-") {
				t.Errorf("an http classifier is not asked about it: %q %v", texts, err)
			}
			out, err := checkRequest(context.Background(), redactingChecker(t), body)
			if err != nil || !json.Valid(out) || strings.Contains(string(out), "secret-") {
				t.Fatalf("redact: %s %v", out, err)
			}
			if got := gjson.GetBytes(out, tc.path).Str; got != tc.want {
				t.Fatalf("redact: %s = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

// A request-stage max_length counts an assistant message's refusal and
// reasoning with its content, as its calls' arguments: the texts of one
// message the model reads back.
func TestRequestMaxLengthCountsRefusalAndReasoning(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "short", Stage: "request", Kind: "max_length", Action: "block", MaxLength: 5})
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"assistant","content":"abc","refusal":"def"}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"abc"}],"reasoning_content":"def"}]}`,
	} {
		if _, err := checkRequest(context.Background(), newChecker(context.Background(), []*guard{block}, nil), []byte(body)); err == nil {
			t.Errorf("%s: a message of 6 characters passed a block at 5", body)
		}
	}
}

// A value split over two text parts of one message, which an upstream
// reads as one text, is judged too: a block blocks, and a redaction that
// no part holds alone blocks (it cannot be made within the parts); a
// redaction within a part is made as before.
func TestRequestValueSplitOverParts(t *testing.T) {
	t.Parallel()
	redact := mustGuard(t, config.Guardrail{Name: "pii", Stage: StageRequest, Kind: "pii", Action: "redact"})
	block := mustGuard(t, config.Guardrail{Name: "falcon", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`(?i)project\s+falcon`}})
	parts := func(a, b string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":` + strconv.Quote(a) + `},{"type":"text","text":` + strconv.Quote(b) + `}]}]}`)
	}
	for _, tc := range []struct {
		g       *guard
		a, b    string
		blocked bool
	}{
		{redact, "my mail is bob@", "example.com thanks", true},
		{block, "Project", " Falcon", true},
		{block, "Project", "Falcon", true}, // a template's line break between them
		{redact, "mail bob@example.com", "and more", false},
		{block, "Project", "Hawk", false},
		{redact, "bob@example.com", "bob@example.com", false},          // a match in each part, none across
		{redact, "Today is 2023-10-05", "2023 was a good year", false}, // numbers at the edges: not a phone number
		{redact, "Row 1 ends with 12345", "6789 starts row 2", false},
		{redact, "19.99", "24.99", false},
	} {
		out, err := checkRequest(context.Background(), newChecker(context.Background(), []*guard{tc.g}, nil), parts(tc.a, tc.b))
		if tc.blocked != (err != nil) {
			t.Errorf("%q + %q: %v, want blocked %v", tc.a, tc.b, err, tc.blocked)
		}
		if !tc.blocked && tc.g == redact && strings.Contains(tc.a, "@") && !strings.Contains(gjson.GetBytes(out, "messages.0.content.0.text").Str, "[") {
			t.Errorf("%q + %q: not redacted within its part: %s", tc.a, tc.b, out)
		}
	}
}

// Reasoning in the history is judged in every form a chat template prints:
// a string, text parts, or one part object. The list and the object
// passed unjudged.
func TestRequestReasoningInEveryForm(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "b", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`secret-[0-9]+`}})
	for _, r := range []string{`"say secret-1"`, `[{"type":"text","text":"say secret-2"}]`, `{"type":"text","text":"say secret-3"}`, `{"type":"thinking","thinking":"say secret-4"}`} {
		for _, key := range []string{"reasoning", "reasoning_content"} {
			body := `{"model":"m","messages":[{"role":"assistant","content":"ok","` + key + `":` + r + `},{"role":"user","content":"hi"}]}`
			if _, err := checkRequest(context.Background(), newChecker(context.Background(), []*guard{block}, nil), []byte(body)); err == nil {
				t.Errorf("%s %s passed a block", key, r)
			}
		}
	}
}

// What the judging of each part left is what is joined: a value across
// parts that a max_length cut away is not there, and a redaction whose
// replacement matches its own pattern does not match across parts. The
// content is found under any case of its name.
func TestRequestAcrossPartsJudgesWhatIsSent(t *testing.T) {
	t.Parallel()
	short := mustGuard(t, config.Guardrail{Name: "short", Stage: StageRequest, Kind: "max_length", Action: "redact", MaxLength: 10})
	pii := mustGuard(t, config.Guardrail{Name: "pii", Stage: StageRequest, Kind: "pii", Action: "redact"})
	pw := mustGuard(t, config.Guardrail{Name: "pw", Stage: StageRequest, Kind: "regex", Action: "redact", Replacement: "[password removed]", Patterns: []string{`(?i)password`}})
	block := mustGuard(t, config.Guardrail{Name: "falcon", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`(?i)project\s+falcon`}})
	for _, tc := range []struct {
		guards  []*guard
		body    string
		blocked bool
	}{
		{[]*guard{short, pii}, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hello there, write to bob@"},{"type":"text","text":"example.com"}]}]}`, false},
		{[]*guard{pw}, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"my password is x"},{"type":"text","text":"hello"}]}]}`, false},
		{[]*guard{block}, `{"model":"m","messages":[{"role":"user","Content":[{"type":"text","Text":"Project"},{"type":"text","text":" Falcon"}]}]}`, true},
	} {
		_, err := checkRequest(context.Background(), newChecker(context.Background(), tc.guards, nil), []byte(tc.body))
		if tc.blocked != (err != nil) {
			t.Errorf("%s: %v, want blocked %v", tc.body, err, tc.blocked)
		}
	}
}
