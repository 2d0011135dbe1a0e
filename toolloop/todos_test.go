package toolloop

import (
	"context"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// write_todos through the whole tool chain: the schema's checks name the
// field, the executor's rule allows one item in_progress, and a valid list
// comes back normalised.
func TestWriteTodosValidation(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{{Name: "write_todos", Kind: "builtin"}}, nil)
	for _, tc := range []struct {
		name, args string
		field      string // "" = ok
		want       string // the returned list when ok
	}{
		{"plan", `{"todos":[{"content":"a","status":"in_progress"},{"content":"b","status":"pending"}]}`, "",
			`[{"content":"a","status":"in_progress"},{"content":"b","status":"pending"}]`},
		{"empty list", `{"todos":[]}`, "", `[]`},
		{"two in progress", `{"todos":[{"content":"a","status":"in_progress"},{"content":"b","status":"completed"},{"content":"c","status":"in_progress"}]}`, "/todos/2/status", ""},
		{"unknown status", `{"todos":[{"content":"a","status":"done"}]}`, "/todos/0/status", ""},
		{"no content", `{"todos":[{"status":"pending"}]}`, "/todos/0/content", ""},
		{"blank content", `{"todos":[{"content":"  ","status":"pending"}]}`, "/todos/0/content", ""},
		{"extra key", `{"todos":[{"content":"a","status":"pending","priority":1}]}`, "/todos/0/priority", ""},
		{"no list", `{}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c1", Name: "write_todos", Arguments: []byte(tc.args)})
			if err != nil {
				t.Fatal(err)
			}
			r := gjson.ParseBytes(res.Content)
			if tc.want != "" {
				if res.IsError || r.Get("data.todos").Raw != tc.want {
					t.Fatalf("result %s, want the list %s", res.Content, tc.want)
				}
				return
			}
			if !res.IsError || r.Get("error.type").Str != "invalid_arguments" {
				t.Fatalf("result %s, want invalid_arguments", res.Content)
			}
			if tc.field != "" && r.Get("error.field").Str != tc.field {
				t.Fatalf("field %q, want %q (%s)", r.Get("error.field").Str, tc.field, res.Content)
			}
		})
	}
}

// The prompt addition joins a leading system or developer message, or
// comes first as a system message of its own.
func TestWithToolPrompts(t *testing.T) {
	t.Parallel()
	tools := []*tool{{prompt: "P"}, {}}
	for _, tc := range []struct{ name, msgs, want string }{
		{"string system", `[{"role":"system","content":"S"},{"role":"user","content":"u"}]`, `[{"role":"system","content":"S\n\nP"},{"role":"user","content":"u"}]`},
		{"developer parts", `[{"role":"developer","content":[{"type":"text","text":"D"}]},{"role":"user","content":"u"}]`,
			`[{"role":"developer","content":[{"type":"text","text":"D"},{"type":"text","text":"P"}]},{"role":"user","content":"u"}]`},
		{"no system", ` [ {"role":"user","content":"u"} ] `, `[{"role":"system","content":"P"},{"role":"user","content":"u"} ]`},
		{"system later", `[{"role":"user","content":"u"},{"role":"system","content":"S"}]`, `[{"role":"system","content":"P"},{"role":"user","content":"u"},{"role":"system","content":"S"}]`},
		{"empty", `[]`, `[{"role":"system","content":"P"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _, err := withToolPrompts([]byte(tc.msgs), tools)
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s (%v), want %s", got, err, tc.want)
			}
		})
	}
	if got, _, err := withToolPrompts([]byte(`[]`), []*tool{{}}); got != nil || err != nil {
		t.Fatalf("no prompt: %s %v", got, err)
	}
}

// The default prompt names the tool as configured; the system key replaces it.
func TestTodosPromptNamesTheTool(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{
		{Name: "plan", Kind: "builtin", Builtin: "write_todos"},
		{Name: "write_todos", Kind: "builtin", System: "Mine."},
	}, nil)
	p, w := l.static.byName["plan"], l.static.byName["write_todos"]
	if !p.todos || !w.todos || !strings.Contains(p.prompt, "the plan tool") || strings.Contains(p.prompt, "write_todos") || w.prompt != "Mine." {
		t.Fatalf("prompts %q / %q", p.prompt, w.prompt)
	}
}
