package toolprompt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// DefaultPrompt is the system prompt of the fenced format; {tools} is
// replaced by one JSON line per tool (name, description, parameters).
const DefaultPrompt = "You can call tools. Each line below describes one tool as JSON: its name, its description and its parameters as a JSON Schema.\n\n{tools}\n\n" +
	"To call tools, end your reply with exactly one block in this form and write nothing after it:\n\n" +
	fenceOpen + "\n[{\"name\": \"tool_name\", \"arguments\": {\"parameter\": \"value\"}}]\n" + fenceClose + "\n\n" +
	"Put several calls in the one array to run them together. The results come back in a user message that starts with \"" + resultsHead + "\". " +
	"To answer without a tool, reply in plain text with no block."

// DefaultSchemaPrompt is the system prompt of the json_schema format.
const DefaultSchemaPrompt = "You can call tools. Each line below describes one tool as JSON: its name, its description and its parameters as a JSON Schema.\n\n{tools}\n\n" +
	"Reply with one JSON object. To call tools: {\"thought\": \"...\", \"calls\": [{\"name\": \"tool_name\", \"arguments\": {\"parameter\": \"value\"}}]}. " +
	"To answer: {\"thought\": \"...\", \"answer\": \"your answer\"}. The results of calls come back in a user message that starts with \"" + resultsHead + "\"."

// resultsHead starts the user message that carries tool results upstream.
const resultsHead = "Tool results:"

// responseFormat is the structured output asked for in the json_schema format.
const responseFormat = `{"type":"json_schema","json_schema":{"name":"tool_protocol","schema":{"type":"object","properties":{"thought":{"type":"string"},"answer":{"type":"string"},"calls":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"arguments":{"type":"object"}},"required":["name","arguments"]}}},"required":["thought"]}}}`

// protocolFormat is the response format of the json_schema protocol for a
// request whose own response format is rf: a client's structured output
// (a json_schema's schema, or any object for json_object) is what the
// protocol's "answer" holds, so that it is kept rather than replaced.
func protocolFormat(rf gjson.Result) []byte {
	answer := `{"type":"object"}`
	var defs []gjson.Result // the schema's definitions: its local $refs name them from the root
	switch rf.Get("type").Str {
	case "json_schema":
		if sch := rf.Get("json_schema.schema"); sch.IsObject() && !selfRef(sch.Raw) {
			answer = sch.Raw
			defs = []gjson.Result{sch.Get(`\$defs`), sch.Get("definitions")}
		}
	case "json_object":
	default:
		return []byte(responseFormat)
	}
	b, err := sjson.SetRawBytes([]byte(responseFormat), "json_schema.schema.properties.answer", []byte(answer))
	if err != nil {
		return []byte(responseFormat)
	}
	// Moved under "answer", the schema's "#/$defs/X" would name the
	// protocol's root: its definitions go there too.
	for i, key := range [...]string{`\$defs`, "definitions"} {
		if defs != nil && defs[i].IsObject() {
			if out, err := sjson.SetRawBytes(b, "json_schema.schema."+key, []byte(defs[i].Raw)); err == nil {
				b = out
			}
		}
	}
	return b
}

// selfRef reports whether a schema refers to its own root ("$ref": "#"),
// which under the protocol's "answer" would name the protocol: such a
// schema is asked for as any JSON object.
func selfRef(schema string) bool {
	return strings.Contains(schema, `"$ref":"#"`) || strings.Contains(schema, `"$ref": "#"`)
}

// choiceMode is what the request's tool_choice asks of this call.
type choiceMode uint8

const (
	choiceAuto choiceMode = iota
	choiceNone
	choiceRequired // "required", or allowed_tools with mode required
	choiceNamed    // one named function
)

// rewritten is the upstream form of one request.
type rewritten struct {
	body   []byte
	names  []string // the offered tools
	choice choiceMode
	named  string // choiceNamed: the tool
	single bool   // parallel_tool_calls false: one call per reply
	cap    wire.OutputCap
}

// rewrite returns the request body without tools, with the tools described
// in the system prompt and earlier calls and results rendered as text; nil
// when the request neither offers tools nor carries calls in its history.
func (h *handler) rewrite(body []byte, final bool) (*rewritten, error) {
	res := gjson.GetManyBytes(body, "tools", "tool_choice", "messages", "parallel_tool_calls", "functions", "function_call")
	tools, tc, msgs := res[0], res[1], res[2]
	if err := describable(tools, res[4], res[5]); err != nil {
		return nil, err
	}
	history := hasToolHistory(msgs)
	if !(tools.IsArray() && len(tools.Array()) > 0) && !history {
		return nil, nil
	}
	// Deleted below, parallel_tool_calls never reaches a provider that
	// would refuse it: "false" as a string let the model make several calls.
	if err := pipeline.CheckBool(res[3], "parallel_tool_calls"); err != nil {
		return nil, err
	}
	rw := &rewritten{single: res[3].Type == gjson.False}
	// allowed_tools narrows the tools the model is shown (and may call)
	// to the ones it lists, as a native model's are.
	var allowed map[string]bool
	if tc.IsObject() && tc.Get("type").Str == "allowed_tools" {
		allowed = map[string]bool{}
		tc.Get("allowed_tools.tools").ForEach(func(_, v gjson.Result) bool {
			allowed[v.Get("function.name").Str] = true
			return true
		})
	}
	var lines []byte
	tools.ForEach(func(_, t gjson.Result) bool {
		f := t.Get("function")
		if t.Get("type").Str != "function" || f.Get("name").Str == "" || allowed != nil && !allowed[f.Get("name").Str] {
			return true
		}
		rw.names = append(rw.names, f.Get("name").Str)
		if len(lines) > 0 {
			lines = append(lines, '\n')
		}
		lines = append(lines, `{"name":`...)
		lines = jsonstring.Append(lines, f.Get("name").Str)
		if d := f.Get("description"); d.Type == gjson.String {
			lines = append(lines, `,"description":`...)
			lines = jsonstring.Append(lines, d.Str)
		}
		if p := f.Get("parameters"); p.IsObject() {
			lines = append(lines, `,"parameters":`...)
			lines = appendCompact(lines, p.Raw)
		}
		lines = append(lines, '}')
		return true
	})
	rw.choice, rw.named = readChoice(tc)
	if allowed != nil && len(rw.names) == 0 && tools.IsArray() && len(tools.Array()) > 0 {
		// The client's mistake: no reply of the model could meet it.
		return nil, pipeline.BadRequest("tool_choice", "tool_choice allowed_tools names none of the request's function tools")
	}
	if rw.choice == choiceNamed && !slices.Contains(rw.names, rw.named) {
		// The client's mistake, as an upstream with tool calling answers
		// it: no reply of the model could meet it.
		name := rw.named
		if len(name) > 64 {
			name = name[:64] + "..."
		}
		return nil, pipeline.BadRequest("tool_choice", "tool_choice names the function %q, which is not among the request's tools", name)
	}
	var prompt string
	if len(rw.names) > 0 && rw.choice != choiceNone {
		prompt = strings.Replace(h.prompt, "{tools}", string(lines), 1)
		switch rw.choice {
		case choiceRequired:
			prompt += "\n\nYou must call at least one tool in this reply."
		case choiceNamed:
			prompt += "\n\nYou must call the tool \"" + rw.named + "\" in this reply."
		}
		if rw.single {
			prompt += "\n\nCall at most one tool in this reply."
		}
	}
	// Under tool_choice "none" the tools are not described and the reply is
	// text, as a native model's under "none" is. In the tool loop's forced
	// final round (final) a block the model writes anyway (after a history
	// of calls, say) is read as calls, which the loop drops and ends the
	// answer with "length", as it does a native model's; it is never asked
	// again.
	if len(rw.names) == 0 || (rw.choice == choiceNone && !final) {
		rw.names = nil // nothing is parsed back
	}
	m := renderMessages(msgs, prompt)
	var err error
	for _, k := range [...]string{"tools", "tool_choice", "parallel_tool_calls"} {
		if body, err = sjson.DeleteBytes(body, k); err != nil {
			return nil, err
		}
	}
	if body, err = sjson.SetRawBytes(body, "messages", m); err != nil {
		return nil, err
	}
	if h.schema && prompt != "" {
		if body, err = sjson.SetRawBytes(body, "response_format", protocolFormat(gjson.GetBytes(body, "response_format"))); err != nil {
			return nil, err
		}
	}
	rw.body, rw.cap = body, wire.ReadOutputCap(body)
	return rw, nil
}

// describable refuses what a prompted model cannot be offered: a tool of
// another type than function (a custom tool's free-form input has no call
// form here) and the legacy functions list, which an upstream without
// function calling would not take either. Dropped, the client would
// believe it offered them. Unsupported, so that a fallback model with
// native tool calling may take the request. An empty functions list
// offers nothing and passes; any other functions or function_call makes
// the tool loop relay the request without a session (it reads them as
// legacy), where re-asks would not be admitted against the tenant's
// budgets, so they never get that far.
func describable(tools, functions, functionCall gjson.Result) error {
	if pipeline.OffersFunctions(functions) {
		return unsupported("functions", "this model calls tools through the gateway's prompted tool calling, which reads tools, not the legacy functions; send them as tools of type function")
	}
	if functionCall.Type != gjson.Null {
		return unsupported("function_call", "this model calls tools through the gateway's prompted tool calling, which reads tool_choice, not the legacy function_call")
	}
	var err error
	i := 0
	tools.ForEach(func(_, t gjson.Result) bool {
		if t.Get("type").Str != "function" {
			err = unsupported(fmt.Sprintf("tools[%d].type", i), "this model calls tools through the gateway's prompted tool calling, which offers tools of type function only")
			return false
		}
		i++
		return true
	})
	return err
}

func unsupported(param, format string, args ...any) error {
	e := pipeline.BadRequest(param, format, args...)
	e.Code = pipeline.CodeUnsupportedParameter
	return e
}

// readChoice reads tool_choice.
func readChoice(tc gjson.Result) (choiceMode, string) {
	switch {
	case tc.Type == gjson.String && tc.Str == "none":
		return choiceNone, ""
	case tc.Type == gjson.String && tc.Str == "required":
		return choiceRequired, ""
	case tc.IsObject() && tc.Get("type").Str == "function":
		return choiceNamed, tc.Get("function.name").Str
	case tc.IsObject() && tc.Get("type").Str == "allowed_tools" && tc.Get("allowed_tools.mode").Str == "required":
		return choiceRequired, ""
	}
	return choiceAuto, ""
}

// hasToolHistory reports an assistant message with tool calls or a tool
// message in msgs.
func hasToolHistory(msgs gjson.Result) bool {
	found := false
	msgs.ForEach(func(_, m gjson.Result) bool {
		found = m.Get("role").Str == "tool" || m.Get("tool_calls.0").Exists()
		return !found
	})
	return found
}

// renderMessages rebuilds msgs for an upstream without tools: prompt joins
// a leading system (or developer) message or becomes a new first one;
// assistant calls become the block the model writes; each run of tool
// messages becomes one user message of results.
func renderMessages(msgs gjson.Result, prompt string) []byte {
	out := make([]byte, 0, len(msgs.Raw)+len(prompt)+64)
	out = append(out, '[')
	names := map[string]string{} // call id → tool name
	n := 0
	sep := func() {
		if n > 0 {
			out = append(out, ',')
		}
		n++
	}
	var results []byte // pending tool results
	flush := func() {
		if results == nil {
			return
		}
		sep()
		out = append(out, `{"role":"user","content":`...)
		out = jsonstring.Append(out, resultsHead+string(results))
		out = append(out, '}')
		results = nil
	}
	first := true
	msgs.ForEach(func(_, m gjson.Result) bool {
		role := m.Get("role").Str
		if first && prompt != "" {
			first = false
			if c := m.Get("content"); (role == "system" || role == "developer") && (c.Type == gjson.String || c.IsArray()) {
				sep()
				out = append(out, `{"role":`...)
				out = jsonstring.Append(out, role)
				out = append(out, `,"content":`...)
				out = jsonstring.Append(out, wire.ContentText(c)+"\n\n"+prompt)
				out = append(out, '}')
				return true
			}
			sep()
			out = append(out, `{"role":"system","content":`...)
			out = jsonstring.Append(out, prompt)
			out = append(out, '}')
		}
		if role == "tool" {
			id := m.Get("tool_call_id").Str
			name := names[id]
			if name == "" {
				name = "tool"
			}
			results = append(results, "\n\n### "...)
			results = append(results, name...)
			results = append(results, " ("...)
			results = append(results, id...)
			results = append(results, ")\n"...)
			results = append(results, wire.ContentText(m.Get("content"))...)
			return true
		}
		flush()
		sep()
		tcs := m.Get("tool_calls")
		if !tcs.IsArray() || len(tcs.Array()) == 0 {
			out = append(out, m.Raw...)
			return true
		}
		var calls []Call
		tcs.ForEach(func(_, tc gjson.Result) bool {
			name := tc.Get("function.name").Str
			names[tc.Get("id").Str] = name
			calls = append(calls, Call{Name: name, Args: []byte(tc.Get("function.arguments").Str)})
			return true
		})
		text := []byte(wire.ContentText(m.Get("content")))
		if len(text) > 0 {
			text = append(text, "\n\n"...)
		}
		text = AppendBlock(text, calls)
		if role == "" {
			role = "assistant"
		}
		out = append(out, `{"role":`...)
		out = jsonstring.Append(out, role)
		out = append(out, `,"content":`...)
		out = jsonstring.Append(out, string(text))
		out = append(out, '}')
		return true
	})
	flush()
	return append(out, ']')
}

// appendCompact appends JSON src without insignificant space (src as is
// when it does not compact).
func appendCompact(dst []byte, src string) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(src)); err != nil {
		return append(dst, src...)
	}
	return append(dst, b.Bytes()...)
}
