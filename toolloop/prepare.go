package toolloop

import (
	"bytes"
	"slices"
	"strings"

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// choiceMode is the request's tool_choice as far as the loop cares.
type choiceMode uint8

const (
	choiceAuto     choiceMode = iota // auto, absent, a named client tool, custom
	choiceRequired                   // "required", allowed_tools mode required, or a named server tool, that no client tool meets
	// choiceClientRequired is "required", or allowed_tools in required
	// mode, when the client offers a tool that meets it. The client then
	// expects a call of one of its own tools (the Vercel AI SDK throws
	// ToolChoiceViolationError on an answer without one), and a server call
	// does not meet the choice: the loop goes on, with the client's
	// tool_choice in every round, the final one included (which offers
	// only the client's tools: plan.finalTools), until the model calls a
	// client tool or answers.
	choiceClientRequired
)

// plan is the per-request result of prepare. Immutable after prepare.
type plan struct {
	set         *toolSet
	body        []byte // the request body with server tools injected (and include_usage for streams)
	messages    []byte // the original messages array, raw
	clientNames []string
	choice      choiceMode
	todos       bool       // write_todos is offered
	prepended   int        // messages put in front of the client's (a system message for the tools' prompts)
	sel         *selection // what tool selection did; nil = it did not run
	// structured: response_format asks for JSON (json_object or
	// json_schema), so the answer's content must be the structured text
	// alone: the text of a round whose server calls run is not shown.
	structured bool
	// Under choiceClientRequired, what the final round offers instead of
	// the whole tool set: the client's tools alone (finalTools, a JSON
	// array), and, for an allowed_tools choice, that choice narrowed to
	// them (finalChoice; nil = the client's tool_choice as it is). Server
	// calls of a final round are never run, so only a client call can
	// meet the required choice there.
	finalTools, finalChoice []byte
}

// prepare decides whether the loop runs and builds the upstream body.
// offered are the server tools req's model and tenant may use (model
// scope, tenant policy), tools those of them left for this request (tool
// selection). It returns nil, nil for the fast path (tool_choice none,
// n > 1, or no server tool left after allowed_tools).
func (l *Loop) prepare(req *pipeline.Request, offered, tools []*tool) (*plan, error) {
	// One pass over the body's keys (the first of a name counts, as for a
	// path); the values are views into req.Body, which no one writes.
	var tc, clientTools, msgs, n, rf gjson.Result
	legacy := false
	view(req.Body).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "functions":
			// An empty list offers nothing: not legacy, so that the
			// request gets a session (a prompted model's re-asks are
			// admitted there).
			legacy = legacy || pipeline.OffersFunctions(v)
		case "function_call":
			legacy = legacy || v.Type != gjson.Null
		case "tool_choice":
			keepFirst(&tc, v)
		case "tools":
			keepFirst(&clientTools, v)
		case "messages":
			keepFirst(&msgs, v)
		case "n":
			keepFirst(&n, v)
		case "response_format":
			keepFirst(&rf, v)
		}
		return true
	})
	if n.Exists() && n.Int() > 1 {
		// Several choices: the loop follows one; offer no server tools.
		return nil, unservedChoice(tc, clientTools, offered, "a request with n > 1")
	}
	if legacy || offersNonFunction(clientTools) {
		// The deprecated functions, or a tool that is not a function (a
		// custom free-form tool, a provider's own such as a web search):
		// the loop reads and re-streams function tool calls only, so such
		// a request is relayed as the upstream answers it, with no server
		// tool offered, rather than its calls lost or run as unknown
		// server tools.
		return nil, unservedChoice(tc, clientTools, offered, "a request with functions or a tool that is not a function")
	}
	if err := unknownChoice(tc, clientTools, offered, l.mayBeDown); err != nil {
		return nil, err
	}
	p := &plan{messages: []byte(msgs.Raw)}
	if t := rf.Get("type"); rf.IsObject() && t.Type == gjson.String {
		p.structured = t.Str == "json_object" || t.Str == "json_schema"
	}
	if !msgs.IsArray() {
		return nil, pipeline.BadRequest("messages", "messages must be an array")
	}
	var run bool
	if p.choice, tools, run = toolChoice(tc, tools); !run {
		return nil, nil
	}
	p.set = &toolSet{tools: tools}
	for _, t := range tools {
		p.todos = p.todos || t.todos
	}
	clientTools, err := p.readClientTools(req, offered, clientTools)
	if err != nil {
		return nil, err
	}
	if p.choice == choiceRequired && p.clientMeets(tc) {
		p.choice = choiceClientRequired
		if p.finalTools, p.finalChoice, err = p.clientOnly(tc, clientTools); err != nil {
			return nil, err
		}
	}
	if p.body, err = p.upstreamBody(req, clientTools, tools); err != nil {
		return nil, err
	}
	return p, nil
}

// unservedChoice is the 400 for a tool_choice that names a server tool
// (as the function to call, or among allowed_tools) in a request the loop
// does not serve, which goes upstream without the server tools (what):
// relayed, it named a tool the request no longer offers, which the
// provider refuses in terms of a tool the client never defined. nil when
// it names none, or only tools the client defines itself (a stand-in of
// the same name: the client's tool, relayed as it is).
func unservedChoice(tc, clientTools gjson.Result, offered []*tool, what string) error {
	if !tc.IsObject() {
		return nil
	}
	names := []string{tc.Get("function.name").Str}
	tc.Get("allowed_tools.tools").ForEach(func(_, v gjson.Result) bool {
		names = append(names, v.Get("function.name").Str)
		return true
	})
	for _, name := range names {
		for _, t := range offered {
			if name != "" && t.cfg.Name == name && !definesFunction(clientTools, name) {
				return pipeline.BadRequest("tool_choice", "tool_choice names %q, a tool the gateway runs, which %s cannot use", name, what)
			}
		}
	}
	return nil
}

// unknownChoice is the 400 for a tool_choice naming a function that is
// neither one of the client's tools nor a server tool offered to the
// request (one its tenant may not use, or none at all): relayed, the
// provider refused it in terms of a request whose tools the loop had
// rewritten (OpenAI: the named function must be among tools). A name
// mayBeDown says may be a tool of an MCP server that is down goes on as
// before: a down server only hides its tools, and no 400 blames the client
// for it.
func unknownChoice(tc, clientTools gjson.Result, offered []*tool, mayBeDown func(string) bool) error {
	if !tc.IsObject() || tc.Get("type").Str != "function" {
		return nil
	}
	name := tc.Get("function.name")
	if name.Type != gjson.String {
		return nil // not a named function: the provider judges it
	}
	for _, t := range offered {
		if t.cfg.Name == name.Str {
			return nil
		}
	}
	if definesFunction(clientTools, name.Str) || mayBeDown(name.Str) {
		return nil
	}
	return pipeline.BadRequest("tool_choice", "Invalid value for 'tool_choice': no function named %q is among the request's tools.", truncateRaw(name.Str, 64))
}

// definesFunction reports whether the client's tools define a function
// named name.
func definesFunction(clientTools gjson.Result, name string) bool {
	found := false
	clientTools.ForEach(func(_, t gjson.Result) bool {
		found = t.Get("function.name").Str == name
		return !found
	})
	return found
}

// mayBeDown reports whether name may be a tool of an MCP server that is
// down or not listed yet: no tool of that name, configured or listed now
// (the registry holds both; a listed one the request is not offered is
// its tenant's to refuse), and it carries a configured server's prefix, or
// a server without a prefix could have it.
func (l *Loop) mayBeDown(name string) bool {
	if l.opts.Source == nil || l.registry().byName[name] != nil {
		return false
	}
	for _, p := range l.opts.ServerPrefixes {
		if p == "" || strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// offersNonFunction reports whether the client's tools include one whose
// type is not "function": a custom one (called with free-form input
// instead of JSON arguments) or a provider's own (OpenRouter's and Groq's
// web search). A tool without a type is taken for a function.
func offersNonFunction(clientTools gjson.Result) bool {
	other := false
	if clientTools.IsArray() {
		clientTools.ForEach(func(_, v gjson.Result) bool {
			t := v.Get("type")
			other = t.Exists() && t.Str != "function"
			return !other
		})
	}
	return other
}

// toolChoice reads tool_choice tc: the loop's choice mode and the server
// tools it leaves (allowed_tools narrows them), or run false for the fast
// path (tool_choice none, or allowed_tools that keeps no server tool).
func toolChoice(tc gjson.Result, tools []*tool) (_ choiceMode, _ []*tool, run bool) {
	switch {
	case tc.Type == gjson.String:
		switch tc.Str {
		case "none":
			return choiceAuto, nil, false
		case "required":
			return choiceRequired, tools, true
		}
	case tc.IsObject():
		switch tc.Get("type").String() {
		case "function":
			name := tc.Get("function.name").String()
			for _, t := range tools {
				if t.cfg.Name == name {
					return choiceRequired, tools, true
				}
			}
		case "allowed_tools":
			return allowedTools(tc, tools)
		}
	}
	return choiceAuto, tools, true
}

// allowedTools is toolChoice for tool_choice {"type":"allowed_tools"}.
func allowedTools(tc gjson.Result, tools []*tool) (_ choiceMode, _ []*tool, run bool) {
	allowed := map[string]bool{}
	tc.Get("allowed_tools.tools").ForEach(func(_, v gjson.Result) bool {
		allowed[v.Get("function.name").String()] = true
		if v.Get("custom.name").Exists() {
			allowed[v.Get("custom.name").String()] = true
		}
		return true
	})
	var kept []*tool
	for _, t := range tools {
		if allowed[t.cfg.Name] {
			kept = append(kept, t)
		}
	}
	if len(kept) == 0 {
		return choiceAuto, nil, false
	}
	if tc.Get("allowed_tools.mode").String() == "required" {
		return choiceRequired, kept, true
	}
	return choiceAuto, kept, true
}

// clientMeets reports whether a call of one of the client's tools meets
// the required tool_choice tc: "required" with a client tool offered, or
// allowed_tools in required mode that names one. A named tool is a server
// tool here (toolChoice), which no client call meets.
func (p *plan) clientMeets(tc gjson.Result) bool {
	if len(p.clientNames) == 0 {
		return false
	}
	if tc.Type == gjson.String {
		return tc.Str == "required"
	}
	if tc.Get("type").Str != "allowed_tools" {
		return false
	}
	meets := false
	tc.Get("allowed_tools.tools").ForEach(func(_, v gjson.Result) bool {
		meets = slices.Contains(p.clientNames, toolName(v))
		return !meets
	})
	return meets
}

// clientOnly returns what the final round of a choiceClientRequired plan
// offers: the client's tools as the upstream gets them, and an
// allowed_tools choice tc cut down to the client's names (nil for
// "required", which stays as it is). An allowed_tools list that named a
// server tool the final round no longer offers would be the upstream's 400.
func (p *plan) clientOnly(tc, clientTools gjson.Result) (tools, choice []byte, err error) {
	tools = []byte(clientTools.Raw)
	if tc.Type == gjson.String {
		return tools, nil, nil
	}
	kept := []byte{'['}
	tc.Get("allowed_tools.tools").ForEach(func(_, v gjson.Result) bool {
		if p.isClient(toolName(v)) {
			if len(kept) > 1 {
				kept = append(kept, ',')
			}
			kept = append(kept, v.Raw...)
		}
		return true
	})
	if choice, err = sjson.SetRawBytes([]byte(tc.Raw), "allowed_tools.tools", append(kept, ']')); err != nil {
		return nil, nil, pipeline.BadRequest("tool_choice", "tool_choice could not be read")
	}
	return tools, choice, nil
}

// readClientTools records the client's tool names and returns its tools
// as the upstream gets them: without the stand-ins a client offers for a
// gated server tool (approval.go). Any other name clash with a server tool
// offered to req (offered: its model's and tenant's) is the client's
// error. A server tool not offered to req is none of its business: a
// client tool of that name is the client's own (LangChain's deepagents
// define a write_todos of their own), its calls go back to the client
// (classify), and the refusal would tell the tenant that the tool exists.
func (p *plan) readClientTools(req *pipeline.Request, offered []*tool, clientTools gjson.Result) (gjson.Result, error) {
	if clientTools.Type == gjson.Null {
		return gjson.Result{}, nil // no tools, as OpenAI takes it (absent or null)
	}
	if !clientTools.IsArray() {
		return clientTools, pipeline.BadRequest("tools", "tools must be an array")
	}
	var clash string
	standIns := false
	clientTools.ForEach(func(_, v gjson.Result) bool {
		name := toolName(v)
		if t := offeredTool(offered, name); t != nil {
			if needsApproval(req, t) {
				standIns = true
				return true
			}
			clash = name
			return false
		}
		p.clientNames = append(p.clientNames, name)
		return true
	})
	if clash != "" {
		return clientTools, pipeline.BadRequest("tools", "the tool name %q is reserved by a server-side tool of this gateway; rename your tool", clash)
	}
	if standIns {
		clientTools = withoutStandIns(req, offered, clientTools)
	}
	return clientTools, nil
}

// upstreamBody is the request body the loop sends upstream: the tools'
// prompts in the messages (p.messages follows), the server tools after the
// client's, and include_usage for a stream.
func (p *plan) upstreamBody(req *pipeline.Request, clientTools gjson.Result, tools []*tool) ([]byte, error) {
	body := req.Body
	if m, prepended, err := withToolPrompts(p.messages, tools); err != nil {
		return nil, pipeline.BadRequest("messages", "messages could not be extended")
	} else if m != nil {
		p.messages = m
		if prepended {
			p.prepended = 1
		}
		if body, err = sjson.SetRawBytes(body, "messages", m); err != nil {
			return nil, pipeline.BadRequest("messages", "messages could not be extended")
		}
	}
	if len(tools) > 0 {
		var err error
		if body, err = injectTools(body, clientTools, tools); err != nil {
			return nil, err
		}
	}
	if req.Stream {
		// Usage of every round is needed for the summed usage chunk; the
		// upstream usage chunks are never forwarded.
		var err error
		if body, err = sjson.SetBytes(body, "stream_options.include_usage", true); err != nil {
			return nil, pipeline.BadRequest("stream_options", "stream_options must be an object")
		}
	}
	return body, nil
}

// injectTools appends the server tools' pre-serialised definitions to the
// client's tools, in one edit.
func injectTools(reqBody []byte, clientTools gjson.Result, tools []*tool) ([]byte, error) {
	arr := make([]byte, 0, len(clientTools.Raw)+256*len(tools))
	if clientTools.IsArray() {
		raw := bytes.TrimRight([]byte(clientTools.Raw), " \t\r\n")
		arr = append(arr, raw[:len(raw)-1]...) // without ']'
		if len(bytes.TrimSpace(arr[1:])) > 0 {
			arr = append(arr, ',')
		}
	} else {
		arr = append(arr, '[')
	}
	for i, t := range tools {
		if i > 0 {
			arr = append(arr, ',')
		}
		arr = append(arr, t.def...)
	}
	arr = append(arr, ']')
	body, err := sjson.SetRawBytes(reqBody, "tools", arr)
	if err != nil {
		return nil, pipeline.BadRequest("tools", "tools could not be extended")
	}
	return body, nil
}

// offeredTool returns the tool of offered named name (exactly), or nil.
func offeredTool(offered []*tool, name string) *tool {
	for _, t := range offered {
		if t.cfg.Name == name {
			return t
		}
	}
	return nil
}

func (p *plan) isClient(name string) bool {
	for _, n := range p.clientNames {
		if n == name {
			return true
		}
	}
	return false
}

// clientNear is the client's tool name a call's name is a slip of
// (another case, or a unique near miss, as a server tool's is resolved),
// or "".
func (p *plan) clientNear(name string) string {
	if i := nearest(len(p.clientNames), func(i int) string { return p.clientNames[i] }, name, len(name)); i >= 0 {
		return p.clientNames[i]
	}
	return ""
}
