package responses

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
	"github.com/llmgw/gateway/wiretest"
)

// Each Responses request field lands on its chat counterpart, and the
// result is a valid chat request.
func TestTranslate(t *testing.T) {
	schema := wiretest.LoadSchema(t)
	cases := []struct {
		name, body string
		want       map[string]string // gjson path in the chat body → raw JSON
	}{
		{"string input and instructions", `{"model":"m","instructions":"be brief","input":"hi"}`, map[string]string{
			"messages": `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`,
		}},
		{"parts, images, files", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"},{"type":"input_file","file_id":"file_1"}]}]}`, map[string]string{
			"messages.0.content": `[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}},{"type":"file","file":{"file_id":"file_1"}}]`,
		}},
		{"assistant parts joined", `{"model":"m","input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"output_text","text":"b"}]}]}`, map[string]string{
			"messages.0": `{"role":"assistant","content":"ab"}`,
		}},
		{"a tool's image is a note in its text result", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"see "},{"type":"input_image","image_url":"http://x/i.png"}]}]}`, map[string]string{
			"messages.1": `{"role":"tool","tool_call_id":"c","content":"see [the tool returned image content, which this model's tool results cannot carry]"}`,
		}},
		{"an assistant's refusal part is its refusal", `{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text","text":"hello"},{"type":"refusal","refusal":"no"}]}]}`, map[string]string{
			"messages.0": `{"role":"assistant","content":"hello","refusal":"no"}`,
		}},
		{"calls join the assistant message before them; outputs become tool messages", `{"model":"m","input":[
			{"role":"user","content":"q"},{"role":"assistant","content":"let me"},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
			{"type":"function_call","call_id":"c2","name":"g","arguments":"{\"a\":1}"},
			{"type":"function_call_output","call_id":"c1","output":"one"},
			{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"t"},{"type":"input_text","text":"wo"}]},
			{"type":"reasoning","id":"rs_1","summary":[]},
			{"type":"function_call","call_id":"c3","name":"f","arguments":"{}"}]}`, map[string]string{
			"messages.1":                 `{"role":"assistant","content":"let me","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{\"a\":1}"}}]}`,
			"messages.2":                 `{"role":"tool","tool_call_id":"c1","content":"one"}`,
			"messages.3.content":         `"two"`,
			"messages.4.content":         `null`,
			"messages.4.tool_calls.0.id": `"c3"`,
			"messages.#":                 `5`,
		}},
		{"a replayed mcp_call is a call and its result", `{"model":"m","input":[{"type":"mcp_call","id":"mcp_1","name":"calc","arguments":"{}","server_label":"builtin","output":"2"}]}`, map[string]string{
			"messages": `[{"role":"assistant","content":null,"tool_calls":[{"id":"mcp_1","type":"function","function":{"name":"calc","arguments":"{}"}}]},{"role":"tool","tool_call_id":"mcp_1","content":"2"}]`,
		}},
		{"approval request and responses", `{"model":"m","input":[{"type":"mcp_approval_request","id":"call_gwa_1","name":"rm","arguments":"{}","server_label":"gateway"},
			{"type":"mcp_approval_response","approval_request_id":"call_gwa_1","approve":false,"reason":"keep \"it\""}]}`, map[string]string{
			"messages.0.tool_calls.0.id": `"call_gwa_1"`,
			"messages.1":                 `{"role":"tool","tool_call_id":"call_gwa_1","content":"{\"decision\":\"reject\",\"message\":\"keep \\\"it\\\"\"}"}`,
		}},
		{"tools, choice, format, settings", `{"model":"m","input":"x","stream":true,
			"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true},{"type":"function","name":"g"}],
			"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,
			"text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true},"verbosity":"low"},
			"max_output_tokens":50,"temperature":0.2,"top_p":0.9,"reasoning":{"effort":"low"},"user":"u1","top_logprobs":2,"include":["message.output_text.logprobs"],"metadata":{"k":"v"}}`, map[string]string{
			"stream":                `true`,
			"stream_options":        `{"include_usage":true}`,
			"tools":                 `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"},"strict":true}},{"type":"function","function":{"name":"g","parameters":{"type":"object","properties":{}}}}]`,
			"tool_choice":           `{"type":"function","function":{"name":"f"}}`,
			"parallel_tool_calls":   `false`,
			"response_format":       `{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"},"strict":true}}`,
			"verbosity":             `"low"`,
			"max_completion_tokens": `50`,
			"temperature":           `0.2`,
			"top_p":                 `0.9`,
			"reasoning_effort":      `"low"`,
			"user":                  `"u1"`,
			"top_logprobs":          `2`,
			"logprobs":              `true`,
			"metadata":              ``, // chat upstreams refuse metadata without store
		}},
		{"allowed tools", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"f"}]}}`, map[string]string{
			"tool_choice": `{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"f"}}]}}`,
		}},
		{"json_object", `{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`, map[string]string{
			"response_format": `{"type":"json_object"}`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Translate([]byte(tc.body), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Request(r.Chat); err != nil {
				t.Fatalf("%v\n%s", err, r.Chat)
			}
			for path, want := range tc.want {
				if got := gjson.GetBytes(r.Chat, path).Raw; got != want {
					t.Errorf("%s = %s, want %s\n%s", path, got, want, r.Chat)
				}
			}
		})
	}
}

// A follow-up continues the stored history; instructions are not carried
// over, and History (what the next turn continues from) holds no system
// message of them.
func TestTranslateContinues(t *testing.T) {
	prior := []byte(`[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]`)
	r, err := Translate([]byte(`{"model":"m","instructions":"new","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c1","output":"done"}]}`), prior, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := gjson.GetBytes(r.Chat, "messages")
	if msgs.Get("#").Int() != 4 || msgs.Get("0.content").Str != "new" || msgs.Get("3.role").Str != "tool" {
		t.Fatalf("messages %s", msgs.Raw)
	}
	if h := gjson.ParseBytes(r.History); h.Get("#").Int() != 3 || h.Get("0.role").Str != "user" {
		t.Fatalf("history %s", r.History)
	}
	if r.Previous != "resp_1" {
		t.Fatalf("previous %q", r.Previous)
	}
}

// A gated call run on a person's approval is in a history once: replayed
// by a client that keeps its own (the request, the decision, the mcp_call
// that ran on it), the call is the request's and the run's output takes
// the decision's place; in a response's own output (AnswerMessages), which
// joins a history where the loop settled it, it adds nothing.
func TestApprovedRunOnceInHistory(t *testing.T) {
	const id = "call_gwa_X1"
	input := `[{"role":"user","content":"6 times 7?"},` +
		`{"type":"mcp_approval_request","id":"` + id + `","server_label":"gateway","name":"calculator","arguments":"{\"expression\":\"6*7\"}"},` +
		`{"type":"mcp_approval_response","approval_request_id":"` + id + `","approve":true},` +
		`{"type":"mcp_call","id":"mcp_1_0","server_label":"builtin","name":"calculator","arguments":"{\"expression\":\"6*7\"}","approval_request_id":"` + id + `","status":"completed","output":"42"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"It is 42."}]},` +
		`{"role":"user","content":"thanks"}]`
	r, err := Translate([]byte(`{"model":"m","store":false,"input":`+input+`}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := gjson.GetBytes(r.Chat, "messages")
	calls := gjson.Get(msgs.Raw, `#.tool_calls|@flatten`)
	results := gjson.Get(msgs.Raw, `#(role=="tool")#`)
	if len(calls.Array()) != 1 || calls.Get("0.id").Str != id || len(results.Array()) != 1 ||
		results.Get("0.tool_call_id").Str != id || results.Get("0.content").Str != "42" {
		t.Fatalf("messages %s", msgs.Raw)
	}
	answer := AnswerMessages([]byte(`{"output":[` +
		`{"id":"mcp_1_0","type":"mcp_call","server_label":"builtin","name":"calculator","arguments":"{}","approval_request_id":"` + id + `","status":"completed","error":null,"output":"42"},` +
		`{"id":"mcp_1_1","type":"mcp_call","server_label":"builtin","name":"calculator","arguments":"{}","status":"completed","error":null,"output":"1"},` +
		`{"id":"msg_1_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"It is 42."}]}]}`))
	a := gjson.Parse("[" + string(answer) + "]")
	if n := len(gjson.Get(a.Raw, `#.tool_calls|@flatten`).Array()); n != 1 || !strings.Contains(a.Raw, "mcp_1_1") || strings.Contains(a.Raw, "mcp_1_0") {
		t.Fatalf("answer messages %s", answer)
	}
	// The stored history holds what the model was shown in the decision's
	// place: whole without the loop's record of the approval, which expires
	// first.
	history := `[{"role":"user","content":"6 times 7?"},{"role":"assistant","content":null,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"calculator","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"` + id + `","content":"{\"decision\":\"approve\"}"},{"role":"tool","tool_call_id":"other","content":"kept"}]`
	settled := gjson.ParseBytes(Settle([]byte(history), map[string]string{id: "42"}))
	if settled.Get("#").Int() != 4 || settled.Get("2.content").Str != "42" || settled.Get("2.tool_call_id").Str != id || settled.Get("3.content").Str != "kept" {
		t.Fatalf("settled history %s", settled.Raw)
	}
	if got := Settle([]byte(history), nil); string(got) != history {
		t.Fatalf("a response without an approved run changed the history: %s", got)
	}
}

// Bad requests are 400s naming the parameter.
func TestTranslateRefuses(t *testing.T) {
	cases := map[string]string{
		`{"input":"x"}`:           "model",
		`{"model":"m"}`:           "input",
		`{"model":"m","input":5}`: "input",
		`{"model":"m","input":"x","background":true}`:                                                                      "background",
		`{"model":"m","input":"x","conversation":"c"}`:                                                                     "conversation",
		`{"model":"m","input":[{"role":"robot","content":"x"}]}`:                                                           "input[0].role",
		`{"model":"m","input":[{"type":"computer_call"}]}`:                                                                 "input[0].type",
		`{"model":"m","input":[{"type":"item_reference"}]}`:                                                                "input[0].id",
		`{"model":"m","input":[{"type":"item_reference","id":5}]}`:                                                         "input[0].id",
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_audio"}]}]}`:                                       "input[0].content[0].type",
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`:                         "input[0].content[0]",
		`{"model":"m","input":"x","tools":[{"type":"web_search"}]}`:                                                        "tools[0].type",
		`{"model":"m","input":"x","tools":[{"type":"function"}]}`:                                                          "tools[0].name",
		`{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"other"}]}`:                                        "tools[0].type",
		`{"model":"m","input":"x","tool_choice":"sometimes"}`:                                                              "tool_choice",
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":"{\"type\":\"object\"}"}]}`:          "tools[0].parameters",
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":[]}]}`:                               "tools[0].parameters",
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"g","strict":"yes"}]}`: "tools[1].strict",
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f","description":5}]}`:                               "tools[0].description",
		`{"model":"m","input":"x","stream":true,"stream_options":5}`:                                                       "stream_options",
		`{"model":"m","input":"x","text":{"format":5}}`:                                                                    "text.format",
		`{"model":"m","input":"x","service_tier":"gold"}`:                                                                  "service_tier",
		`{"model":"m","input":"x","reasoning":{"summary":"everything"}}`:                                                   "reasoning.summary",
		`{"model":"m","input":"x","tool_choice":{"type":"allowed_tools","mode":"weird","tools":[]}}`:                       "tool_choice.mode",
		`{"model":"m","input":"x","tool_choice":{"type":"allowed_tools","tools":[]}}`:                                      "tool_choice.mode",
		`{"model":"m","input":"x","tool_choice":{"type":"allowed_tools","mode":"auto","tools":"x"}}`:                       "tool_choice.tools",
		`{"model":"m","input":"x","text":{"format":{"type":"yaml"}}}`:                                                      "text.format.type",
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","schema":{}}}}`:                                   "text.format.name",
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n"}}}`:                                    "text.format.schema",
		`{"model":"m","input":"x","stream":"yes"}`:                                                                         "stream",
		`{"model":"m","input":"x","instructions":5}`:                                                                       "instructions",
		`{"model":"m","input":"x","store":"yes"}`:                                                                          "store",
		`{"model":"m","input":"x","previous_response_id":5}`:                                                               "previous_response_id",
		// Values that were read as a default: "" as no previous response, a
		// text part's number as its digits, a missing text as "", an
		// unknown include as nothing.
		`{"model":"m","input":"x","previous_response_id":""}`:                                "previous_response_id",
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":5}]}]}`: "input[0].content[0].text",
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text"}]}]}`:          "input[0].content[0].text",
		`{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text"}]}]}`:    "input[0].content[0].text",
		`{"model":"m","input":"x","include":["bogus.thing"]}`:                                "include[0]",
		`{"model":"m","input":"x","include":["message.output_text.logprobs",7]}`:             "include[1]",
		`{"model":"m","input":"x","include":"message.output_text.logprobs"}`:                 "include",
		`{"model":"m","input":"x","truncation":"bogus"}`:                                     "truncation",
		`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"see"},{"type":"input_audio"}]}]}`: "input[1].output[1].type",
		`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":5}]}`: "input[0].output",
		// A tool result or call without its id answers no call (OpenAI's 400).
		`{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`:              "input[0].call_id",
		`{"model":"m","input":[{"type":"function_call_output","call_id":"","output":"x"}]}`: "input[0].call_id",
		`{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`:      "input[0].call_id",
		`{"model":"m","input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`:   "input[0].name",
		// Stored as sent, arguments that are not a string would be listed
		// back against the schema.
		`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f"}]}`:                            "input[0].arguments",
		`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{"a":1}}]}`:        "input[0].arguments",
		`{"model":"m","input":"x","tool_choice":{"type":"function"},"tools":[{"type":"function","name":"f"}]}`: "tool_choice.name",
		// An approval answer with no approval request before it.
		`{"model":"m","input":[{"type":"mcp_approval_response","approval_request_id":"call_gwa_nope","approve":true}]}`: "input[0].approval_request_id",
		// Settings the response object repeats, of the wrong type or range.
		`{"model":"m","input":"x","max_output_tokens":"a"}`:                             "max_output_tokens",
		`{"model":"m","input":"x","max_output_tokens":0}`:                               "max_output_tokens",
		`{"model":"m","input":"x","max_output_tokens":2.5}`:                             "max_output_tokens",
		`{"model":"m","input":"x","temperature":"hot"}`:                                 "temperature",
		`{"model":"m","input":"x","temperature":2.1}`:                                   "temperature",
		`{"model":"m","input":"x","top_p":-0.1}`:                                        "top_p",
		`{"model":"m","input":"x","top_logprobs":21}`:                                   "top_logprobs",
		`{"model":"m","input":"x","reasoning":{"effort":"bogus"}}`:                      "reasoning.effort",
		`{"model":"m","input":"x","reasoning":"high"}`:                                  "reasoning",
		`{"model":"m","input":"x","text":{"verbosity":"loud"}}`:                         "text.verbosity",
		`{"model":"m","input":"x","parallel_tool_calls":"yes"}`:                         "parallel_tool_calls",
		`{"model":"m","input":"x","user":5}`:                                            "user",
		`{"model":"m","input":"x","metadata":{"a":1}}`:                                  "metadata",
		`{"model":"m","input":"x","metadata":[]}`:                                       "metadata",
		`{"model":"m","input":"x","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`: "metadata",
		`{"model":"m","input":"x","metadata":{` + manyPairs(17) + `}}`:                  "metadata",
		`not json`: "",
		// Echoed into the response object: a broken byte there is a body
		// the client's JSON parser refuses.
		"{\"model\":\"m\",\"input\":\"x\",\"instructions\":\"be \xff brief\"}": "",
		"{\"model\":\"m\",\"input\":\"x\",\"metadata\":{\"k\":\"\xc3\"}}":      "",
	}
	for body, param := range cases {
		_, err := Translate([]byte(body), nil, nil)
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != param {
			t.Errorf("%s: %v (param %q), want a 400 naming %q", body, err, paramOf(pe), param)
		}
	}
	// An item no stored response of the tenant has is not found, as OpenAI
	// and a natively served request answer (it was a 400 here).
	_, err := Translate([]byte(`{"model":"m","input":[{"type":"item_reference","id":"msg_x_0"}]}`), nil, nil)
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != 404 || pe.Code != pipeline.CodeItemNotFound || pe.Param != "input" || !strings.Contains(pe.Message, "msg_x_0") {
		t.Errorf("an unknown item: %v, want 404 item_not_found", err)
	}
}

// manyPairs returns n metadata pairs, "k0":"v" and on.
func manyPairs(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":"v"`, i)
	}
	return b.String()
}

func paramOf(e *pipeline.Error) string {
	if e == nil {
		return ""
	}
	return e.Param
}

// FuzzTranslate: any body either translates into valid JSON whose
// messages are an array, or is refused with a 400; never a panic.
func FuzzTranslate(f *testing.F) {
	f.Add([]byte(`{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}],"tool_choice":"auto","text":{"format":{"type":"json_object"}}}`))
	f.Add([]byte(`{"model":"m","input":"hi","stream":true,"max_output_tokens":5}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"mcp_call","id":"x","error":{"content":"e"}},{"id":"msg_1_0"}]}`))
	prior := []byte(`[{"role":"user","content":"q"}]`)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Translate(body, prior, func(string) (gjson.Result, error) {
			return gjson.Parse(`{"type":"message","role":"user","content":"r"}`), nil
		})
		if err != nil {
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if !gjson.ValidBytes(r.Chat) || !gjson.GetBytes(r.Chat, "messages").IsArray() || !gjson.ValidBytes(r.History) || !gjson.ValidBytes(r.Input) {
			t.Fatalf("invalid translation of %s:\n%s", body, r.Chat)
		}
		if !utf8.Valid(r.Chat) || !utf8.Valid(r.Echo) {
			t.Fatalf("translated a body that is not UTF-8: %q", body)
		}
		if !gjson.Valid("{" + string(r.Echo) + "}") {
			t.Fatalf("invalid echo of %s: %s", body, r.Echo)
		}
	})
}

// An item is given once: references to one stored item, each expanded to
// a copy of it, made a 7.6 KB body of 100 references to a 1 MB item cost a
// gigabyte (and an 8 MiB body of them, any memory). Distinct items still
// resolve.
func TestTranslateRefusesDuplicateReferences(t *testing.T) {
	t.Parallel()
	big := `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` + strings.Repeat("a", 1<<20) + `"}]}`
	resolve := func(id string) (gjson.Result, error) {
		if strings.HasPrefix(id, "msg_x_") {
			return gjson.Parse(big), nil
		}
		return gjson.Result{}, nil
	}
	refs := strings.TrimSuffix(strings.Repeat(`{"type":"item_reference","id":"msg_x_0"},`, 100), ",")
	_, err := Translate([]byte(`{"model":"m","input":[`+refs+`]}`), nil, resolve)
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "input[1].id" {
		t.Fatalf("100 references to one item: %v (param %q), want a 400 naming input[1].id", err, paramOf(pe))
	}
	r, err := Translate([]byte(`{"model":"m","input":[{"type":"item_reference","id":"msg_x_0"},{"id":"msg_x_1"},{"role":"user","content":"next"}]}`), nil, resolve)
	if err != nil {
		t.Fatalf("two distinct items: %v", err)
	}
	if n := gjson.GetBytes(r.Chat, "messages.#").Int(); n != 3 {
		t.Fatalf("two distinct items: %d messages, want 3", n)
	}
}

// include "message.output_text.logprobs" asks the upstream for logprobs
// (logprobs:true, once), with or without top_logprobs, and marks the
// request so the output carries them. top_logprobs alone is not passed
// (OpenAI's Responses API shows no logprobs unless included, so the
// upstream is not asked; an upstream without logprobs, Anthropic, would
// refuse the request).
func TestTranslateIncludeLogprobs(t *testing.T) {
	cases := []struct {
		name, extra string
		logprobs    string // the chat body's logprobs, raw ("" absent)
		top         string // the chat body's top_logprobs, raw
		shown       bool   // Request.Logprobs
	}{
		{"include alone", `,"include":["message.output_text.logprobs"]`, `true`, ``, true},
		{"include with top_logprobs", `,"include":["reasoning.encrypted_content","message.output_text.logprobs"],"top_logprobs":3`, `true`, `3`, true},
		{"include with top_logprobs null", `,"include":["message.output_text.logprobs"],"top_logprobs":null`, `true`, ``, true},
		{"top_logprobs alone", `,"top_logprobs":2`, ``, ``, false},
		{"top_logprobs 0 alone", `,"top_logprobs":0`, ``, ``, false},
		{"other includes", `,"include":["reasoning.encrypted_content"]`, ``, ``, false},
		{"nothing", ``, ``, ``, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Translate([]byte(`{"model":"m","input":"hi"`+tc.extra+`}`), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := gjson.GetBytes(r.Chat, "logprobs").Raw; got != tc.logprobs || strings.Count(string(r.Chat), `"logprobs"`) > 1 {
				t.Errorf("chat logprobs %s, want %q\n%s", got, tc.logprobs, r.Chat)
			}
			if got := gjson.GetBytes(r.Chat, "top_logprobs").Raw; got != tc.top {
				t.Errorf("chat top_logprobs %s, want %q\n%s", got, tc.top, r.Chat)
			}
			if r.Logprobs != tc.shown {
				t.Errorf("Logprobs %v, want %v", r.Logprobs, tc.shown)
			}
		})
	}
}

// A tool declaring the gateway itself as an MCP server (what the Agents
// SDK's hosted MCP tool sends so that it can route the gateway's approval
// requests) is accepted and offers the model nothing of the client's: the
// gateway's server tools are its config's. Another MCP server is refused.
func TestTranslateAcceptsTheGatewayAsMCPServer(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"gateway","server_url":"http://gw","require_approval":"always"}]}`:          ``,
		`{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"gateway"},{"type":"function","name":"f"}]}`:                                `["f"]`,
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"mcp","server_label":"gateway"},{"type":"function","name":"g"}]}`: `["f","g"]`,
	} {
		rq, err := Translate([]byte(body), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		tools := gjson.GetBytes(rq.Chat, "tools")
		if got := gjson.GetBytes(rq.Chat, "tools.#.function.name").Raw; want == "" && tools.Exists() || want != "" && got != want {
			t.Fatalf("%s: chat tools %s", body, tools.Raw)
		}
		if !gjson.ValidBytes(rq.Chat) {
			t.Fatalf("%s: invalid chat body %s", body, rq.Chat)
		}
	}
}

// The response object repeats truncation as OpenAI's does: the request's,
// or "disabled".
func TestEchoTruncation(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"model":"m","input":"x"}`:                     "disabled",
		`{"model":"m","input":"x","truncation":"auto"}`: "auto",
	} {
		r, err := Translate([]byte(body), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := gjson.Get("{"+string(r.Echo)+"}", "truncation").Str; got != want {
			t.Errorf("%s: truncation %q, want %q", body, got, want)
		}
	}
}

// Settings at the ends of their ranges, and null, are taken.
func TestTranslateAcceptsSettingsAtTheirBounds(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","input":"x","temperature":2,"top_p":0,"max_output_tokens":1,"top_logprobs":20}`,
		`{"model":"m","input":"x","temperature":null,"top_p":null,"max_output_tokens":null,"reasoning":null,"metadata":null,"text":null}`,
		`{"model":"m","input":"x","reasoning":{"effort":"none","summary":"auto"},"text":{"verbosity":"high"},"parallel_tool_calls":false}`,
		`{"model":"m","input":"x","metadata":{` + manyPairs(15) + `,"` + strings.Repeat("é", 64) + `":"` + strings.Repeat("é", 512) + `"}}`,
	} {
		if _, err := Translate([]byte(body), nil, nil); err != nil {
			t.Errorf("%.120s: %v", body, err)
		}
	}
}

// The response object repeats the settings the request gave that OpenAI's
// repeats too (they were left out), and the answer with them is one the
// Responses schema takes; prompt_cache_retention reaches the upstream.
func TestTranslateEchoesEverySetting(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","input":"hi","top_logprobs":5,"service_tier":"flex","user":"u","safety_identifier":"s",` +
		`"prompt_cache_key":"k","prompt_cache_retention":"24h","background":false,"store":false}`
	r, err := Translate([]byte(body), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	echo := gjson.Parse("{" + string(r.Echo) + "}")
	for k, want := range map[string]string{"top_logprobs": "5", "service_tier": `"flex"`, "user": `"u"`, "safety_identifier": `"s"`,
		"prompt_cache_key": `"k"`, "prompt_cache_retention": `"24h"`, "background": "false", "store": "false"} {
		if got := echo.Get(k).Raw; got != want {
			t.Errorf("echo %s = %s, want %s", k, got, want)
		}
	}
	if gjson.GetBytes(r.Chat, "prompt_cache_retention").Str != "24h" {
		t.Errorf("chat request %s", r.Chat)
	}
	h := wire.ResponsesHeader{ID: "resp_1", Created: 1767225600, Model: "m", Echo: r.Echo}
	enc := wire.NewResponsesJSON(h)
	var out []byte
	for _, e := range []wire.Event{{Kind: wire.Role}, {Kind: wire.Text, Key: "content", Text: []byte("hi")}, {Kind: wire.Finish, Finish: "stop"}, {Kind: wire.End}} {
		out = enc.Encode(out, &e)
	}
	if err := wiretest.LoadResponsesSchema(t).Validate("Response", out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// Texts joined across left-out mcp_call items cost in proportion to the
// body: each join rewrote the whole joined message, and a body alternating
// texts and bare mcp_calls took seconds and gigabytes (the square of its
// size). Not parallel: the bytes allocated are read around one call.
func TestJoinedTextsLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","store":false,"input":[{"role":"user","content":"x"}`)
	for range 10000 {
		b.WriteString(`,{"role":"assistant","content":"aaaaaaaa"},{"type":"mcp_call","name":"x"}`)
	}
	b.WriteString(`]}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := Translate([]byte(b.String()), nil, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(r.Chat, "messages.1.content").Str; len(got) != 80000 {
		t.Fatalf("joined text of %d bytes", len(got))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40*uint64(b.Len()) {
		t.Fatalf("%d MB allocated for a %d KB body", alloc>>20, b.Len()>>10)
	}
}

// A reference without an id, or with one that is not a string, is told so,
// not that no stored item has it.
func TestReferenceIDMessages(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"m","input":[{"type":"item_reference"}]}`:        "Missing required parameter: 'input[0].id'.",
		`{"model":"m","input":[{"type":"item_reference","id":5}]}`: "Invalid 'input[0].id': expected a string.",
	} {
		_, err := Translate([]byte(body), nil, nil)
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Message != want {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// An item the conversation of previous_response_id already holds, given
// again by reference, is refused as OpenAI refuses it: the previous
// response's own items, and a call an earlier response of the chain made.
// An item of another response passes.
func TestReferenceAlreadyInThePreviousConversation(t *testing.T) {
	stored := map[string]string{
		"fc_S_0":  `{"id":"fc_S_0","type":"function_call","call_id":"C","name":"f","arguments":"{}"}`,
		"msg_S_1": `{"id":"msg_S_1","type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}`,
		"fc_T_0":  `{"id":"fc_T_0","type":"function_call","call_id":"D","name":"f","arguments":"{}"}`,
		"fc_U_0":  `{"id":"fc_U_0","type":"function_call","call_id":"E","name":"f","arguments":"{}"}`,
	}
	resolve := func(id string) (gjson.Result, error) { return gjson.Parse(stored[id]), nil }
	prior := []byte(`[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"D","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"D","content":"r"},{"role":"assistant","content":null,"tool_calls":[{"id":"C","type":"function","function":{"name":"f","arguments":"{}"}}]}]`)
	for ref, dup := range map[string]bool{"fc_S_0": true, "msg_S_1": true, "fc_T_0": true, "fc_U_0": false} {
		body := `{"model":"m","previous_response_id":"resp_S","input":[{"type":"item_reference","id":"` + ref + `"},{"type":"function_call_output","call_id":"C","output":"x"}]}`
		_, err := Translate([]byte(body), prior, resolve)
		var pe *pipeline.Error
		switch refused := errors.As(err, &pe) && pe.Param == "input[0].id"; {
		case dup && !refused:
			t.Errorf("%s: %v, want a 400 naming input[0].id", ref, err)
		case !dup && err != nil:
			t.Errorf("%s: %v", ref, err)
		}
	}
}

// @openai/agents replays every earlier mcp_call of a conversation without
// its output: past the bound on stored responses a request reads, such an
// output is not known (as when nothing stored it), not a 400 that refuses
// the conversation from then on (a review: its 17th turn with an MCP call
// was refused for good). A store that fails is a 503.
func TestMCPReplayPastTheBound(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","input":[{"type":"mcp_call","id":"mcp_z_0","name":"calc","arguments":"{}","server_label":"builtin","output":null,"error":null},{"role":"user","content":"next"}]}`)
	over := func(string) (gjson.Result, error) { return gjson.Result{}, ErrTooManyReferenced }
	if _, err := Translate(body, nil, over); err != nil {
		t.Fatalf("past the bound: %v", err)
	}
	down := func(string) (gjson.Result, error) { return gjson.Result{}, errors.New("redis down") }
	var pe *pipeline.Error
	if _, err := Translate(body, nil, down); !errors.As(err, &pe) || pe.Status != 503 {
		t.Fatalf("store down: %v, want 503", err)
	}
}

// service_tier "ultrafast", a Responses API tier chat has not, is echoed
// but not carried to the chat request, which an upstream would refuse for
// it; chat's own tiers are carried.
func TestUltrafastTierNotCarried(t *testing.T) {
	t.Parallel()
	for tier, carried := range map[string]bool{"ultrafast": false, "fast": true, "flex": true} {
		r, err := Translate([]byte(`{"model":"m","input":"hi","service_tier":"`+tier+`"}`), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := gjson.GetBytes(r.Chat, "service_tier"); got.Exists() != carried || carried && got.Str != tier {
			t.Errorf("%s: chat request %s", tier, r.Chat)
		}
		if got := gjson.Parse("{" + string(r.Echo) + "}").Get("service_tier").Str; got != tier {
			t.Errorf("%s: echo %q", tier, got)
		}
	}
}
