package anthropic

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// fullChat exercises every mapping of the request translation at once.
const fullChat = `{
 "model": "claude", "stream": true, "stream_options": {"include_usage": true},
 "max_completion_tokens": 900, "stop": "END", "temperature": 1.5, "top_p": 0.9, "user": "user-42",
 "parallel_tool_calls": false, "tool_choice": "required",
 "tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}, "cache_control": {"type": "ephemeral"}}
 ],
 "messages": [
  {"role": "system", "content": "You are terse."},
  {"role": "developer", "content": [{"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
  {"role": "user", "content": "Weather in Köln <and> Bonn?"},
  {"role": "user", "content": [{"type": "text", "text": "Also this:"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}, {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]},
  {"role": "assistant", "content": null, "tool_calls": null},
  {"role": "assistant", "content": "Checking.", "tool_calls": [
   {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Köln\"}"}},
   {"id": "toolu_2", "type": "function", "function": {"name": "now", "arguments": ""}}
  ]},
  {"role": "tool", "tool_call_id": "toolu_1", "content": "{\"status\":\"ok\",\"data\":{\"temp\":12}}"},
  {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "{\"status\":\"error\",\"error\":{\"type\":\"timeout\",\"message\":\"took too long\"}}", "cache_control": {"type": "ephemeral"}}]},
  {"role": "user", "content": "Thanks"},
  {"role": "assistant", "content": ""},
  {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}
 ]
}`

// sdkRoundTrip decodes out with the official SDK's request type and
// encodes it again: a field the SDK does not know, or a shape it does not
// accept, makes the two differ.
func sdkRoundTrip(t *testing.T, out []byte) sdk.MessageNewParams {
	t.Helper()
	var p sdk.MessageNewParams
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("SDK decode: %v\n%s", err, out)
	}
	again, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal(out, &a)
	_ = json.Unmarshal(again, &b)
	delete(a.(map[string]any), "stream") // a transport flag, not a MessageNewParams field
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("SDK round trip changed the request:\nsent: %s\nSDK:  %s", out, again)
	}
	return p
}

func TestTranslateRequestFull(t *testing.T) {
	t.Parallel()
	out, err := TranslateRequest([]byte(fullChat), RequestOptions{Model: "claude-sonnet-4-5"})
	if err != nil {
		t.Fatal(err)
	}
	p := sdkRoundTrip(t, out)
	if p.Model != "claude-sonnet-4-5" || p.MaxTokens != 900 || !gjson.GetBytes(out, "stream").Bool() {
		t.Errorf("model %q max_tokens %d", p.Model, p.MaxTokens)
	}
	if len(p.System) != 2 || p.System[0].Text != "You are terse." || p.System[1].Text != "Use tools." || p.System[1].CacheControl.TTL != "1h" {
		t.Errorf("system %s", gjson.GetBytes(out, "system").Raw)
	}
	roles := []string{}
	for _, m := range p.Messages {
		roles = append(roles, string(m.Role))
	}
	if strings.Join(roles, ",") != "user,assistant,user,assistant" {
		t.Fatalf("roles %v: %s", roles, gjson.GetBytes(out, "messages").Raw)
	}
	u0 := p.Messages[0].Content
	if len(u0) != 4 || u0[0].OfText.Text != "Weather in Köln <and> Bonn?" || u0[2].OfImage.Source.OfBase64.MediaType != "image/png" ||
		u0[2].OfImage.Source.OfBase64.Data != "iVBORw0KGgo=" || u0[3].OfImage.Source.OfURL.URL != "https://example.com/cat.jpg" {
		t.Errorf("first user message %s", gjson.GetBytes(out, "messages.0").Raw)
	}
	a := p.Messages[1].Content
	if len(a) != 3 || a[0].OfText.Text != "Checking." || a[1].OfToolUse.ID != "toolu_1" || a[2].OfToolUse.Name != "now" {
		t.Errorf("assistant %s", gjson.GetBytes(out, "messages.1").Raw)
	}
	if in := gjson.GetBytes(out, "messages.1.content.1.input.city").Str; in != "Köln" {
		t.Errorf("tool input %q", in)
	}
	if in := gjson.GetBytes(out, "messages.1.content.2.input").Raw; in != "{}" {
		t.Errorf("empty arguments are {}: %s", in)
	}
	r := p.Messages[2].Content
	if len(r) != 3 || r[0].OfToolResult.ToolUseID != "toolu_1" || r[0].OfToolResult.IsError.Valid() ||
		r[1].OfToolResult.ToolUseID != "toolu_2" || !r[1].OfToolResult.IsError.Value ||
		r[1].OfToolResult.CacheControl.Type != "ephemeral" || r[2].OfText.Text != "Thanks" {
		t.Errorf("tool results %s", gjson.GetBytes(out, "messages.2").Raw)
	}
	if last := p.Messages[3].Content; len(last) != 1 || last[0].OfText.Text != "No." {
		t.Errorf("merged assistant %s", gjson.GetBytes(out, "messages.3").Raw)
	}
	if len(p.Tools) != 2 || p.Tools[0].OfTool.Name != "get_weather" || p.Tools[0].OfTool.InputSchema.Required[0] != "city" ||
		p.Tools[1].OfTool.CacheControl.Type != "ephemeral" || gjson.GetBytes(out, "tools.1.input_schema").Raw != `{"type":"object"}` {
		t.Errorf("tools %s", gjson.GetBytes(out, "tools").Raw)
	}
	if p.ToolChoice.OfAny == nil || !p.ToolChoice.OfAny.DisableParallelToolUse.Value {
		t.Errorf("tool_choice %s", gjson.GetBytes(out, "tool_choice").Raw)
	}
	if len(p.StopSequences) != 1 || p.StopSequences[0] != "END" || p.Temperature.Value != 1 || p.TopP.Valid() || p.Metadata.UserID.Value != "user-42" {
		t.Errorf("sampling %s", out)
	}
	if strings.Contains(string(out), `\u003c`) {
		t.Errorf("HTML escaped: %s", out)
	}
}

func TestTranslateRequestOptions(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	const tool = `"tools":[{"type":"function","function":{"name":"f"}}]`
	tests := []struct {
		name, body string
		opts       RequestOptions
		check      func(p sdk.MessageNewParams, out []byte) bool
	}{
		{"default max_tokens", `{` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool { return p.MaxTokens == DefaultMaxTokens }},
		{"model max_tokens", `{` + msgs + `}`, RequestOptions{Model: "m", MaxTokens: 777},
			func(p sdk.MessageNewParams, _ []byte) bool { return p.MaxTokens == 777 }},
		{"client max_tokens wins", `{"max_tokens":12,` + msgs + `}`, RequestOptions{Model: "m", MaxTokens: 777},
			func(p sdk.MessageNewParams, _ []byte) bool { return p.MaxTokens == 12 }},
		{"xhigh and max, which the SDKs offer, think as high does", `{"reasoning_effort":"xhigh",` + msgs + `}`, RequestOptions{Model: "m", MaxTokens: 1000},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 16384
			}},
		{"max effort", `{"reasoning_effort":"max",` + msgs + `}`, RequestOptions{Model: "m", MaxTokens: 1000},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 16384
			}},
		// Anthropic refuses tool_use blocks in a request without tools; a
		// summary turn replaying a history of calls sends none.
		{"a history of calls without tools declares them", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"x","content":"r"},{"role":"user","content":"sum up"}]}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				return gjson.GetBytes(out, "tools.#").Int() == 1 && gjson.GetBytes(out, "tools.0.name").Str == "f" &&
					gjson.GetBytes(out, "tool_choice.type").Str == "none"
			}},
		{"safety_identifier is the user", `{"safety_identifier":"u-9",` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool { return p.Metadata.UserID.Value == "u-9" }},
		{"stop list", `{"stop":["a","","b"],` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return reflect.DeepEqual(p.StopSequences, []string{"a", "b"})
			}},
		{"reasoning_effort", `{"reasoning_effort":"medium","temperature":0.2,` + msgs + `}`, RequestOptions{Model: "m", MaxTokens: 1000},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 4096 && p.MaxTokens == 5096 && !p.Temperature.Valid()
			}},
		// The client's max_tokens (or a policy's cap) bounds thinking and
		// answer together: growing it let thinking run past the cap.
		{"client max_tokens bounds thinking", `{"reasoning_effort":"high","max_tokens":5000,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 2500 && p.MaxTokens == 5000
			}},
		// Thinking takes at most half of the client's max_tokens: the
		// answer keeps the rest (max_tokens-1 left it one token).
		{"effort's budget over half the client's max_tokens", `{"reasoning_effort":"medium","max_tokens":6000,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 3000 && p.MaxTokens == 6000
			}},
		{"effort under a max_tokens of 1500: the minimum budget", `{"reasoning_effort":"medium","max_completion_tokens":1500,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1024 && p.MaxTokens == 1500
			}},
		{"low effort under a max_tokens of 2000 stays", `{"reasoning_effort":"low","max_tokens":2000,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1024 && p.MaxTokens == 2000
			}},
		{"own budget that does not fit, shrunk to the minimum", `{"thinking":{"type":"enabled","budget_tokens":1500},"max_tokens":1500,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1024 && p.MaxTokens == 1500
			}},
		{"the client's own budget that fits is kept", `{"thinking":{"type":"enabled","budget_tokens":2500},"max_tokens":3000,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 2500
			}},
		{"thinking object under the client's max_tokens", `{"thinking":{"type":"enabled","budget_tokens":8000},"max_completion_tokens":3000,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1500 && p.MaxTokens == 3000
			}},
		{"client max_tokens too small to think", `{"reasoning_effort":"low","temperature":0.2,"max_tokens":1000,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return !gjson.GetBytes(out, "thinking").Exists() && p.MaxTokens == 1000 && p.Temperature.Value == 0.2
			}},
		{"huge max_tokens, budget within the bound", `{"max_tokens":9223372036854775807,"thinking":{"type":"enabled","budget_tokens":2147483648},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool { return p.MaxTokens == 9223372036854775807 }},
		// Anthropic refuses a budget under 1024 ("budget_tokens: Input should
		// be greater than or equal to 1024"), and requires one while enabled.
		{"thinking budget under the minimum", `{"thinking":{"type":"enabled","budget_tokens":500},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1024 && p.MaxTokens == DefaultMaxTokens
			}},
		{"thinking without a budget", `{"thinking":{"type":"enabled"},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1024 && p.MaxTokens == DefaultMaxTokens
			}},
		{"small budget, client max_tokens too small to think", `{"thinking":{"type":"enabled","budget_tokens":500},"max_tokens":1000,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return !gjson.GetBytes(out, "thinking").Exists() && p.MaxTokens == 1000
			}},
		{"model max_tokens under the budget", `{"reasoning_effort":"low",` + msgs + `}`, RequestOptions{Model: "m", MaxTokens: 1000},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1024 && p.MaxTokens == 2024
			}},
		{"thinking pass-through", `{"thinking":{"type":"enabled","budget_tokens":2000},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfEnabled.BudgetTokens == 2000 && p.MaxTokens == DefaultMaxTokens
			}},
		{"a refusal given twice is sent once", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"refusal","refusal":"I can't."}],"refusal":"I can't."},{"role":"user","content":"b"}]}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				m := gjson.GetBytes(out, "messages.1")
				return m.Get("content.#").Int() == 1 && m.Get("content.0.text").Str == "I can't."
			}},
		{"a refusal after content is kept", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"hello","refusal":"no"},{"role":"user","content":"b"}]}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				m := gjson.GetBytes(out, "messages.1")
				return m.Get("content.#").Int() == 2 && m.Get("content.0.text").Str == "hello" && m.Get("content.1.text").Str == "no"
			}},
		{"a refusal is the assistant turn's text", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"refusal":"I can't help with that."},{"role":"user","content":"b"}]}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				m := gjson.GetBytes(out, "messages")
				return m.Get("#").Int() == 3 && m.Get("1.role").Str == "assistant" && m.Get("1.content.0.text").Str == "I can't help with that."
			}},
		{"reasoning_effort none", `{"reasoning_effort":"none",` + msgs + `}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool { return !gjson.GetBytes(out, "thinking").Exists() }},
		{"named tool", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.ToolChoice.OfTool != nil && p.ToolChoice.OfTool.Name == "f"
			}},
		// Anthropic has no allowed list: only the allowed tools are offered.
		{"allowed_tools required", `{"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}],` +
			`"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"b"}}]}},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.ToolChoice.OfAny != nil && gjson.GetBytes(out, "tools.#.name").Raw == `["b"]`
			}},
		{"allowed_tools auto", `{"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}],` +
			`"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"zz"}}]}},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.ToolChoice.OfAuto != nil && gjson.GetBytes(out, "tools.#.name").Raw == `["a"]`
			}},
		// Naming none: the tools stay (a history with tool_use blocks needs
		// them), and none may be called.
		{"allowed_tools naming no tool", `{"tools":[{"type":"function","function":{"name":"a"}}],` +
			`"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"zz"}}]}},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return gjson.GetBytes(out, "tools.#.name").Raw == `["a"]` && p.ToolChoice.OfNone != nil
			}},
		{"tool_choice none", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none","parallel_tool_calls":false,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool { return p.ToolChoice.OfNone != nil }},
		{"parallel off alone", `{"tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":false,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.ToolChoice.OfAuto != nil && p.ToolChoice.OfAuto.DisableParallelToolUse.Value
			}},
		// OpenAI takes {} for a function without parameters; Anthropic
		// refuses an input_schema without its type.
		{"parameters without a type", `{"tools":[{"type":"function","function":{"name":"f","parameters":{}}},{"type":"function","function":{"name":"g","parameters":{"properties":{"a":{"type":"string"}}}}}],` + msgs + `}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				return gjson.GetBytes(out, "tools.0.input_schema").Raw == `{"type":"object"}` &&
					gjson.GetBytes(out, "tools.1.input_schema.type").Str == "object" && gjson.GetBytes(out, "tools.1.input_schema.properties.a.type").Str == "string"
			}},
		// strict: true is Anthropic's strict tool use; false is no field.
		{"strict tools", `{"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}},{"type":"function","function":{"name":"g","strict":false}}],` + msgs + `}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				return gjson.GetBytes(out, "tools.0.strict").Type == gjson.True && !gjson.GetBytes(out, "tools.1.strict").Exists()
			}},
		// Anthropic refuses ids outside ^[a-zA-Z0-9_-]+$, as other
		// providers mint them (a turn answered by a fallback model).
		{"foreign tool call ids", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"functions.f:0","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"functions.f:0","content":"ok"}]}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				id := gjson.GetBytes(out, "messages.1.content.0.id").Str
				return strings.HasPrefix(id, "functions_f_0_") && gjson.GetBytes(out, "messages.2.content.0.tool_use_id").Str == id
			}},
		// Two ids that differ only in bytes Anthropic refuses stay two
		// calls, each with its own result.
		{"ids that differ in refused bytes", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[` +
			`{"id":"call.A","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call:A","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"call.A","content":"r1"},{"role":"tool","tool_call_id":"call:A","content":"r2"}]}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				a, b := gjson.GetBytes(out, "messages.1.content.0.id").Str, gjson.GetBytes(out, "messages.1.content.1.id").Str
				return a != b && gjson.GetBytes(out, "messages.2.content.0.tool_use_id").Str == a &&
					gjson.GetBytes(out, "messages.2.content.1.tool_use_id").Str == b && gjson.GetBytes(out, "messages.2.content.#").Int() == 2
			}},
		// A schema the client's code parses the answer with: dropping it
		// gave free text.
		{"json_schema response_format", `{"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}}},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.OutputConfig.Format.Schema["required"].([]any)[0] == "a" && gjson.GetBytes(out, "output_config.format.type").Str == "json_schema"
			}},
		{"json_object response_format", `{"response_format":{"type":"json_object"},` + msgs + `}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool { return !gjson.GetBytes(out, "output_config").Exists() }},
		// Anthropic takes image/jpeg, image/png, image/gif and image/webp
		// only; OpenAI also reads image/jpg.
		{"image/jpg", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpg;base64,/9j/4AAQ"}},{"type":"image_url","image_url":{"url":"data:Image/PNG;base64,iVBORw0KGgo="}}]}]}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				c := p.Messages[0].Content
				return c[0].OfImage.Source.OfBase64.MediaType == "image/jpeg" && c[1].OfImage.Source.OfBase64.MediaType == "image/png"
			}},
		// A data URL's parameters are not its media type.
		{"data URL with parameters", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;name=cat.png;base64,iVBORw0KGgo="}}]}]}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Messages[0].Content[0].OfImage.Source.OfBase64.MediaType == "image/png"
			}},
		// Schemes and the base64 marker in any case, as OpenAI reads them.
		{"upper-case schemes", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"DATA:image/png;BASE64,iVBORw0KGgo="}},{"type":"image_url","image_url":{"url":"HTTPS://example.com/cat.jpg"}}]}]}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				c := p.Messages[0].Content
				return c[0].OfImage.Source.OfBase64.MediaType == "image/png" && c[0].OfImage.Source.OfBase64.Data == "iVBORw0KGgo=" &&
					c[1].OfImage.Source.OfURL.URL == "HTTPS://example.com/cat.jpg"
			}},
		{"tool_choice auto without tools", `{"tool_choice":"auto",` + msgs + `}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool { return !gjson.GetBytes(out, "tool_choice").Exists() }},
		// Anthropic refuses thinking with a choice that forces a call: the
		// call is kept, thinking left out, and sampling sent as without it.
		{"reasoning_effort, required", `{"reasoning_effort":"high","temperature":0.2,"max_tokens":1000,` + tool + `,"tool_choice":"required",` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.ToolChoice.OfAny != nil && !gjson.GetBytes(out, "thinking").Exists() && p.MaxTokens == 1000 && p.Temperature.Value == 0.2
			}},
		{"thinking object, named tool", `{"thinking":{"type":"enabled","budget_tokens":2000},` + tool + `,"tool_choice":{"type":"function","function":{"name":"f"}},` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.ToolChoice.OfTool != nil && p.ToolChoice.OfTool.Name == "f" && !gjson.GetBytes(out, "thinking").Exists()
			}},
		{"adaptive thinking, required", `{"thinking":{"type":"adaptive"},` + tool + `,"tool_choice":"required",` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.ToolChoice.OfAny != nil && !gjson.GetBytes(out, "thinking").Exists()
			}},
		{"disabled thinking, required", `{"thinking":{"type":"disabled"},` + tool + `,"tool_choice":"required",` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.ToolChoice.OfAny != nil && p.Thinking.OfDisabled != nil
			}},
		{"disabled thinking keeps sampling", `{"thinking":{"type":"disabled"},"temperature":0.2,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.Thinking.OfDisabled != nil && p.Temperature.Value == 0.2
			}},
		// Current Claude models refuse the two together: temperature wins.
		{"temperature and top_p: temperature only", `{"temperature":0.2,"top_p":0.5,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.Temperature.Value == 0.2 && !gjson.GetBytes(out, "top_p").Exists()
			}},
		{"top_p alone is sent", `{"top_p":0.5,` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return p.TopP.Value == 0.5 && !gjson.GetBytes(out, "temperature").Exists()
			}},
		{"reasoning_effort, auto", `{"reasoning_effort":"low",` + tool + `,"tool_choice":"auto",` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.ToolChoice.OfAuto != nil && p.Thinking.OfEnabled != nil && p.Thinking.OfEnabled.BudgetTokens == 1024
			}},
		{"reasoning_effort, none", `{"reasoning_effort":"low",` + tool + `,"tool_choice":"none",` + msgs + `}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool {
				return p.ToolChoice.OfNone != nil && p.Thinking.OfEnabled != nil
			}},
		// After an assistant turn that called a tool (a tool loop's next
		// round), Anthropic wants that turn's thinking block back, which the
		// chat form does not carry: the request goes without thinking.
		{"reasoning_effort after a tool call", `{"reasoning_effort":"low","temperature":0.3,` + tool + `,"messages":[{"role":"user","content":"x"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"42"}]}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, out []byte) bool {
				return !gjson.GetBytes(out, "thinking").Exists() && p.Temperature.Value == 0.3
			}},
		// A prefill (the last message is the assistant's) is refused
		// while thinking: the request goes without.
		{"reasoning_effort with a prefill", `{"reasoning_effort":"low","messages":[{"role":"user","content":"x"},` +
			`{"role":"assistant","content":"Sure, here:"}]}`, RequestOptions{Model: "m"},
			func(_ sdk.MessageNewParams, out []byte) bool {
				return !gjson.GetBytes(out, "thinking").Exists() && gjson.GetBytes(out, "messages.1.role").Str == "assistant"
			}},
		{"reasoning_effort after a plain answer", `{"reasoning_effort":"low",` + tool + `,"messages":[{"role":"user","content":"x"},` +
			`{"role":"assistant","content":"y"},{"role":"user","content":"z"}]}`, RequestOptions{Model: "m"},
			func(p sdk.MessageNewParams, _ []byte) bool { return p.Thinking.OfEnabled != nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := TranslateRequest([]byte(tc.body), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if p := sdkRoundTrip(t, out); !tc.check(p, out) {
				t.Errorf("%s", out)
			}
		})
	}
}

func TestTranslateRequestRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, param string }{
		{"n", `{"n":2,"messages":[{"role":"user","content":"x"}]}`, "n"},
		{"only system", `{"messages":[{"role":"system","content":"x"}]}`, "messages"},
		{"unknown role", `{"messages":[{"role":"function","content":"x"}]}`, "messages[0].role"},
		{"audio part", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, "messages[0].content[0].type"},
		{"image for assistant", `{"messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "messages[0].content[0].type"},
		{"bad data URL", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"data URL without a media type", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:;name=x;base64,abc"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"ftp image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"arguments not an object", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[1].tool_calls[0].function.arguments"},
		{"call without id", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"function":{"name":"f"}}]}]}`, "messages[1].tool_calls[0]"},
		{"tool without id", `{"messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id"},
		{"object content", `{"messages":[{"role":"user","content":{"text":"x"}}]}`, "messages[0].content"},
		{"tools not a list", `{"tools":{},"messages":[{"role":"user","content":"x"}]}`, "tools"},
		{"custom tool", `{"tools":[{"type":"custom","custom":{"name":"x"}}],"messages":[{"role":"user","content":"x"}]}`, "tools[0]"},
		{"bad tool_choice", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes","messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"bad effort", `{"reasoning_effort":"extreme","messages":[{"role":"user","content":"x"}]}`, "reasoning_effort"},
		{"bad effort, required", `{"reasoning_effort":"extreme","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","messages":[{"role":"user","content":"x"}]}`, "reasoning_effort"},
		// max_tokens plus a budget near 2^63 overflowed: Anthropic got a
		// negative max_tokens.
		{"huge budget", `{"max_tokens":9223372036854775807,"thinking":{"type":"enabled","budget_tokens":9223372036854775807},"messages":[{"role":"user","content":"x"}]}`, "thinking.budget_tokens"},
		{"json_schema with a schema that is no object", `{"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":"x"}},"messages":[{"role":"user","content":"x"}]}`, "response_format.json_schema.schema"},
		// A choice that needs a tool, with none (or not the one named), and
		// a token cap that is not a whole number of at least 1, were
		// dropped: the model answered as unasked, up to the model's default.
		{"bogus without tools", `{"tool_choice":"bogus","messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"allowed_tools required without tools", `{"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[]}},"messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"required without tools", `{"tool_choice":"required","messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"named without tools", `{"tool_choice":{"type":"function","function":{"name":"f"}},"messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"named not offered", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}},"messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"max_tokens 0", `{"max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"max_tokens negative", `{"max_tokens":-5,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"max_tokens a string", `{"max_tokens":"10","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"max_completion_tokens fraction", `{"max_completion_tokens":1.5,"messages":[{"role":"user","content":"x"}]}`, "max_completion_tokens"},
		{"negative budget", `{"thinking":{"type":"enabled","budget_tokens":-5},"messages":[{"role":"user","content":"x"}]}`, "thinking.budget_tokens"},
		// Settings of the wrong type were dropped (Anthropic probe): the
		// model ran at its defaults, in parallel, without stop sequences.
		{"temperature a string", `{"temperature":"0.2","messages":[{"role":"user","content":"x"}]}`, "temperature"},
		{"temperature negative", `{"temperature":-1,"messages":[{"role":"user","content":"x"}]}`, "temperature"},
		{"top_p a string", `{"top_p":"0.5","messages":[{"role":"user","content":"x"}]}`, "top_p"},
		{"top_p over 1", `{"top_p":1.5,"messages":[{"role":"user","content":"x"}]}`, "top_p"},
		{"stop of numbers", `{"stop":[1],"messages":[{"role":"user","content":"x"}]}`, "stop"},
		{"stop mixed", `{"stop":["a",1],"messages":[{"role":"user","content":"x"}]}`, "stop"},
		{"stop an object", `{"stop":{"a":1},"messages":[{"role":"user","content":"x"}]}`, "stop"},
		{"stop an object of strings", `{"stop":{"a":"x"},"messages":[{"role":"user","content":"x"}]}`, "stop"},
		{"stop a number", `{"stop":5,"messages":[{"role":"user","content":"x"}]}`, "stop"},
		{"parallel_tool_calls a string", `{"parallel_tool_calls":"false","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"x"}]}`, "parallel_tool_calls"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := TranslateRequest([]byte(tc.body), RequestOptions{Model: "m"})
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != tc.param {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// Anthropic returns no logprobs and one choice: a request for either is an
// unsupported_parameter 400 naming it, never an answer without them.
// logprobs false, top_logprobs 0 and n 1 ask for nothing and are sent.
func TestTranslateRequestUnsupportedParameters(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct{ body, param string }{
		{`{"logprobs":true,` + msgs + `}`, "logprobs"},
		{`{"logprobs":true,"top_logprobs":3,` + msgs + `}`, "logprobs"},
		{`{"top_logprobs":2,` + msgs + `}`, "top_logprobs"},
		{`{"n":3,` + msgs + `}`, "n"},
		{`{"n":0,` + msgs + `}`, "n"},
		{`{"n":1.5,` + msgs + `}`, "n"},
		{`{"logit_bias":{"50256":-100},` + msgs + `}`, "logit_bias"},
		{`{"presence_penalty":0.5,` + msgs + `}`, "presence_penalty"},
		{`{"frequency_penalty":-1,` + msgs + `}`, "frequency_penalty"},
		{`{"modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"},` + msgs + `}`, "modalities"},
		{`{"web_search_options":{},` + msgs + `}`, "web_search_options"},
		{`{"functions":[{"name":"f","parameters":{"type":"object"}}],` + msgs + `}`, "functions"},
		{`{"function_call":{"name":"f"},` + msgs + `}`, "function_call"},
		{`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"user","content":"y"}]}`, "messages[1].function_call"},
		// What asks for nothing, or only for what the answer may ignore.
		{`{"logprobs":false,"top_logprobs":0,"n":1,` + msgs + `}`, ""},
		{`{"n":null,"logit_bias":{},"presence_penalty":0,"frequency_penalty":null,"modalities":["text"],"audio":null,"functions":null,"seed":7,"stop":["","x"],` + msgs + `}`, ""},
	} {
		_, err := TranslateRequest([]byte(tc.body), RequestOptions{Model: "m"})
		var pe *pipeline.Error
		if tc.param == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.body, err)
			}
			continue
		}
		if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != tc.param || pe.Code != pipeline.CodeUnsupportedParameter {
			t.Errorf("%s: %#v", tc.body, err)
		}
	}
}

// Anthropic has no JSON mode: a json_object response_format becomes a last
// system block asking for one JSON object, after the client's own system
// text; other formats add none.
func TestTranslateRequestJSONObject(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"list two colours as JSON"}]`
	out, err := TranslateRequest([]byte(`{"response_format":{"type":"json_object"},`+msgs+`}`), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	p := sdkRoundTrip(t, out)
	if len(p.System) != 2 || p.System[0].Text != "Be brief." || p.System[1].Text != jsonObjectInstruction ||
		gjson.GetBytes(out, "output_config").Exists() {
		t.Errorf("json_object: %s", out)
	}
	for _, rf := range []string{`{"type":"text"}`, `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}`} {
		out, err := TranslateRequest([]byte(`{"response_format":`+rf+`,`+msgs+`}`), RequestOptions{Model: "m"})
		if err != nil || strings.Contains(string(out), "JSON object") {
			t.Errorf("%s: %v %s", rf, err, out)
		}
	}
	// A json_schema without a schema (OpenAI's allows it) is JSON of no
	// given shape: asked for as json_object is, not a 400.
	out, err = TranslateRequest([]byte(`{"response_format":{"type":"json_schema","json_schema":{"name":"x"}},`+msgs+`}`), RequestOptions{Model: "m"})
	if err != nil || !strings.Contains(string(out), jsonObjectInstruction[:20]) || gjson.GetBytes(out, "output_config").Exists() {
		t.Errorf("json_schema without a schema: %v %s", err, out)
	}
}

// A system or developer message after the conversation has begun stays
// where it was, as a marked text block of the user turn there (merged with
// the user content next to it, so roles still alternate); the leading ones
// are the top-level system. One last after the assistant's answer ends the
// conversation on a user turn, where moved to the top it left the
// assistant's text last, which Anthropic takes for a prefill to continue.
func TestTranslateRequestSystemInPlace(t *testing.T) {
	t.Parallel()
	body := `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},` +
		`{"role":"developer","content":[{"type":"text","text":"Answer in French.","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"how are you?"},` +
		`{"role":"assistant","content":"bien"},{"role":"system","content":"Now summarise."}]}`
	out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	sdkRoundTrip(t, out)
	if got := gjson.GetBytes(out, "system").Raw; got != `[{"type":"text","text":"Be brief."}]` {
		t.Errorf("system %s", got)
	}
	m := gjson.GetBytes(out, "messages")
	if m.Get("#.role").Raw != `["user","assistant","user","assistant","user"]` {
		t.Fatalf("roles %s", m.Raw)
	}
	if got := m.Get("2.content").Raw; got != `[{"type":"text","text":"<system>\nAnswer in French.\n</system>","cache_control":{"type":"ephemeral"}},{"type":"text","text":"how are you?"}]` {
		t.Errorf("in-place note %s", got)
	}
	if got := m.Get("4.content.0.text").Str; got != "<system>\nNow summarise.\n</system>" {
		t.Errorf("last note %q", got)
	}
	env := []byte(`{"error":{"message":"messages.2.content.0: bad","type":"invalid_request_error","param":null,"code":null}}`)
	if got := gjson.GetBytes(Renumber(env, []byte(body)), "error.message").Str; got != "messages.3.content.0: bad" {
		t.Errorf("renumbered %q", got)
	}
}

func TestTranslateRequestCapsBreakpoints(t *testing.T) {
	t.Parallel()
	cc := `"cache_control":{"type":"ephemeral"}`
	body := `{"tools":[{"type":"function","function":{"name":"a"},` + cc + `},{"type":"function","function":{"name":"b"},` + cc + `}],` +
		`"messages":[{"role":"system","content":[{"type":"text","text":"s",` + cc + `}]},` +
		`{"role":"user","content":[{"type":"text","text":"u1",` + cc + `},{"type":"text","text":"u2",` + cc + `}]},` +
		`{"role":"assistant","content":"a",` + cc + `}]}`
	out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	sdkRoundTrip(t, out)
	if n := strings.Count(string(out), `"cache_control"`); n != MaxBreakpoints {
		t.Fatalf("%d markers: %s", n, out)
	}
	// The last four in prefix order stay: the system's and the messages'.
	for _, path := range []string{"system.0.cache_control", "messages.0.content.0.cache_control", "messages.0.content.1.cache_control", "messages.1.content.0.cache_control"} {
		if !gjson.GetBytes(out, path).Exists() {
			t.Errorf("%s missing: %s", path, out)
		}
	}
}

// Two tool messages answering one call (a history that recorded a result
// twice) are one tool_result: Anthropic refuses a second result for a
// tool_use_id ("each tool_use must have a single result"), where OpenAI
// takes both. Both texts reach the model, in order.
func TestTranslateRequestMergesDuplicateToolResults(t *testing.T) {
	t.Parallel()
	body := `{"messages":[{"role":"user","content":"x"},
	 {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},
	 {"role":"tool","tool_call_id":"c1","content":"first"},
	 {"role":"tool","tool_call_id":"c2","content":"{\"status\":\"error\",\"error\":{\"message\":\"boom\"}}"},
	 {"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"second","cache_control":{"type":"ephemeral"}}]},
	 {"role":"user","content":"go on"}]}`
	out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	sdkRoundTrip(t, out)
	user := gjson.GetBytes(out, "messages.2.content")
	if n := len(user.Array()); n != 3 {
		t.Fatalf("%d blocks, want 2 results and the text: %s", n, out)
	}
	r1, r2 := user.Get("0"), user.Get("1")
	if r1.Get("tool_use_id").Str != "c1" || r1.Get("content.#.text").Raw != `["first","second"]` || r1.Get("is_error").Bool() ||
		!r1.Get("cache_control").Exists() {
		t.Errorf("merged result %s", r1.Raw)
	}
	if r2.Get("tool_use_id").Str != "c2" || !r2.Get("is_error").Bool() || user.Get("2.text").Str != "go on" {
		t.Errorf("blocks %s", user.Raw)
	}
}

// Anthropic refuses a one-hour cache marker after a five-minute one: the
// markers before the last one-hour marker become one-hour ones (the
// gateway's own 5m markers on tools and system before a client's 1h marker
// on its last message); markers after it, or in an order Anthropic takes,
// stay as they are.
func TestCacheTTLOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"5m before 1h", `{"tools":[{"type":"function","function":{"name":"f"},"cache_control":{"type":"ephemeral"}}],` +
			`"messages":[{"role":"system","content":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"5m"}}]},` +
			`{"role":"user","content":[{"type":"text","text":"doc","cache_control":{"type":"ephemeral","ttl":"1h"}}]},` +
			`{"role":"assistant","content":"a"},{"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral"}}]}]}`,
			`1h 1h 1h 5m`},
		{"1h then 5m", `{"messages":[{"role":"system","content":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}]},` +
			`{"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral"}}]}]}`,
			`1h 5m`},
	} {
		out, err := TranslateRequest([]byte(tc.body), RequestOptions{Model: "m"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var ttls []string
		var walk func(v gjson.Result)
		walk = func(v gjson.Result) {
			if v.IsObject() {
				if cc := v.Get("cache_control"); cc.IsObject() {
					ttl := cc.Get("ttl").Str
					if ttl == "" {
						ttl = "5m"
					}
					ttls = append(ttls, ttl)
				}
			}
			if v.IsObject() || v.IsArray() {
				v.ForEach(func(k, c gjson.Result) bool {
					if k.Str != "cache_control" {
						walk(c)
					}
					return true
				})
			}
		}
		root := gjson.ParseBytes(out)
		walk(root.Get("tools"))
		walk(root.Get("system"))
		walk(root.Get("messages"))
		if got := strings.Join(ttls, " "); got != tc.want {
			t.Errorf("%s: marker TTLs %s, want %s: %s", tc.name, got, tc.want, out)
		}
	}
}

// A prefill (a last assistant message) that ends in whitespace is sent
// without it: Anthropic refuses "final assistant content cannot end with
// trailing whitespace", which OpenAI takes. One that is only whitespace is
// no prefill; an earlier assistant message keeps its text as it was.
func TestTranslateRequestTrimsPrefill(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure, here it is:\n "}]}`:                                   `["hi","Sure, here it is:"]`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":" \n\t"}]}`:                                                  `["hi"]`,
		`{"messages":[{"role":"assistant","content":"a \n"},{"role":"user","content":"hi "}]}`:                                                  `["a \n","hi "]`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"text","text":"\n"}]}]}`: `["hi","x"]`,
		// The part before a dropped one is trimmed in turn.
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"A "},{"type":"text","text":" \n"}]}]}`: `["hi","A"]`,
	} {
		out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		sdkRoundTrip(t, out)
		if got := gjson.GetBytes(out, "messages.#.content.#.text|@flatten").Raw; got != want {
			t.Errorf("%s: texts %s, want %s", body, got, want)
		}
	}
}

// Anthropic refuses a text block of white space only, which OpenAI takes (a
// model's "\n", a blank user turn): such text is left out, as empty text
// is, wherever it is.
func TestTranslateRequestDropsBlankText(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"messages":[{"role":"system","content":"  "},{"role":"user","content":" "},{"role":"assistant","content":"\n"},{"role":"user","content":"hi"}]}`: `user:hi`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"\u3000\t"},{"type":"text","text":"q"}]}]}`:                                          `user:q`,
		`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":" \t"},` +
			`{"role":"assistant","content":"c","refusal":"  "},{"role":"user","content":"d"}]}`: `user:a assistant:b,c user:d`,
	} {
		out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		sdkRoundTrip(t, out)
		var got []string
		gjson.GetBytes(out, "messages").ForEach(func(_, m gjson.Result) bool {
			var texts []string
			m.Get("content.#.text").ForEach(func(_, v gjson.Result) bool {
				texts = append(texts, v.Str)
				return true
			})
			got = append(got, m.Get("role").Str+":"+strings.Join(texts, ","))
			return true
		})
		if strings.Join(got, " ") != want || gjson.GetBytes(out, "system").Exists() {
			t.Errorf("%s: %q, %s", body, strings.Join(got, " "), out)
		}
	}
	// A blank last user turn, left out, would make the answer before it a
	// prefill: refused. After a tool result it is only left out.
	for _, tail := range []string{`{"role":"user","content":" \n"}`, `{"role":"developer","content":" "}`,
		`{"role":"user","content":" "},{"role":"system","content":"\t"}`} {
		if _, err := TranslateRequest([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},`+tail+`]}`),
			RequestOptions{Model: "m"}); err == nil || !strings.Contains(err.Error(), "white space") {
			t.Errorf("blank last turn %s: %v", tail, err)
		}
	}
	if out, err := TranslateRequest([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,`+
		`"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"},`+
		`{"role":"user","content":" "}],"tools":[{"type":"function","function":{"name":"f"}}]}`), RequestOptions{Model: "m"}); err != nil ||
		gjson.GetBytes(out, "messages.#").Int() != 3 {
		t.Errorf("blank turn after a tool result: %v %s", err, out)
	}
	// A blank system part's breakpoint goes on the system block before it;
	// a blank part of a tool result's, on the result.
	out, err := TranslateRequest([]byte(`{"messages":[{"role":"system","content":[{"type":"text","text":"rules"},`+
		`{"type":"text","text":" ","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"q"},`+
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},`+
		`{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":" ","cache_control":{"type":"ephemeral"}},{"type":"text","text":"r"}]}],`+
		`"tools":[{"type":"function","function":{"name":"f"}}]}`), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if !gjson.GetBytes(out, "system.0.cache_control").Exists() || !gjson.GetBytes(out, "messages.2.content.0.cache_control").Exists() ||
		gjson.GetBytes(out, "messages.1.content.0.cache_control").Exists() {
		t.Errorf("breakpoints: %s", out)
	}
	out, err = TranslateRequest([]byte(`{"messages":[{"role":"system","content":"rules"},{"role":"system","content":" ",`+
		`"cache_control":{"type":"ephemeral"}},{"role":"user","content":"q"}]}`), RequestOptions{Model: "m"})
	if err != nil || !gjson.GetBytes(out, "system.0.cache_control").Exists() {
		t.Errorf("blank system message's breakpoint: %v %s", err, out)
	}
	// A blank message's breakpoint stays, on the block before it.
	body := `{"messages":[{"role":"user","content":"hi"},{"role":"user","content":" ","cache_control":{"type":"ephemeral"}},` +
		`{"role":"assistant","content":"ok"},{"role":"user","content":"q"}]}`
	out, err = TranslateRequest([]byte(body), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(out, "messages.0.content").Raw; got != `[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]` {
		t.Errorf("first turn %s", got)
	}
}

// A breakpoint on a prefill's part that trimming drops moves to the block
// that now ends the messages: the prefix stays cached.
func TestTrimPrefillKeepsTheBreakpoint(t *testing.T) {
	t.Parallel()
	body := `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"A "},` +
		`{"type":"text","text":" \n","cache_control":{"type":"ephemeral"}}]}]}`
	out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(out, "messages.1.content").Raw; got != `[{"type":"text","text":"A","cache_control":{"type":"ephemeral"}}]` {
		t.Fatalf("prefill %s", got)
	}
	body = `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"\n","cache_control":{"type":"ephemeral"}}]}]}`
	if out, err = TranslateRequest([]byte(body), RequestOptions{Model: "m"}); err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(out, "messages").Raw; got != `[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]` {
		t.Fatalf("messages %s", got)
	}
}

// Settings of the right type, null among them, still pass: checkSettings
// refuses only the wrong type or OpenAI's out-of-range values.
func TestTranslateRequestTakesTypedSettings(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"temperature":null,"top_p":null,"stop":null,"parallel_tool_calls":null,"messages":[{"role":"user","content":"x"}]}`,
		`{"temperature":2,"stop":"x","messages":[{"role":"user","content":"x"}]}`,
		`{"top_p":0,"stop":[],"messages":[{"role":"user","content":"x"}]}`,
		`{"stop":["a","b"],"parallel_tool_calls":false,"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"x"}]}`,
	} {
		out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if gjson.Get(body, "parallel_tool_calls").Type == gjson.False && !gjson.GetBytes(out, "tool_choice.disable_parallel_tool_use").Bool() {
			t.Fatalf("%s: parallel calls not disabled: %s", body, out)
		}
		if gjson.Get(body, "temperature").Num == 2 && gjson.GetBytes(out, "temperature").Num != 1 {
			t.Fatalf("%s: temperature %s", body, out)
		}
	}
}

// Tool call ids a history repeats (a server that numbers its calls call_0
// in every turn; two calls of one turn under one id) go out unique, each
// result naming the call it answers, in order: Anthropic refuses a request
// whose tool_use ids repeat, and the second call of a turn had its result
// merged into the first's (an Anthropic probe).
func TestRepeatedToolCallIDsMadeUnique(t *testing.T) {
	t.Parallel()
	call := func(id, city string) string {
		return `{"id":"` + id + `","type":"function","function":{"name":"w","arguments":"{\"city\":\"` + city + `\"}"}}`
	}
	result := func(id, text string) string {
		return `{"role":"tool","tool_call_id":"` + id + `","content":"` + text + `"}`
	}
	body := `{"tools":[{"type":"function","function":{"name":"w"}}],"messages":[` +
		`{"role":"user","content":"a"},{"role":"assistant","tool_calls":[` + call("call_0", "Oslo") + `]},` + result("call_0", "r1") + `,` +
		`{"role":"assistant","content":"ok"},{"role":"user","content":"b"},` +
		`{"role":"assistant","tool_calls":[` + call("call_0", "Rome") + `,` + call("call_0", "Lima") + `,` + call("call_0_2", "Kyiv") + `]},` +
		result("call_0", "r2") + `,` + result("call_0", "r3") + `,` + result("call_0_2", "r4") + `]}`
	out, err := TranslateRequest([]byte(body), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	input := map[string]string{} // tool_use id → city
	results := map[string]string{}
	gjson.GetBytes(out, "messages").ForEach(func(_, m gjson.Result) bool {
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").Str {
			case "tool_use":
				id := b.Get("id").Str
				if _, dup := input[id]; dup {
					t.Errorf("tool_use id %q sent twice: %s", id, out)
				}
				input[id] = b.Get("input.city").Str
			case "tool_result":
				results[b.Get("tool_use_id").Str] += b.Get("content.0.text").Str
			}
			return true
		})
		return true
	})
	pairs := map[string]string{}
	for id, city := range input {
		pairs[city] = results[id]
	}
	if want := map[string]string{"Oslo": "r1", "Rome": "r2", "Lima": "r3", "Kyiv": "r4"}; !maps.Equal(pairs, want) {
		t.Fatalf("city → result %v, want %v\n%s", pairs, want, out)
	}
	// A turn's calls in two assistant messages, an empty tool_calls
	// between, and a result recorded twice (merged into one): the results
	// still name the calls they answer (a review: they named the earlier
	// turn's call_0).
	first := `{"role":"user","content":"a"},{"role":"assistant","tool_calls":[` + call("call_0", "Oslo") + `]},` + result("call_0", "r1") + `,` +
		`{"role":"assistant","content":"ok"},{"role":"user","content":"b"},`
	for name, rest := range map[string]string{
		"split turn":   `{"role":"assistant","tool_calls":[` + call("call_0", "Rome") + `]},{"role":"assistant","tool_calls":[` + call("call_1", "Lima") + `]},` + result("call_0", "r2") + `,` + result("call_1", "r3"),
		"empty calls":  `{"role":"assistant","tool_calls":[` + call("call_0", "Rome") + `]},{"role":"assistant","content":"x","tool_calls":[]},` + result("call_0", "r2"),
		"result twice": `{"role":"assistant","tool_calls":[` + call("call_0", "Rome") + `]},` + result("call_0", "r2") + `,` + result("call_0", "again"),
	} {
		out, err := TranslateRequest([]byte(`{"tools":[{"type":"function","function":{"name":"w"}}],"messages":[`+first+rest+`]}`), RequestOptions{Model: "m"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		uses, answered := map[string]bool{}, map[string]bool{}
		gjson.GetBytes(out, "messages.#.content|@flatten").ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").Str {
			case "tool_use":
				if uses[b.Get("id").Str] {
					t.Errorf("%s: tool_use id %s twice", name, b.Get("id").Str)
				}
				uses[b.Get("id").Str] = true
			case "tool_result":
				if answered[b.Get("tool_use_id").Str] {
					t.Errorf("%s: two results for %s", name, b.Get("tool_use_id").Str)
				}
				answered[b.Get("tool_use_id").Str] = true
			}
			return true
		})
		if !maps.Equal(uses, answered) {
			t.Errorf("%s: calls %v, results %v\n%s", name, uses, answered, out)
		}
	}
	// A call left unanswered, a user turn, then the same id again: the
	// result answers the later call (it named the unanswered one; a review).
	body = `{"tools":[{"type":"function","function":{"name":"w"}}],"messages":[` + first +
		`{"role":"assistant","tool_calls":[` + call("call_0", "Rome") + `]},{"role":"user","content":"c"},` +
		`{"role":"assistant","tool_calls":[` + call("call_0", "Lima") + `]},` + result("call_0", "r3") + `]}`
	out, err = TranslateRequest([]byte(body), RequestOptions{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	lima := gjson.GetBytes(out, `messages.#.content|@flatten|#(input.city=="Lima").id`).Str
	if got := gjson.GetBytes(out, `messages.#.content|@flatten|#(type=="tool_result")#.tool_use_id`).Array(); lima == "" || len(got) != 2 || got[1].Str != lima {
		t.Fatalf("the result of the later call names %v, want %q\n%s", got, lima, out)
	}
}
