package toolloop

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// fakeSource is a ToolSource whose tools the test swaps.
type fakeSource struct {
	mu    sync.Mutex
	v     atomic.Uint64
	tools []config.Tool
}

func (f *fakeSource) set(tools ...config.Tool) {
	f.mu.Lock()
	f.tools = tools
	f.mu.Unlock()
	f.v.Add(1)
}
func (f *fakeSource) Version() uint64 { return f.v.Load() }
func (f *fakeSource) Tools() []config.Tool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tools
}
func (f *fakeSource) Call(ctx context.Context, name string, args []byte) ([]byte, bool, error) {
	switch name {
	case "mcp_fail":
		return []byte("remote says no"), true, nil
	case "mcp_hang": // until the call's context ends
		<-ctx.Done()
		return nil, false, ctx.Err()
	case "mcp_late": // done just as the call's context ends
		<-ctx.Done()
		return []byte("late but done"), false, nil
	}
	return append([]byte(name+":"), args...), false, nil
}

func srcTool(name, params string) config.Tool {
	return config.Tool{Name: name, Kind: "mcp", Parameters: params, Timeout: config.Defaults().ToolLoop.ToolTimeout} // as mcpclient sets it
}

func TestToolSource(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	src.set(srcTool("mcp_echo", `{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}`),
		srcTool("mcp_fail", `{"type":"object"}`), srcTool("bad_schema", `{"type":12}`),
		srcTool("calculator", `{"type":"object"}`))
	l, err := New(Options{Source: src, Tools: []config.Tool{{Name: "calculator", Kind: "builtin"}}})
	if err != nil {
		t.Fatal(err)
	}
	reg := l.registry()
	var names []string
	for _, tl := range reg.tools {
		names = append(names, tl.cfg.Name)
	}
	if strings.Join(names, ",") != "calculator,mcp_echo,mcp_fail" {
		t.Fatalf("registry %v (a bad schema or a clash with a configured tool must be skipped)", names)
	}
	if reg.byName["calculator"].cfg.Kind != "builtin" {
		t.Fatal("the configured tool lost to the dynamic one")
	}
	cases := []struct {
		name, tool, args, want string
		isErr                  bool
	}{
		{name: "ok", tool: "mcp_echo", args: `{"x":1}`, want: `{"status":"ok","data":"mcp_echo:{\"x\":1}"}`},
		{name: "schema checked", tool: "mcp_echo", args: `{"x":"one"}`, want: `"invalid_arguments"`, isErr: true},
		{name: "isError", tool: "mcp_fail", args: `{}`, want: `{"status":"error","error":{"type":"tool_error","message":"remote says no"}}`, isErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: tc.tool, Arguments: []byte(tc.args)})
			if err != nil || res.IsError != tc.isErr || !strings.Contains(string(res.Content), tc.want) {
				t.Fatalf("got %s isErr=%v err=%v", res.Content, res.IsError, err)
			}
		})
	}
	// An unchanged tool keeps its compiled entry; a removed one disappears.
	echo := reg.byName["mcp_echo"]
	src.set(srcTool("mcp_echo", `{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}`))
	reg2 := l.registry()
	if reg2 == reg || reg2.byName["mcp_echo"] != echo || reg2.byName["mcp_fail"] != nil {
		t.Fatalf("refresh: same=%v echo kept=%v fail gone=%v", reg2 == reg, reg2.byName["mcp_echo"] == echo, reg2.byName["mcp_fail"] == nil)
	}
	if l.registry() != reg2 {
		t.Fatal("an unchanged version rebuilt the registry")
	}
}

func BenchmarkRegistryFastPath(b *testing.B) {
	src := &fakeSource{}
	src.set(srcTool("mcp_echo", `{"type":"object"}`))
	l, err := New(Options{Source: src})
	if err != nil {
		b.Fatal(err)
	}
	l.registry()
	b.ReportAllocs()
	for b.Loop() {
		if l.registry() == nil {
			b.Fatal("nil")
		}
	}
}

// A call of a down MCP server's tool (its tools are not offered) is never
// resolved, as a near miss, to another server's tool of a similar name:
// evh_echo ran ev_echo. A near miss within one server's tools still is.
// Prefixes may nest (ev, evh) and a server may have none.
func TestNearMissStaysOnItsServer(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	echo, search := srcTool("ev_echo", `{"type":"object"}`), srcTool("ev_search", `{"type":"object"}`)
	echo.Server, search.Server = "ev", "ev"
	src.set(echo, search) // evh is down: its evh_echo is not offered
	l, err := New(Options{Source: src, ServerPrefixes: map[string]string{"ev": "ev_", "evh": "evh_"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ called, want string }{
		{"evh_echo", `"unknown_tool"`},
		{"EV_ECHO", `ev_echo:{}`},
		{"ev_serch", `ev_search:{}`},
	} {
		res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: tc.called, Arguments: []byte(`{}`)})
		if err != nil || !strings.Contains(string(res.Content), tc.want) {
			t.Errorf("%s: %s, %v; want %s", tc.called, res.Content, err, tc.want)
		}
	}
}

func TestNearMissNestedAndMissingPrefixes(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	evh, b, plain := srcTool("evh_echo", `{"type":"object"}`), srcTool("b_echo", `{"type":"object"}`), srcTool("search", `{"type":"object"}`)
	evh.Server, b.Server, plain.Server = "evh", "b", "c"
	// Names that happen to begin with another server's prefix.
	every, hello := srcTool("everything", `{"type":"object"}`), srcTool("evhello", `{"type":"object"}`)
	every.Server, hello.Server = "c", "ev"
	src.set(evh, b, plain, every, hello) // ev's evh_... and a (no prefix) are down
	l, err := New(Options{Source: src, ServerPrefixes: map[string]string{"ev": "ev", "evh": "evh", "a": "", "b": "b_", "c": ""}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ called, want string }{
		{"ev_echo", `"unknown_tool"`}, // ev's, not evh's
		{"echo", `"unknown_tool"`},    // the unprefixed a's, not b's
		{"evh_ecko", `evh_echo:{}`},
		{"serch", `search:{}`}, // a near miss on an unprefixed server
		{"Everything", `everything:{}`},
		{"everythng", `everything:{}`},
		{"EVHELLO", `evhello:{}`},
	} {
		res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: tc.called, Arguments: []byte(`{}`)})
		if err != nil || !strings.Contains(string(res.Content), tc.want) {
			t.Errorf("%s: %s, %v; want %s", tc.called, res.Content, err, tc.want)
		}
	}
}

// A near miss is a slip in a name, not another word: the edits allowed
// grow with the length of the name's own part (after its server's
// prefix), so a short name a letter off another tool's (bad_lie and
// bad_die, bad_pig and bad_pid) is an unknown tool, never a call of the
// other, which may do something else entirely.
func TestNearMissShortNamesAreUnknown(t *testing.T) {
	t.Parallel()
	src := &fakeSource{}
	var tools []config.Tool
	for _, n := range []string{"bad_die", "bad_pid", "bad_hang", "bad_delete_file", "bad_weather"} {
		tl := srcTool(n, `{"type":"object"}`)
		tl.Server = "bad"
		tools = append(tools, tl)
	}
	src.set(tools...)
	l, err := New(Options{Source: src, ServerPrefixes: map[string]string{"bad": "bad_"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ called, want string }{
		{"bad_lie", `"unknown_tool"`},
		{"bad_pig", `"unknown_tool"`},
		{"bad_hand", `"unknown_tool"`},
		{"BAD_DIE", `bad_die:{}`},                 // another case is the same name
		{"bad_wether", `bad_weather:{}`},          // one edit in a 7-byte name
		{"bad_delete_fiel", `bad_delete_file:{}`}, // two in an 11-byte one
		{"bad_wethr", `"unknown_tool"`},
		{"bad_waether", `bad_weather:{}`}, // two letters swapped: one edit           // two in a 7-byte one
	} {
		res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: tc.called, Arguments: []byte(`{}`)})
		if err != nil || !strings.Contains(string(res.Content), tc.want) {
			t.Errorf("%s: %s, %v; want %s", tc.called, res.Content, err, tc.want)
		}
	}
}
