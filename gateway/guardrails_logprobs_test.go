package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"
)

// A response guardrail that redacted an answer left its logprobs as the
// model wrote them: the items of the redacted tokens gave the e-mail
// address back (token, bytes and the top alternatives), and those past a
// max_length cut gave the cut text back, in both forms of chat and of the
// Responses API. The tokens a redaction touches are now one item showing
// the replacement, and those past a cut are gone: the items' tokens,
// joined, are the text the client is shown.
func TestGuardrailRedactionHidesLogprobs(t *testing.T) {
	t.Parallel()
	secrets := []string{"bob", "example", "falcon", "word100"}
	for _, tc := range []struct {
		name    string
		turn    rawTurn
		refusal bool
	}{
		{name: "content across tokens", turn: rawTurn{tokens: []string{"Write ", "to ", "bob@", "example", ".com ", "about ", "Project ", "Falcon ", "soon."}}},
		{name: "content inside one token", turn: rawTurn{tokens: []string{"Mail ", "me at bob@example.com today", " ok"}}},
		{name: "content past max_length", turn: rawTurn{tokens: wordTokens(150)}},
		{name: "refusal", refusal: true, turn: rawTurn{refusal: []string{"No, bob@exa", "mple.com, about ", "Project Falcon."}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			turn := tc.turn
			turn.logprobs, turn.usage = true, [2]int{9, 4}
			h := parityHarness(t, parityCase{config: parityGuard, raw: func([]byte) []rawTurn { return []rawTurn{turn} }})
			p := userMsg("hi")
			p.Logprobs, p.TopLogprobs = openai.Bool(true), openai.Int(2)
			for form, a := range map[string]parityAnswer{"json": parityJSON(t, h, p), "stream": parityStream(t, h, p)} {
				ch := a.Choices[0]
				text, items := ch.Content, ch.Logprobs
				if tc.refusal {
					text, items = ch.Refusal, ch.RefusalLogprobs
				}
				checkHiddenLogprobs(t, form, text, items, secrets)
			}
			if tc.refusal {
				return // output_text has no refusal logprobs; the refusal's text is checked by the matrix
			}
			rp := responsesParams(p)
			for _, stream := range []bool{false, true} {
				r := h.respond(rp, stream)
				out := gjson.Get(r.RawJSON(), `output.#(type=="message").content.#(type=="output_text")`)
				var lps []lpItem
				out.Get("logprobs").ForEach(func(_, it gjson.Result) bool {
					l := lpItem{Token: it.Get("token").Str, Logprob: it.Get("logprob").Float()}
					it.Get("bytes").ForEach(func(_, b gjson.Result) bool { l.Bytes = append(l.Bytes, b.Int()); return true })
					it.Get("top_logprobs").ForEach(func(_, top gjson.Result) bool {
						l.Top = append(l.Top, top.Get("token").Str+":")
						return true
					})
					lps = append(lps, l)
					return true
				})
				b, _ := json.Marshal(lps)
				checkHiddenLogprobs(t, map[bool]string{false: "responses json", true: "responses stream"}[stream], out.Get("text").Str, string(b), secrets)
			}
		})
	}
}

// checkHiddenLogprobs fails unless items (lpItems' JSON) spell text in
// their tokens and bytes, show no secret, and offer no alternative but the
// token itself or the raw upstream's "x".
func checkHiddenLogprobs(t *testing.T, form, text, items string, secrets []string) {
	t.Helper()
	var lps []lpItem
	if err := json.Unmarshal([]byte(items), &lps); err != nil || len(lps) == 0 {
		t.Fatalf("%s: no logprobs (%v): %s", form, err, items)
	}
	var tokens strings.Builder
	var bytes []byte
	for _, l := range lps {
		tokens.WriteString(l.Token)
		for _, b := range l.Bytes {
			bytes = append(bytes, byte(b))
		}
		for _, top := range l.Top {
			if tok, _, _ := strings.Cut(top, ":"); tok != l.Token && tok != "x" {
				t.Errorf("%s: alternative %q of token %q", form, top, l.Token)
			}
		}
	}
	if tokens.String() != text || string(bytes) != text {
		t.Errorf("%s: tokens spell %q, bytes %q; the text is %q", form, tokens.String(), bytes, text)
	}
	for _, s := range secrets {
		if strings.Contains(strings.ToLower(tokens.String()+string(bytes)), s) {
			t.Errorf("%s: logprobs show %q: %s", form, s, items)
		}
	}
	if strings.Contains(strings.ToLower(text), "bob@") {
		t.Errorf("%s: text %q not redacted", form, text)
	}
}

// A refusal passed the response guardrails unjudged: a model could put an
// address or a blocked word in message.refusal (delta.refusal, the
// Responses API's refusal part) instead of the content. It is judged as
// the content is: redacted, or the answer blocked.
func TestGuardrailJudgesRefusal(t *testing.T) {
	t.Parallel()
	refusal := func([]byte) []rawTurn {
		return []rawTurn{{refusal: []string{"No, bob@exa", "mple.com, about ", "Project Falcon."}, usage: [2]int{9, 4}}}
	}
	t.Run("redact", func(t *testing.T) {
		t.Parallel()
		h := parityHarness(t, parityCase{config: parityGuard, raw: refusal})
		p := userMsg("hi")
		const want = "No, [REDACTED], about [REDACTED]."
		for form, a := range map[string]parityAnswer{"json": parityJSON(t, h, p), "stream": parityStream(t, h, p)} {
			if got := a.Choices[0].Refusal; got != want {
				t.Errorf("%s: refusal %q, want %q", form, got, want)
			}
		}
		for _, stream := range []bool{false, true} {
			r := h.respond(responsesParams(p), stream)
			got := gjson.Get(r.RawJSON(), `output.#(type=="message").content.#(type=="refusal").refusal`).Str
			if got != want {
				t.Errorf("responses (stream %v): refusal %q, want %q", stream, got, want)
			}
		}
	})
	t.Run("block", func(t *testing.T) {
		t.Parallel()
		h := parityHarness(t, parityCase{config: parityBlock, raw: refusal})
		p := userMsg("hi")
		for _, stream := range []bool{false, true} {
			e, status := parityError(t, h, p, stream)
			if !strings.Contains(e, "code=content_blocked") {
				t.Errorf("chat (stream %v, %d): %s", stream, status, e)
			}
			re, _ := responsesError(t, h, responsesParams(p), stream)
			if !strings.Contains(re.message, "codename") {
				t.Errorf("responses (stream %v): %+v", stream, re)
			}
		}
	})
}

// The arguments of the tool calls an answer hands the client went out
// unjudged: a model could put an address or a blocked word in them. They
// are judged as a text of their own, in both forms (a stream holds a
// call's fragments until its choice ends): redacted inside the JSON,
// blocked, or, when a redaction would break the JSON, withheld.
func TestGuardrailJudgesToolCallArguments(t *testing.T) {
	t.Parallel()
	call := func(args string) func([]byte) []rawTurn {
		return func([]byte) []rawTurn {
			return []rawTurn{{tokens: []string{"Asking."}, usage: [2]int{9, 4}, calls: []rawCall{{"call_1", "lookup_city", args}}}}
		}
	}
	p := withClientTools(userMsg("hi"))
	t.Run("redact", func(t *testing.T) {
		t.Parallel()
		h := parityHarness(t, parityCase{config: parityGuardRelay, raw: call(`{"name":"Project Falcon","mail":"bob@example.com"}`)})
		const want = `{"name":"[REDACTED]","mail":"[REDACTED]"}`
		for form, a := range map[string]parityAnswer{"json": parityJSON(t, h, p), "stream": parityStream(t, h, p)} {
			if tc := a.Choices[0].ToolCalls; len(tc) != 1 || tc[0].Arguments != want {
				t.Errorf("%s: calls %+v, want arguments %s", form, tc, want)
			}
		}
		for _, stream := range []bool{false, true} {
			r := h.respond(responsesParams(p), stream)
			if got := gjson.Get(r.RawJSON(), `output.#(type=="function_call").arguments`).Str; got != want {
				t.Errorf("responses (stream %v): arguments %s, want %s", stream, got, want)
			}
		}
	})
	for _, tc := range []struct{ name, config, args, message string }{
		{"block", parityBlock, `{"name":"Project Falcon"}`, "codename"},
		{"redaction breaks the JSON", parityArgsBreak, `{"name":"secret"}`, "break their JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := parityHarness(t, parityCase{config: tc.config, raw: call(tc.args)})
			for _, stream := range []bool{false, true} {
				e, status := parityError(t, h, p, stream)
				if !strings.Contains(e, "code=content_blocked") || !strings.Contains(e, tc.message) {
					t.Errorf("chat (stream %v, %d): %s", stream, status, e)
				}
				re, _ := responsesError(t, h, responsesParams(p), stream)
				if !strings.Contains(re.message, tc.message) {
					t.Errorf("responses (stream %v): %+v", stream, re)
				}
			}
		})
	}
}
