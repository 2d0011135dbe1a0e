package guardrails

import (
	"errors"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// A pass-through body's texts are judged whatever the case of their
// names: an upstream decoding with Go's encoding/json reads "Prompt" as
// its prompt and "Content" as a message's content ("ſ" folds to "s"), so
// the request stage judges them too. They used to pass unjudged, as did a
// legacy function call's arguments and the Responses API's prompt
// variables.
func TestPassThroughNamesInAnyCase(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "b", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`secret-[0-9]+`}})
	redact := mustGuard(t, config.Guardrail{Name: "r", Stage: StageRequest, Kind: "regex", Action: "redact", Replacement: "[X]", Patterns: []string{`secret-[0-9]+`}})
	tests := []struct {
		name, body, path, want string
	}{
		{name: "a top-level name", body: `{"model":"m","Prompt":"say secret-1"}`, path: "Prompt", want: "say [X]"},
		{name: "an item's name", body: `{"model":"m","messages":[{"role":"user","Content":"say secret-2"}]}`, path: "messages.0.Content", want: "say [X]"},
		{name: "a name all in capitals", body: `{"model":"m","INPUT":["say secret-3"]}`, path: "INPUT.0", want: "say [X]"},
		{name: "a long s", body: `{"model":"m","ſuffix":"say secret-4"}`, path: "ſuffix", want: "say [X]"},
		{name: "a tool call's arguments", body: `{"model":"m","Messages":[{"role":"assistant","Tool_Calls":[{"Function":{"Arguments":"{\"q\":\"secret-5\"}"}}]}]}`,
			path: "Messages.0.Tool_Calls.0.Function.Arguments", want: `{"q":"[X]"}`},
		{name: "a legacy function call's arguments", body: `{"model":"m","messages":[{"role":"assistant","function_call":{"name":"f","arguments":"{\"q\":\"secret-6\"}"}}]}`,
			path: "messages.0.function_call.arguments", want: `{"q":"[X]"}`},
		{name: "a saved prompt's variable", body: `{"model":"m","prompt":{"id":"pmpt_1","variables":{"city":"say secret-7"}}}`,
			path: "prompt.variables.city", want: "say [X]"},
		{name: "a saved prompt's input_text variable", body: `{"prompt":{"id":"pmpt_1","Variables":{"doc":{"type":"input_text","text":"say secret-8"}}}}`,
			path: "prompt.Variables.doc.text", want: "say [X]"},
		// A native /v1/responses: the model reads an assistant's refusal
		// part back, and a reasoning item's summary (vLLM's Responses API
		// makes it that turn's reasoning). They used to pass unjudged.
		{name: "a Responses refusal part", body: `{"model":"m","input":[{"role":"assistant","content":[{"type":"refusal","refusal":"say secret-9"}]},{"role":"user","content":"hi"}]}`,
			path: "input.0.content.0.refusal", want: "say [X]"},
		{name: "a reasoning item's summary", body: `{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"say secret-10"}]},{"role":"user","content":"hi"}]}`,
			path: "input.0.summary.0.text", want: "say [X]"},
		{name: "a chat message's refusal", body: `{"model":"m","messages":[{"role":"assistant","Refusal":"say secret-11"}]}`,
			path: "messages.0.Refusal", want: "say [X]"},
		// An MCP tool's server_description is shown to the model with its
		// tools; a web_search_call item's query (or queries) is read back.
		{name: "an MCP tool's server description", body: `{"model":"m","input":"hi","tools":[{"type":"mcp","server_label":"d","server_url":"https://x.example","server_description":"say secret-12"}]}`,
			path: "tools.0.server_description", want: "say [X]"},
		{name: "a web search call's query", body: `{"model":"m","input":[{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"say secret-13"}},{"role":"user","content":"hi"}]}`,
			path: "input.0.action.query", want: "say [X]"},
		{name: "a web search call's queries", body: `{"model":"m","input":[{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","queries":["ok","say secret-14"]}}]}`,
			path: "input.0.action.queries.1", want: "say [X]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := (&Engine{def: stages{StageRequest: {block}}}).CheckBody(nil, &pipeline.Request{Body: []byte(tc.body)})
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Code != pipeline.CodeContentBlocked {
				t.Fatalf("block: %v, want 400 content_blocked", err)
			}
			r := &pipeline.Request{Body: []byte(tc.body)}
			if err := (&Engine{def: stages{StageRequest: {redact}}}).CheckBody(nil, r); err != nil {
				t.Fatal(err)
			}
			if got := gjson.GetBytes(r.Body, tc.path).Str; got != tc.want {
				t.Fatalf("redact: %s = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

// A pass-through body's arguments sent as a JSON value, a custom tool
// call's input and a tool output that is JSON with an escaped value are
// judged as the chat request's are; they passed unjudged.
func TestPassThroughShapesJudged(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "b", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`secret-[0-9]+`}})
	redact := mustGuard(t, config.Guardrail{Name: "r", Stage: StageRequest, Kind: "regex", Action: "redact", Replacement: "[X]", Patterns: []string{`secret-[0-9]+`}})
	for _, tc := range []struct{ name, body, path, want string }{
		{"object arguments", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{"q":"secret-15","n":1}}]}`,
			"input.0.arguments", `{"q":"[X]","n":1}`},
		{"a custom call's input", `{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"f","input":"say secret-16"}]}`,
			"input.0.input", `"say [X]"`},
		{"object arguments, then a short text", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{"q":"secret-15","n":1}},{"role":"user","content":"ZZZZZ"}]}`,
			"input.0.arguments", `{"q":"[X]","n":1}`},
		{"a chat custom call's input", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"f","input":"say secret-18"}}]}]}`,
			"messages.0.tool_calls.0.custom.input", `"say [X]"`},
		{"an escaped tool output", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"{\"a\":\"secret\\u002d17\"}"}]}`,
			"input.0.output", `"{\"a\":\"[X]\"}"`},
	} {
		if err := (&Engine{def: stages{StageRequest: {block}}}).CheckBody(nil, &pipeline.Request{Body: []byte(tc.body)}); !isContentBlocked(err) {
			t.Errorf("%s: block: %v", tc.name, err)
		}
		r := &pipeline.Request{Body: []byte(tc.body)}
		if err := (&Engine{def: stages{StageRequest: {redact}}}).CheckBody(nil, r); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := gjson.GetBytes(r.Body, tc.path).Raw; got != tc.want {
			t.Errorf("%s: redact: %s = %s, want %s", tc.name, tc.path, got, tc.want)
		}
	}
}
