package guardrails

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
)

// lpItemJSON is a logprobs item for tok, with tok itself and "x" as its
// alternatives.
func lpItemJSON(tok string, lp float64) string {
	t, _ := json.Marshal(tok)
	bs := make([]int, len(tok))
	for i := range len(tok) {
		bs[i] = int(tok[i])
	}
	b, _ := json.Marshal(bs)
	return fmt.Sprintf(`{"token":%s,"logprob":%g,"bytes":%s,"top_logprobs":[{"token":%s,"logprob":%g,"bytes":%s},{"token":"x","logprob":-9,"bytes":[120]}]}`, t, lp, b, t, lp, b)
}

// lpAnswer is a chat.completion whose key ("content" or "refusal") is the
// tokens joined, with their logprobs.
func lpAnswer(key string, toks []string) []byte {
	var items []string
	for _, t := range toks {
		items = append(items, lpItemJSON(t, -0.5))
	}
	text, _ := json.Marshal(strings.Join(toks, ""))
	other := map[string]string{"content": "refusal", "refusal": "content"}[key]
	return []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","` +
		key + `":` + string(text) + `,"` + other + `":null},"logprobs":{"` + key + `":[` + strings.Join(items, ",") + `],"` + other +
		`":null},"finish_reason":"stop"}]}`)
}

// lpChunks is the stream of lpAnswer: a chunk per token.
func lpChunks(key string, toks []string) [][]byte {
	head := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,`
	other := map[string]string{"content": "refusal", "refusal": "content"}[key]
	out := [][]byte{[]byte(head + `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)}
	for _, t := range toks {
		b, _ := json.Marshal(t)
		out = append(out, []byte(head+`"delta":{"`+key+`":`+string(b)+`},"logprobs":{"`+key+`":[`+lpItemJSON(t, -0.5)+`],"`+other+`":null},"finish_reason":null}]}`))
	}
	return append(out, []byte(head+`"delta":{},"logprobs":null,"finish_reason":"stop"}]}`))
}

// lpText is a text and its logprobs items' JSON, as a client reads them.
type lpText struct{ text, items string }

// answerText judges lpAnswer(key, toks) with guards.
func answerText(t testing.TB, guards []*guard, key string, toks []string) lpText {
	body := lpAnswer(key, toks)
	out, err := checkAnswer(newChecker(context.Background(), guards, nil), body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out == nil {
		out = body
	}
	if !jsonvalid.Bytes(out) {
		t.Fatalf("invalid answer %s", out)
	}
	ch := gjson.GetBytes(out, "choices.0")
	return lpText{ch.Get("message." + key).Str, ch.Get("logprobs." + key).Raw}
}

// streamText judges lpChunks(key, toks) with guards and joins what an SDK
// accumulates of the text and its logprobs.
func streamText(t testing.TB, guards []*guard, key string, toks []string) lpText {
	s := newStream(context.Background(), &sliceStream{chunks: lpChunks(key, toks)}, guards, nil)
	var text strings.Builder
	var items []string
	for _, c := range mustDrain(t, s) {
		text.WriteString(gjson.GetBytes(c, "choices.0.delta."+key).Str)
		if l := gjson.GetBytes(c, "choices.0.logprobs."+key); l.IsArray() {
			l.ForEach(func(_, it gjson.Result) bool {
				items = append(items, it.Raw)
				return true
			})
		}
	}
	return lpText{text.String(), "[" + strings.Join(items, ",") + "]"}
}

// joined is the items' tokens joined, and their bytes joined.
func joined(t testing.TB, items string) (tokens, bytes string) {
	gjson.Parse(items).ForEach(func(_, it gjson.Result) bool {
		tokens += it.Get("token").Str
		it.Get("bytes").ForEach(func(_, b gjson.Result) bool { bytes += string([]byte{byte(b.Int())}); return true })
		return true
	})
	return tokens, bytes
}

// lpGuards redact e-mail addresses, "falcon" (to nothing) and all past
// 40 characters.
func lpGuards(t testing.TB) []*guard {
	re := mustGuard(t, config.Guardrail{Name: "re", Kind: "regex", Action: "redact", Window: 16, Patterns: []string{`(?i)falcon`}})
	re.repl = nil
	return []*guard{
		mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", PII: []string{"email"}, Window: 16}),
		re,
		mustGuard(t, config.Guardrail{Name: "len", Kind: "max_length", Action: "redact", MaxLength: 40}),
	}
}

// TestLogprobsFollowRedaction: the items of the tokens a redaction or a
// max_length cut touches no longer show what the text does not; a JSON
// answer and a stream give the same items, and their tokens spell the text.
func TestLogprobsFollowRedaction(t *testing.T) {
	t.Parallel()
	guards := lpGuards(t)
	for _, tc := range []struct {
		name string
		key  string
		toks []string
		want []string // the tokens after the rewrite
	}{
		{name: "untouched", key: "content", toks: []string{"a ", "b ", "c"}, want: []string{"a ", "b ", "c"}},
		{name: "across tokens", key: "content", toks: []string{"to ", "bob@", "example", ".com ", "ok"},
			want: []string{"to ", "[REDACTED] ", "ok"}},
		{name: "inside a token", key: "content", toks: []string{"hi ", "me bob@ex.io now", "!"},
			want: []string{"hi ", "me [REDACTED] now", "!"}},
		{name: "redacted to nothing", key: "content", toks: []string{"a ", "Fal", "con", " b"},
			want: []string{"a ", " b"}},
		{name: "two redactions chained", key: "content", toks: []string{"x a@b", ".io falcon", "y"},
			want: []string{"x [REDACTED] ", "y"}},
		{name: "max_length cut", key: "content", toks: []string{"0123456789 ", "0123456789 ", "0123456789 ", "0123456789 ", "0123456789 "},
			want: []string{"0123456789 ", "0123456789 ", "0123456789 ", "0123456"}},
		{name: "refusal", key: "refusal", toks: []string{"No, ", "a@b", ".io", " sorry"},
			want: []string{"No, ", "[REDACTED]", " sorry"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			js := answerText(t, guards, tc.key, tc.toks)
			st := streamText(t, guards, tc.key, tc.toks)
			if js != st {
				t.Fatalf("json %+v\nstream %+v", js, st)
			}
			var got []string
			gjson.Parse(js.items).ForEach(func(_, it gjson.Result) bool {
				got = append(got, it.Get("token").Str)
				if it.Get("token").Str != strings.Join(tc.toks, "") && strings.Contains(it.Raw, "@") {
					t.Errorf("item shows the address: %s", it.Raw)
				}
				return true
			})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("tokens %q, want %q", got, tc.want)
			}
			if tokens, bytes := joined(t, js.items); tokens != js.text || bytes != js.text {
				t.Errorf("tokens spell %q, bytes %q; text %q", tokens, bytes, js.text)
			}
		})
	}
}

// FuzzLogprobsRewrite: for any text cut into any tokens, a JSON answer's
// and a stream's rewritten items spell the text each shows, and are the
// same when the texts are; for any logprobs list an upstream sends, the
// answer stays valid JSON.
func FuzzLogprobsRewrite(f *testing.F) {
	f.Add("to bob@example.com about Falcon, and some more words after it", []byte{3, 4, 7, 1}, `[{"token":"a","logprob":-1}]`)
	f.Add("éé a@b.io éé", []byte{1, 1, 1}, `[{"bytes":[300,-1,"x"],"logprob":"no"},null,7]`)
	f.Add("", []byte{}, `{}`)
	guards := lpGuards(f)
	f.Fuzz(func(t *testing.T, text string, cuts []byte, list string) {
		if !utf8.ValidString(text) {
			return // a chunk's text is JSON: whole characters
		}
		var toks []string
		for i, rest := 0, text; rest != ""; i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(int(cuts[i]%16)+1, len(rest))
			}
			for n < len(rest) && !utf8.RuneStart(rest[n]) {
				n++
			}
			toks, rest = append(toks, rest[:n]), rest[n:]
		}
		for k, key := range textKeys {
			if textPaths[k].logprobs == "" {
				continue // a reasoning: no logprobs
			}
			js := answerText(t, guards, key, toks)
			st := streamText(t, guards, key, toks)
			for _, x := range []lpText{js, st} {
				if tokens, bytes := joined(t, x.items); len(toks) > 0 && bytes != x.text {
					t.Fatalf("tokens %q, bytes %q; text %q", tokens, bytes, x.text)
				}
			}
			if js.text == st.text && js.items != st.items {
				t.Fatalf("json %+v\nstream %+v", js, st)
			}
		}
		if !jsonvalid.Bytes([]byte(list)) {
			return
		}
		body := []byte(`{"choices":[{"index":0,"message":{"content":` + string(mustJSON(text)) + `},"logprobs":{"content":` + list + `}}]}`)
		out, err := checkAnswer(newChecker(context.Background(), guards, nil), body, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out != nil && !jsonvalid.Bytes(out) {
			t.Fatalf("invalid answer %s", out)
		}
		// The same list on each chunk of a stream.
		var chunks [][]byte
		for _, tok := range toks {
			chunks = append(chunks, []byte(`{"choices":[{"index":0,"delta":{"content":`+string(mustJSON(tok))+`},"logprobs":{"content":`+list+`},"finish_reason":null}]}`))
		}
		mustDrain(t, newStream(context.Background(), &sliceStream{chunks: chunks}, guards, nil))
	})
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// A chunk with both a content and a refusal has each judged, with its own
// logprobs list, once.
func TestStreamContentAndRefusalInOneChunk(t *testing.T) {
	t.Parallel()
	head := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,`
	chunks := [][]byte{
		[]byte(head + `"delta":{"role":"assistant","content":"to a@b.io","refusal":"no c@d.io"},"logprobs":{"content":[` +
			lpItemJSON("to a@b.io", -1) + `],"refusal":[` + lpItemJSON("no c@d.io", -2) + `]},"finish_reason":"stop"}]}`),
	}
	s := newStream(context.Background(), &sliceStream{chunks: chunks}, lpGuards(t), nil)
	got := map[string]string{}
	for _, c := range mustDrain(t, s) {
		for _, key := range [...]string{"content", "refusal"} {
			got[key] += gjson.GetBytes(c, "choices.0.delta."+key).Str
			if l := gjson.GetBytes(c, "choices.0.logprobs."+key); l.IsArray() {
				l.ForEach(func(_, it gjson.Result) bool {
					got[key+" logprobs"] += it.Get("token").Str + "|"
					return true
				})
			}
		}
	}
	want := map[string]string{"content": "to [REDACTED]", "content logprobs": "to [REDACTED]|",
		"refusal": "no [REDACTED]", "refusal logprobs": "no [REDACTED]|"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A run's logprob is the sum of its tokens', and null when one of theirs
// is null: summed as 0, an unknown logprob made the run look likelier.
func TestRunLogprobWithNull(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	for _, tc := range []struct {
		name, first, want string
	}{
		{"numbers sum", `-0.25`, `-0.75`},
		{"null stays null", `null`, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			list := `[{"token":"to ","logprob":-1,"bytes":[116,111,32],"top_logprobs":[]},` +
				`{"token":"bob@","logprob":` + tc.first + `,"top_logprobs":[]},` +
				`{"token":"example.com","logprob":-0.5,"top_logprobs":[]}]`
			body := []byte(`{"choices":[{"index":0,"message":{"content":"to bob@example.com"},"logprobs":{"content":` + list + `}}]}`)
			out, err := checkAnswer(newChecker(context.Background(), []*guard{g}, nil), body, nil)
			if err != nil {
				t.Fatal(err)
			}
			item := gjson.GetBytes(out, "choices.0.logprobs.content.1")
			if item.Get("token").Str != "[REDACTED]" || item.Get("logprob").Raw != tc.want {
				t.Fatalf("item %s, want token [REDACTED] and logprob %s", item.Raw, tc.want)
			}
		})
	}
}

// A token that is part of a character comes with its bytes and no text of
// its own: a chunk whose content is "" but whose logprobs have an item.
// Such a chunk went out as it came, ahead of the text held before it, and
// its bytes were not counted, so the tokens after it were placed too
// early: the token holding the start of a redacted address kept its item
// ("� b"). Its tokens are held in their place now, and the stream's items
// are the JSON answer's, redaction and max_length cut alike.
func TestStreamPartialCharacterTokens(t *testing.T) {
	t.Parallel()
	items := []string{
		`{"token":"\ufffd","logprob":-1,"bytes":[226,130],"top_logprobs":[]}`,
		`{"token":"\ufffd b","logprob":-1,"bytes":[172,32,98],"top_logprobs":[]}`,
		`{"token":"ob@","logprob":-1,"bytes":[111,98,64],"top_logprobs":[]}`,
		`{"token":"example.com \ufffd","logprob":-1,"bytes":[101,120,97,109,112,108,101,46,99,111,109,32,195],"top_logprobs":[]}`,
		`{"token":"\ufffd","logprob":-1,"bytes":[169],"top_logprobs":[]}`,
	}
	lp := func(items ...string) string {
		return `,"logprobs":{"content":[` + strings.Join(items, ",") + `],"refusal":null},"finish_reason":null}]}`
	}
	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","content":""}` + lp(items[0])),
		[]byte(chunkHead + `{"content":"€ bob@"}` + lp(items[1:3]...)),
		[]byte(chunkHead + `{"content":"example.com é"}` + lp(items[3:]...)),
		[]byte(chunkHead + `{},"logprobs":null,"finish_reason":"stop"}]}`),
	}
	body := []byte(`{"choices":[{"index":0,"message":{"content":"€ bob@example.com é"},"logprobs":{"content":[` + strings.Join(items, ",") + `]}}]}`)
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 8})
	short := mustGuard(t, config.Guardrail{Name: "len", Kind: "max_length", Action: "redact", MaxLength: 3})
	for _, tc := range []struct {
		name   string
		guards []*guard
	}{{"redaction", []*guard{pii}}, {"redaction and max_length", []*guard{pii, short}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, tc.guards, nil))
			if err != nil {
				t.Fatal(err)
			}
			var text string
			var lps []string
			for _, c := range got {
				text += gjson.GetBytes(c, "choices.0.delta.content").Str
				gjson.GetBytes(c, "choices.0.logprobs.content").ForEach(func(_, it gjson.Result) bool { lps = append(lps, it.Raw); return true })
			}
			out, err := checkAnswer(newChecker(context.Background(), tc.guards, nil), body, nil)
			if err != nil {
				t.Fatal(err)
			}
			ch := gjson.GetBytes(out, "choices.0")
			if want := ch.Get("message.content").Str; text != want {
				t.Errorf("stream text %q, JSON %q", text, want)
			}
			if s, j := "["+strings.Join(lps, ",")+"]", ch.Get("logprobs.content").Raw; s != j {
				t.Errorf("stream items\n%s\nJSON items\n%s", s, j)
			}
			for _, it := range lps {
				if tok := gjson.Get(it, "token").Str; strings.Contains(tok, "b") {
					t.Errorf("an item shows the redacted address: %s", it)
				}
			}
		})
	}
}

// The logprobs items a stream holds past the text it has seen (chunks of
// "" with items, or items whose bytes outrun the text) are bounded by
// maxPending bytes; past it they are dropped and the stream goes on.
func TestStreamHeldLogprobsBounded(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	tests := []struct {
		name, first, content, item string
		n                          int
	}{
		{"no text", "", "", `{"token":"` + strings.Repeat("x", 1000) + `","logprob":-1,"bytes":[226],"top_logprobs":[]}`, 20000},
		{"bytes past the text", "", "a", `{"token":"a","logprob":-1,"bytes":[` + strings.Repeat("97,", 999) + `97],"top_logprobs":[]}`, 5000},
		// Items covering no bytes, behind an item that covers less than
		// its chunk's text: held within the text seen, they wait for it.
		{"no bytes behind the text", chunkHead + `{"content":"hello"},"logprobs":{"content":[{"token":"he","logprob":-1,"bytes":[104,101],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]}`,
			"", `{"token":"","logprob":-1,"bytes":[],"top_logprobs":[` + strings.Repeat(`{"token":"x","logprob":-1,"bytes":[120]},`, 40) + `{"token":"x","logprob":-1,"bytes":[120]}]}`, 20000},
		{"empty token behind the text", chunkHead + `{"content":"hello"},"logprobs":{"content":[{"token":"he","logprob":-1,"bytes":[104,101],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]}`,
			"", `{"token":"","logprob":-1,"top_logprobs":[` + strings.Repeat(`{"token":"x","logprob":-1,"bytes":[120]},`, 40) + `{"token":"x","logprob":-1,"bytes":[120]}]}`, 20000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chunk := []byte(chunkHead + `{"content":"` + tt.content + `"},"logprobs":{"content":[` + tt.item + `],"refusal":null},"finish_reason":null}]}`)
			s := newStream(context.Background(), &sliceStream{}, []*guard{pii}, nil)
			if tt.first != "" {
				if _, err := s.chunk([]byte(tt.first)); err != nil {
					t.Fatal(err)
				}
			}
			for n := 0; n < tt.n; n++ {
				if _, err := s.chunk(chunk); err != nil {
					t.Fatal(err)
				}
			}
			held := 0
			for _, tk := range s.texts[0][0].lp.toks {
				held += len(tk.raw)
			}
			if held > 2*maxPending {
				t.Errorf("held %d bytes of logprob items (%d items)", held, len(s.texts[0][0].lp.toks))
			}
		})
	}
}

// The items of the text a stream holds back are bounded with the text,
// not by maxPending: however large (top_logprobs), none is dropped.
func TestStreamHeldLogprobsOfTheTextKept(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	item := `{"token":"hello","logprob":-1,"bytes":[104,101,108,108,111],"top_logprobs":[` + strings.Repeat(`{"token":"hello","logprob":-1.25,"bytes":[104,101,108,108,111]},`, 39) + `{"token":"hello","logprob":-1.25,"bytes":[104,101,108,108,111]}]}`
	const n = 300
	var chunks [][]byte
	for k := 0; k < n; k++ {
		chunks = append(chunks, []byte(chunkHead+`{"content":"hello"},"logprobs":{"content":[`+item+`],"refusal":null},"finish_reason":null}]}`))
	}
	got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil))
	if err != nil {
		t.Fatal(err)
	}
	items := 0
	for _, c := range got {
		items += len(gjson.GetBytes(c, "choices.0.logprobs.content").Array())
	}
	if items != n {
		t.Errorf("%d items out, want %d", items, n)
	}
}
