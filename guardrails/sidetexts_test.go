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
}

// The request stage judges what the model reads beside the messages, on
// the chat route (checkRequest, and an http classifier's one text) and on
// pass-through (CheckBody, bodyTexts): a structured output's schema, the
// client tools' names and parameter schemas, documents and a rerank's
// query. A block blocks; a redaction rewrites prose in place, keeping the
// JSON valid, and refuses the request when it would rewrite a schema's or
// a tool's names or values. They used to pass unjudged.
func TestRequestStageJudgesSideTexts(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "b", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`secret-[0-9]+`}})
	redact := mustGuard(t, config.Guardrail{Name: "r", Stage: StageRequest, Kind: "regex", Action: "redact", Replacement: "[X]", Patterns: []string{`secret-[0-9]+`}})
	routes := []struct {
		name  string
		check func(g *guard, body []byte) ([]byte, error)
		texts func(body []byte) []byte
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
				if !strings.Contains(string(route.texts(body)), "secret-") {
					t.Errorf("an http classifier is not asked about the side texts: %q", route.texts(body))
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
