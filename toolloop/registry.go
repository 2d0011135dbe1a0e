package toolloop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// executor runs one tool. It returns the tool's output (JSON or text) or an
// error, preferably a *ToolError. Safe for concurrent use.
type executor interface {
	run(ctx context.Context, c *pipeline.ToolCall) ([]byte, error)
}

type execFunc func(ctx context.Context, c *pipeline.ToolCall) ([]byte, error)

func (f execFunc) run(ctx context.Context, c *pipeline.ToolCall) ([]byte, error) { return f(ctx, c) }

// tool is one configured server tool, built once in New. Immutable.
type tool struct {
	cfg     config.Tool
	def     []byte // {"type":"function","function":{...}}, injected into requests
	schema  *jsonschema.Schema
	exec    executor
	timeout time.Duration
	sem     chan struct{} // nil = unlimited concurrency
	prompt  string        // added to the system prompt of requests offered the tool (write_todos)
	todos   bool          // the write_todos builtin: its results are the request's x_gateway.todos
	// inProcess: a builtin without a concurrency limit, which runs in
	// microseconds and never blocks, so no timer bounds it (timeoutMW).
	inProcess bool
	// sized: the executor reports the size of an output it cut (an http
	// tool), so capMW hands it an outputSize.
	sized   bool
	metrics toolMetrics
}

// registry holds the server tools by name: the configured ones, plus the
// tools of the ToolSource at version. Immutable once published, except for
// the byModel cache.
type registry struct {
	tools   []*tool
	byName  map[string]*tool
	version uint64

	byModel      sync.Map // model name → []*tool (model globs applied)
	byModelCount atomic.Int32
}

// appliesTo reports whether t is offered for model (tool.models globs).
func (t *tool) appliesTo(model string) bool {
	if len(t.cfg.Models) == 0 {
		return true
	}
	for _, g := range t.cfg.Models {
		if ok, _ := path.Match(g, model); ok {
			return true
		}
	}
	return false
}

func buildRegistry(opts *Options, hc httpDoer) (*registry, error) {
	r := &registry{byName: make(map[string]*tool, len(opts.Tools))}
	for i, tc := range opts.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		if tc.Name == "" {
			return nil, fmt.Errorf("%s.name: required", at)
		}
		if r.byName[tc.Name] != nil {
			return nil, fmt.Errorf("%s.name: %q is defined twice", at, tc.Name)
		}
		var (
			exec   executor
			params = tc.Parameters
			prompt string
		)
		switch tc.Kind {
		case "builtin":
			name := tc.Builtin
			if name == "" {
				name = tc.Name
			}
			b, ok := builtins[name]
			if !ok {
				return nil, fmt.Errorf("%s.builtin: unknown builtin %q (have current_time, calculator, write_todos)", at, name)
			}
			exec = b.exec
			tc.Repeatable = b.pure
			switch prompt = b.prompt; {
			case prompt != "" && tc.System != "":
				prompt = tc.System
			case prompt != "" && tc.Name != name:
				prompt = strings.ReplaceAll(prompt, name, tc.Name) // the default names the tool as the model sees it
			}
			if params == "" {
				params = b.params
			}
			if tc.Description == "" {
				tc.Description = b.description
			}
		case "http":
			if tc.URL == "" {
				return nil, fmt.Errorf("%s.url: required for kind http", at)
			}
			exec = &httpTool{url: tc.URL, headers: tc.Headers, client: hc, maxBytes: readCap(opts.Loop.MaxResultBytes)}
		case "agent":
			if tc.Model == "" {
				return nil, fmt.Errorf("%s.model: required for kind agent", at)
			}
			exec = &agentTool{name: tc.Name, model: tc.Model, system: tc.System, lookup: opts.Lookup, admit: opts.Admit, log: opts.Logger, max: opts.RoundMax}
			if params == "" {
				params = agentParams
			}
		default:
			return nil, fmt.Errorf("%s.kind: %q is not supported here (builtin, http, agent; MCP tools come from [[mcp_servers]])", at, tc.Kind)
		}
		t, err := newTool(tc, params, exec, opts)
		if err != nil {
			return nil, fmt.Errorf("%s.parameters: %w", at, err)
		}
		t.prompt = prompt
		// A builtin with a concurrency limit may wait for its slot: the
		// timeout bounds that wait.
		t.inProcess, t.sized = tc.Kind == "builtin" && t.sem == nil, tc.Kind == "http"
		t.todos = tc.Kind == "builtin" && (tc.Builtin == todosBuiltin || tc.Builtin == "" && tc.Name == todosBuiltin)
		r.tools = append(r.tools, t)
		r.byName[tc.Name] = t
	}
	return r, nil
}

// newTool compiles params and serialises the definition once.
func newTool(tc config.Tool, params string, exec executor, opts *Options) (*tool, error) {
	t := &tool{cfg: tc, exec: exec, timeout: tc.Timeout.D()} // config defaults it to tool_loop.tool_timeout
	if tc.Concurrency > 0 {
		t.sem = make(chan struct{}, tc.Concurrency)
	}
	if params == "" {
		params = `{"type":"object","properties":{}}`
	}
	sch, err := compileSchema(params)
	if err != nil {
		return nil, err
	}
	t.schema = sch
	if t.def, err = toolDef(tc.Name, tc.Description, params); err != nil {
		return nil, err
	}
	return t, nil
}

// maskSchema returns a tool's parameter schema with the configured secrets
// masked in its strings. Masked as text when that keeps it JSON (nearly
// always: a secret is a token inside a string); otherwise (a secret spelt
// as a number, or with escapes) every decoded string is masked and the
// schema encoded again.
func maskSchema(params string) string {
	masked := string(observe.Secrets.RedactSecrets([]byte(params)))
	if masked == params && !strings.Contains(params, `\u`) {
		return params
	}
	if masked != params && jsonvalid.String(masked) {
		return masked
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(params))
	dec.UseNumber() // a number as written, to be compared with a secret
	if err := dec.Decode(&v); err != nil {
		return masked // not JSON: jsonCompact refuses it either way
	}
	out, err := json.Marshal(maskStrings(v))
	if err != nil {
		return masked
	}
	return string(out)
}

// maskStrings masks the configured secrets in every string of v (decoded
// JSON), keys included.
func maskStrings(v any) any {
	switch x := v.(type) {
	case string:
		return string(observe.Secrets.RedactSecrets([]byte(x)))
	case []any:
		for i := range x {
			x[i] = maskStrings(x[i])
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[string(observe.Secrets.RedactSecrets([]byte(k)))] = maskStrings(e)
		}
		return out
	case json.Number:
		if string(observe.Secrets.RedactSecrets([]byte(x))) != string(x) {
			return observe.Mask
		}
	}
	return v
}

// readCap bounds what an http tool reads: enough to truncate with a note.
func readCap(maxResult int) int64 {
	if maxResult <= 0 {
		return 4 << 20
	}
	return int64(maxResult)*4 + 1024
}

func compileSchema(params string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	// Schemas may come from MCP servers: never let a $ref read local files
	// or block on one. Only the document itself is compiled.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource("tool.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("tool.json")
}

// toolDef serialises the OpenAI tool definition once.
func toolDef(name, desc, params string) ([]byte, error) {
	// What the model is shown of a tool is masked as its results are: an
	// MCP server's listing may spell a secret the config gives it (its env).
	desc = string(observe.Secrets.RedactSecrets([]byte(desc)))
	params = maskSchema(params)
	var buf bytes.Buffer
	buf.WriteString(`{"type":"function","function":{"name":`)
	buf.Write(appendJSONString(nil, []byte(name)))
	if desc != "" {
		buf.WriteString(`,"description":`)
		buf.Write(appendJSONString(nil, []byte(desc)))
	}
	buf.WriteString(`,"parameters":`)
	var compact bytes.Buffer
	if err := jsonCompact(&compact, []byte(params)); err != nil {
		return nil, err
	}
	buf.Write(compact.Bytes())
	buf.WriteString(`}}`)
	return buf.Bytes(), nil
}
