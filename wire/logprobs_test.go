package wire

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/wiretest"
)

func TestLogprobsJoin(t *testing.T) {
	t.Parallel()
	tok := func(s string) string { return `{"token":"` + s + `","logprob":-0.1,"bytes":[72],"top_logprobs":[]}` }
	for _, tc := range []struct {
		name  string
		parts []string
		want  string
	}{
		{name: "none", want: `null`},
		{name: "null and junk add nothing", parts: []string{`null`, ``, `[1]`, `{"content":[`}, want: `null`},
		{name: "content lists concatenated", parts: []string{`{"content":[` + tok("Hi") + `],"refusal":null}`, `{"content":[ ` + tok(" there") + `, ` + tok("!") + ` ]}`},
			want: `{"content":[` + tok("Hi") + `,` + tok(" there") + `, ` + tok("!") + `],"refusal":null}`},
		{name: "empty lists stay lists", parts: []string{`{"content":[],"refusal":[]}`, `{"content":[]}`}, want: `{"content":[],"refusal":[]}`},
		{name: "refusal kept apart", parts: []string{`{"content":null,"refusal":[` + tok("No") + `]}`, `{"content":[` + tok("ok") + `]}`},
			want: `{"content":[` + tok("ok") + `],"refusal":[` + tok("No") + `]}`},
		{name: "first of a repeated key", parts: []string{`{"content":[` + tok("a") + `],"content":[` + tok("b") + `]}`}, want: `{"content":[` + tok("a") + `],"refusal":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var l Logprobs
			for _, p := range tc.parts {
				l.Add([]byte(p))
			}
			if got := string(l.AppendJSON(nil)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if l.Empty() != (tc.want == "null") {
				t.Fatalf("Empty() = %v for %s", l.Empty(), tc.want)
			}
			l.Reset()
			if !l.Empty() || string(l.AppendJSON(nil)) != "null" {
				t.Fatal("Reset left something")
			}
		})
	}
}

// FuzzLogprobs: whatever an upstream sends as logprobs, the joined object
// is valid JSON, and its content list holds the items of every part's, in
// order.
func FuzzLogprobs(f *testing.F) {
	f.Add(`{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}],"refusal":null}`, `{"content":[]}`)
	f.Add(`{"content":[ 1 , 2 ]}`, `{"refusal":[3],"content":"x"}`)
	f.Add(`null`, `{"content":[{"a":"]"}]`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var l Logprobs
		l.Add([]byte(a))
		l.Add([]byte(b))
		out := l.AppendJSON(nil)
		if !jsonvalid.Bytes(out) {
			t.Fatalf("invalid JSON %s from %q, %q", out, a, b)
		}
		var want []string
		for _, p := range []string{a, b} {
			if c := gjson.Get(p, "content"); jsonvalid.String(p) && gjson.Parse(p).IsObject() && c.IsArray() {
				for _, it := range c.Array() {
					want = append(want, it.Raw)
				}
			}
		}
		var got []string
		for _, it := range gjson.GetBytes(out, "content").Array() {
			got = append(got, it.Raw)
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("content items %q, want %q (from %q, %q)", got, want, a, b)
		}
	})
}

// TestLogprobsStreamAndJSONAgree: each text's logprobs go on its chunk, and
// the JSON answer of the same events joins them into what an SDK
// accumulates from the stream. service_tier is on every chunk and in the
// answer, like system_fingerprint.
func TestLogprobsStreamAndJSONAgree(t *testing.T) {
	t.Parallel()
	lp1 := `{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}],"refusal":null}`
	lp2 := `{"content":[{"token":" there","logprob":-0.2,"bytes":[32,116,104,101,114,101],"top_logprobs":[]}],"refusal":null}`
	h := Header{ID: "chatcmpl-1", Created: 1767225600, Model: "gpt-x", Fingerprint: "fp_1", ServiceTier: "default", IncludeUsage: true}
	evs := []Event{{Kind: Role}, {Kind: Text, Key: "content", Text: []byte("Hi"), Logprobs: []byte(lp1)},
		{Kind: Text, Key: "content", Text: []byte(" there"), Logprobs: []byte(lp2)}, {Kind: Text, Key: "content", Text: []byte("!")},
		{Kind: Finish, Finish: "stop"}, {Kind: Usage, Raw: testUsage}, {Kind: End}}
	raw, chunks := encodeAll(h, evs)
	wiretest.CheckStreamAll(t, raw, wiretest.Options{WantUsage: true}, wiretest.LoadSchema(t))
	var streamed []string
	for i, c := range chunks {
		if gjson.Get(c, "service_tier").Str != "default" {
			t.Fatalf("chunk %d lacks the service_tier: %s", i, c)
		}
		for _, it := range gjson.Get(c, "choices.0.logprobs.content").Array() {
			streamed = append(streamed, it.Raw)
		}
	}
	if got := gjson.Get(chunks[1], "choices.0.logprobs").Raw; got != lp1 {
		t.Fatalf("first text chunk's logprobs %s, want %s", got, lp1)
	}
	if got := gjson.Get(chunks[3], "choices.0.logprobs"); got.Type != gjson.Null {
		t.Fatalf("a text without logprobs has %s", got.Raw)
	}
	body := completionOf(t, NewChatJSON(h), evs)
	var whole []string
	for _, it := range gjson.GetBytes(body, "choices.0.logprobs.content").Array() {
		whole = append(whole, it.Raw)
	}
	if len(whole) != 2 || strings.Join(whole, ",") != strings.Join(streamed, ",") || gjson.GetBytes(body, "service_tier").Str != "default" {
		t.Fatalf("JSON logprobs %q, streamed %q; answer %s", whole, streamed, body)
	}
}
