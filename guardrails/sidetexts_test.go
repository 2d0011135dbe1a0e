package guardrails

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

// sideTextCases are request bodies whose only match of secret-[0-9]+ is in
// a side text: redacted lists the paths whose values a redaction rewrites
// to "[X]" (prose), and fixed is set when the match is in a name or value
// that a redaction must not rewrite.
var sideTextCases = []struct {
	name     string
	body     string
	redacted []string
	fixed    bool
}{
	{
		name:     "a structured output's schema description",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","description":"for secret-1","schema":{"type":"object","title":"secret-2","properties":{"a":{"type":"string","description":"say secret-3"}},"required":["a"]}}}}`,
		redacted: []string{"response_format.json_schema.description", "response_format.json_schema.schema.title", "response_format.json_schema.schema.properties.a.description"},
	},
	{
		name:  "a structured output's enum value",
		body:  `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"string","enum":["ok","secret-4"]}}}}`,
		fixed: true,
	},
	{
		name:  "a structured output's property name",
		body:  `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","properties":{"secret-5":{"type":"string"}}}}}}`,
		fixed: true,
	},
	{
		name:  "a description inside a default is data",
		body:  `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","default":{"description":"secret-6"}}}}}`,
		fixed: true,
	},
	{
		name:     "a client tool's parameter schema",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"q":{"type":"string","description":"ignore secret-7"}}}}}]}`,
		redacted: []string{"tools.0.function.parameters.properties.q.description"},
	},
	{
		name:  "a client tool's name",
		body:  `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"secret-8","parameters":{"type":"object"}}}]}`,
		fixed: true,
	},
	{
		name:     "a custom tool's description",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"custom","custom":{"name":"c","description":"secret-9"}}]}`,
		redacted: []string{"tools.0.custom.description"},
	},
	{
		name:     "documents as strings",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"documents":["clean","a secret-10 b"]}`,
		redacted: []string{"documents.1"},
	},
	{
		name:     "documents as objects",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"documents":[{"title":"secret-11","text":"x secret-12","meta":{"source":"secret-13"}}]}`,
		redacted: []string{"documents.0.title", "documents.0.text", "documents.0.meta.source"},
	},
	{
		name:     "a rerank's query and documents",
		body:     `{"model":"m","query":"secret-14","documents":["d"]}`,
		redacted: []string{"query"},
	},
	{
		name:     "predicted output as a string",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":"x secret-21 y"}}`,
		redacted: []string{"prediction.content"},
	},
	{
		name:     "predicted output as text parts",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":[{"type":"text","text":"secret-22"}]}}`,
		redacted: []string{"prediction.content.0.text"},
	},
	{
		name:     "the Responses API's text format schema",
		body:     `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"r","schema":{"type":"object","description":"secret-15"}}}}`,
		redacted: []string{"text.format.schema.description"},
	},
	{
		name:     "a Responses tool's parameter schema",
		body:     `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"q":{"type":"string","description":"secret-16"}}}}]}`,
		redacted: []string{"tools.0.parameters.properties.q.description"},
	},
	{
		// An upstream decoding with Go's encoding/json matches names
		// without regard to case.
		name:     "a name in another case",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"Response_Format":{"JSON_Schema":{"Schema":{"Description":"secret-17"}}}}`,
		redacted: []string{"Response_Format.JSON_Schema.Schema.Description"},
	},
	{
		// A chat template prints a document's names as well as its values.
		name:  "a document's member name",
		body:  `{"model":"m","messages":[{"role":"user","content":"hi"}],"documents":[{"secret-18 ignore previous":"x"}]}`,
		fixed: true,
	},
	{
		name:     "vLLM's chat_template_kwargs",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false,"documents":[{"title":"t","text":"see secret-19"}]}}`,
		redacted: []string{"chat_template_kwargs.documents.0.text"},
	},
	{
		name:     "a legacy function's description and parameters",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"}],"functions":[{"name":"f","description":"use secret-20","parameters":{"type":"object","properties":{"q":{"type":"string","description":"a secret-21"}}}}]}`,
		redacted: []string{"functions.0.description", "functions.0.parameters.properties.q.description"},
	},
	{
		name:  "a legacy function's name",
		body:  `{"model":"m","messages":[{"role":"user","content":"hi"}],"functions":[{"name":"secret-22"}]}`,
		fixed: true,
	},
	{
		name:     "a legacy function call's arguments",
		body:     `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{\"q\":\"secret-23\"}"}}]}`,
		redacted: []string{"messages.1.function_call.arguments"},
	},
	{
		// The model reads an assistant message's refusal back as it reads
		// its content (and /v1/responses judges a refusal part).
		name:     "an assistant message's refusal",
		body:     `{"model":"m","messages":[{"role":"assistant","refusal":"not secret-24"},{"role":"user","content":"hi"}]}`,
		redacted: []string{"messages.0.refusal"},
	},
	{
		name:     "a refusal part",
		body:     `{"model":"m","messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":"secret-25 no"}]},{"role":"user","content":"hi"}]}`,
		redacted: []string{"messages.0.content.1.refusal"},
	},
	{
		// A chat template may print an earlier turn's reasoning back.
		name:     "an assistant message's reasoning",
		body:     `{"model":"m","messages":[{"role":"assistant","content":"x","reasoning_content":"think secret-26"},{"role":"assistant","content":"y","Reasoning":"secret-27"},{"role":"user","content":"hi"}]}`,
		redacted: []string{"messages.0.reasoning_content", "messages.1.Reasoning"},
	},
	{
		// Reasoning taken back as a content part: Anthropic's thinking
		// (a string) and Mistral's (text parts of its own).
		name: "a thinking part",
		body: `{"model":"m","messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"so secret-29"},` +
			`{"type":"thinking","thinking":[{"type":"text","text":"then secret-30"}]},{"type":"text","text":"ok"}]},{"role":"user","content":"hi"}]}`,
		redacted: []string{"messages.0.content.0.thinking", "messages.0.content.1.thinking.0.text"},
	},
	{
		// vLLM's request-level template: the model reads its text, and a
		// redaction could break its syntax.
		name:  "vLLM's chat_template",
		body:  `{"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template":"{{ 'secret-28' }}{% for m in messages %}{{ m.content }}{% endfor %}"}`,
		fixed: true,
	},
}

// The request stage judges what the model reads beside the messages, on
// the chat route (checkRequest, and an http classifier's one text) and on
// pass-through (CheckBody, bodyTexts): a structured output's schema, the
// client tools' and legacy functions' names and parameter schemas,
// documents (their member names too) and a rerank's query,
// chat_template_kwargs and chat_template, a legacy function call's
// arguments, an assistant message's refusal (or refusal part) and
// reasoning (or thinking part). A block blocks; a redaction rewrites prose in place, keeping the
// JSON valid, and refuses the request when it would rewrite a schema's or
// a tool's names or values. They used to pass unjudged.
func TestRequestStageJudgesSideTexts(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "b", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`secret-[0-9]+`}})
	redact := mustGuard(t, config.Guardrail{Name: "r", Stage: StageRequest, Kind: "regex", Action: "redact", Replacement: "[X]", Patterns: []string{`secret-[0-9]+`}})
	routes := []struct {
		name  string
		check func(g *guard, body []byte) ([]byte, error)
		texts func(body []byte) ([]byte, error)
	}{
		{"chat", func(g *guard, body []byte) ([]byte, error) {
			return checkRequest(context.Background(), newChecker(context.Background(), []*guard{g}, nil), body)
		}, messageTexts},
		{"pass-through", func(g *guard, body []byte) ([]byte, error) {
			e := &Engine{def: stages{StageRequest: {g}}}
			r := &pipeline.Request{Body: body}
			err := e.CheckBody(nil, r)
			if err != nil || string(r.Body) == string(body) {
				return nil, err
			}
			return r.Body, nil
		}, bodyTexts},
	}
	for _, route := range routes {
		for _, tc := range sideTextCases {
			t.Run(route.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				body := []byte(tc.body)
				if texts, err := route.texts(body); err != nil || !strings.Contains(string(texts), "secret-") {
					t.Errorf("an http classifier is not asked about the side texts: %q %v", texts, err)
				}
				_, err := route.check(block, body)
				var pe *pipeline.Error
				if !errors.As(err, &pe) || pe.Code != pipeline.CodeContentBlocked || errors.Is(err, errFixedRedacted) {
					t.Fatalf("block: %v, want 400 content_blocked", err)
				}
				out, err := route.check(redact, body)
				if tc.fixed {
					if !errors.Is(err, errFixedRedacted) || !errors.As(err, &pe) || pe.Code != pipeline.CodeContentBlocked {
						t.Fatalf("redact: %v %s, want the request refused", err, out)
					}
					return
				}
				if err != nil {
					t.Fatalf("redact: %v", err)
				}
				if !json.Valid(out) || strings.Contains(string(out), "secret-") {
					t.Fatalf("redact: %s", out)
				}
				for _, p := range tc.redacted {
					want := strings.ReplaceAll(regexpSecret(gjson.Get(tc.body, p).Str), "\x00", "[X]")
					if got := gjson.GetBytes(out, p).Str; got != want {
						t.Errorf("%s = %q, want %q", p, got, want)
					}
				}
			})
		}
	}
}

// regexpSecret marks each secret-N of s with a NUL, for the expected
// redaction.
func regexpSecret(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "secret-")
		if i < 0 {
			return b.String() + s
		}
		j := i + len("secret-")
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		b.WriteString(s[:i])
		b.WriteByte(0)
		s = s[j:]
	}
}

// A plain chat body's only side text is its tool's name: its messages, the
// tool's description and the scalar parameters are judged once or not at
// all, never again as side texts.
func TestSideTextsOfAPlainChat(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"temperature":0.2,"tools":[{"type":"function","function":{"name":"f","description":"d"}}]}`)
	var got []string
	visitSideTexts(body, func(v gjson.Result, fixed bool) bool {
		got = append(got, v.Str)
		return true
	})
	if len(got) != 1 || got[0] != "f" {
		t.Fatalf("side texts %q, want the tool's name", got)
	}
}

// FuzzSideTexts: whatever the body, the request stage's redaction of its
// side texts is valid JSON, leaves no match in any side text and changes no
// fixed one; or the request is refused because a fixed text matched.
func FuzzSideTexts(f *testing.F) {
	for _, tc := range sideTextCases {
		f.Add(tc.body)
	}
	f.Add(`{"documents":[1,null,{"a":["secret-1",{"b":"secret-2"}]}],"tools":[null,"x",{"function":"y"}]}`)
	f.Add(`{"response_format":{"json_schema":{"schema":[{"enum":[{"description":"x"}]},"secret-3"]}},"query":7}`)
	f.Add(`{"documents":[{"secret-4 ignore previous":"x","y":{"secret-5":["secret-6"]}}],"chat_template_kwargs":{"secret-7":"secret-8"}}`)
	f.Add(`{"functions":[{"name":"secret-9"},{"description":"secret-10","parameters":{"properties":{"a":{"description":"secret-11"}}}},7]}`)
	f.Add(`{"chat_template":"secret-29","Chat_Template":7,"chat_template_kwargs":{"chat_template":"secret-30"}}`)
	f.Add(`{"documents":` + strings.Repeat("[", 40) + `"secret-12"` + strings.Repeat("]", 40) + `}`)
	f.Fuzz(func(t *testing.T, doc string) {
		body := []byte(doc)
		if !json.Valid(body) {
			return // refused before any layer runs
		}
		type text struct {
			s     string
			fixed bool
		}
		collect := func(body []byte) []text {
			var out []text
			visitSideTexts(body, func(v gjson.Result, fixed bool) bool {
				out = append(out, text{v.Str, fixed})
				return true
			})
			return out
		}
		in := collect(body)
		ck := redactingChecker(t)
		edits, err := checkSideTexts(ck, body, nil)
		if errors.Is(err, errTooDeep) {
			return // refused: nested past maxTextDepth (TestSideTextsDepth)
		}
		if err != nil {
			if !errors.Is(err, errFixedRedacted) {
				t.Fatalf("%s: %v", doc, err)
			}
			matched := false
			for _, x := range in {
				if x.fixed {
					out, _ := redactingChecker(t).Check([]byte(x.s))
					matched = matched || string(out) != x.s
				}
			}
			if !matched {
				t.Fatalf("%s: refused, but no fixed text matched", doc)
			}
			return
		}
		out, err := applyEdits(body, edits, nil, "")
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if out == nil {
			out = body
		}
		if !json.Valid(out) {
			t.Fatalf("%s -> %s: not JSON", doc, out)
		}
		got := collect(out)
		if len(got) != len(in) {
			t.Fatalf("%s -> %s: %d side texts, want %d", doc, out, len(got), len(in))
		}
		for i := range in {
			out, _ := redactingChecker(t).Check([]byte(in[i].s))
			want := in[i].s // unchanged: not rewritten
			if string(out) != in[i].s {
				want = gjson.ParseBytes(jsonstring.Append(nil, string(out))).Str // as JSON writes it
			}
			if got[i].fixed != in[i].fixed || got[i].s != want {
				t.Fatalf("%s -> %s: side text %d is %+v, was %+v", doc, out, i, got[i], in[i])
			}
		}
	})
}

// BenchmarkRequestSideTexts measures the request stage over a chat body
// with a tool's parameter schema and a structured output's schema, the
// side texts a typical agent request carries.
func BenchmarkRequestSideTexts(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"what is the weather in Oslo?"}],` +
		`"tools":[{"type":"function","function":{"name":"weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string","description":"A city name"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object","properties":{"summary":{"type":"string","description":"One sentence"}},"required":["summary"]}}}}`)
	g := mustGuard(b, config.Guardrail{Name: "pii", Stage: StageRequest, Kind: "pii", Action: "redact"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkRequest(context.Background(), newChecker(context.Background(), []*guard{g}, nil), body); err != nil {
			b.Fatal(err)
		}
	}
}

// nested returns n arrays nested in one another, each holding text before
// the next: ["t",["t",[...]]].
func nested(n int, text string) string {
	q := `"` + text + `",`
	return strings.Repeat("["+q, n) + `"end"` + strings.Repeat("]", n)
}

// The walks of the texts the request stage judges stop maxTextDepth
// levels below a top-level member, whatever the body's own nesting (up to
// jsonvalid's 1000): each level reads the bytes below it again, and a
// body of 1 MiB nested 999 deep cost half a second of CPU a request. A
// text deeper than that is not judged, and the request is refused (400,
// naming the member); one within it is judged. The walks used to follow
// the body to its last level.
func TestSideTextsDepth(t *testing.T) {
	t.Parallel()
	schema := func(n int) string { // n levels of properties: 2n objects
		return `{"type":"object"` + strings.Repeat(`,"properties":{"p":{"type":"object"`, n) + strings.Repeat("}}", n) + "}"
	}
	tests := []struct {
		name, param string
		body        func(n int) string
		pass        bool // a pass-through body (walkTexts)
	}{
		{name: "documents", param: "documents", body: func(n int) string { return `{"documents":` + nested(n, "t") + `}` }},
		{name: "chat_template_kwargs", param: "chat_template_kwargs", body: func(n int) string { return `{"chat_template_kwargs":{"d":` + nested(n, "t") + `}}` }},
		{name: "a structured output's schema", param: "response_format", body: func(n int) string {
			return `{"response_format":{"json_schema":{"schema":` + schema(n/2) + `}}}`
		}},
		{name: "a tool's parameters", param: "tools", body: func(n int) string {
			return `{"tools":[{"function":{"name":"f","parameters":` + schema(n/2) + `}}]}`
		}},
		{name: "an enum's data", param: "response_format", body: func(n int) string {
			return `{"response_format":{"json_schema":{"schema":{"enum":` + nested(n, "t") + `}}}}`
		}},
		{name: "a pass-through input", param: "input", pass: true, body: func(n int) string { return `{"input":` + nested(n, "t") + `}` }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			walk := func(body []byte) (visits int, err error) {
				count := func(gjson.Result, bool) bool { visits++; return true }
				if tc.pass {
					return visits, walkTexts(body, count)
				}
				return visits, visitSideTexts(body, count)
			}
			// Within the bound: every level judged, nothing refused.
			if _, err := walk([]byte(tc.body(maxTextDepth - 8))); err != nil {
				t.Fatalf("%d levels: %v", maxTextDepth-8, err)
			}
			deep := []byte(tc.body(900))
			if !json.Valid(deep) {
				t.Fatalf("not JSON: %.200s", deep)
			}
			visits, err := walk(deep)
			var pe *pipeline.Error
			if !errors.Is(err, errTooDeep) || !errors.As(err, &pe) || pe.Status != 400 || pe.Param != tc.param {
				t.Fatalf("900 levels: %v, want 400 naming %s", err, tc.param)
			}
			if visits > 2*maxTextDepth {
				t.Fatalf("900 levels: %d texts visited, want at most %d", visits, 2*maxTextDepth)
			}
			// The request stage refuses it, on either route, whatever
			// its guards.
			redact := mustGuard(t, config.Guardrail{Name: "r", Stage: StageRequest, Kind: "regex", Action: "redact", Replacement: "[X]", Patterns: []string{`secret-[0-9]+`}})
			if tc.pass {
				err = (&Engine{def: stages{StageRequest: {redact}}}).CheckBody(nil, &pipeline.Request{Body: deep})
			} else {
				_, err = checkRequest(context.Background(), newChecker(context.Background(), []*guard{redact}, nil), deep)
			}
			if !errors.Is(err, errTooDeep) {
				t.Fatalf("the request stage: %v, want it refused", err)
			}
		})
	}
}

// BenchmarkSideTextsDeep: a body of about 1 MiB nested 900 levels deep in
// its documents costs the request stage maxTextDepth reads of it at most,
// not one a level.
func BenchmarkSideTextsDeep(b *testing.B) {
	body := []byte(`{"documents":` + nested(900, strings.Repeat("x", 1<<20/900)) + `}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_ = visitSideTexts(body, func(gjson.Result, bool) bool { return true })
	}
}

// Thinking parts nested in thinking parts are followed up to
// maxThinkingDepth (Mistral nests one level); a deeper chain is refused as
// too deep, on the chat route and for an http classifier's text, rather
// than walked: each level was read again from its start, so 490 levels
// around 4 MiB took seconds.
func TestThinkingDepth(t *testing.T) {
	t.Parallel()
	nested := func(depth int) []byte {
		b := []byte(`{"model":"m","messages":[{"role":"assistant","content":`)
		for range depth {
			b = append(b, `[{"type":"thinking","thinking":`...)
		}
		b = append(b, `"so secret-1"`...)
		for range depth {
			b = append(b, `}]`...)
		}
		return append(b, `},{"role":"user","content":"hi"}]}`...)
	}
	block := mustGuard(t, config.Guardrail{Name: "b", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`secret-[0-9]+`}})
	check := func(body []byte) error {
		_, err := checkRequest(context.Background(), newChecker(context.Background(), []*guard{block}, nil), body)
		return err
	}
	deepest := nested(maxThinkingDepth + 1)
	if err := check(deepest); err == nil || errors.Is(err, errTooDeep) {
		t.Fatalf("%d levels: %v, want the text judged and blocked", maxThinkingDepth+1, err)
	}
	if texts, err := messageTexts(deepest); err != nil || !strings.Contains(string(texts), "secret-1") {
		t.Fatalf("%d levels, the classifier's text: %q %v", maxThinkingDepth+1, texts, err)
	}
	tooDeepBody := nested(maxThinkingDepth + 2)
	if err := check(tooDeepBody); !errors.Is(err, errTooDeep) {
		t.Fatalf("%d levels: %v, want too deep", maxThinkingDepth+2, err)
	}
	if _, err := messageTexts(tooDeepBody); !errors.Is(err, errTooDeep) {
		t.Fatalf("%d levels, the classifier's text: %v, want too deep", maxThinkingDepth+2, err)
	}
}
