package wiretest

import (
	"fmt"
	"strings"
	"testing"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func TestCheckStreamAll(t *testing.T) {
	t.Parallel()
	schema := LoadSchema(t)
	nullFingerprint := strings.Replace(text, `"model":"m"`, `"model":"m","system_fingerprint":null`, 1)
	tests := []struct {
		name      string
		raw       []byte
		opt       Options
		schema    *Schema
		wantFatal []string // substrings of the failure; nil = must pass
	}{
		{name: "valid with schema", raw: readFile(t, "tool_calls_usage.sse"), opt: Options{WantUsage: true}, schema: schema},
		{name: "valid without schema", raw: frame(role, text, stop, doneEv), schema: nil},
		{name: "valid error stream", raw: frame(role, "RAW:event: error\ndata: "+errorEnv+"\n\n"), opt: Options{WantError: true}, schema: schema},
		{name: "rule violation shows excerpt", raw: frame(role, text, text, ch(d(`{"role":"assistant"}`)), stop, doneEv), schema: schema,
			wantFatal: []string{"chunk 4", "role repeated", ">    7 | data: "}},
		{name: "schema violation names chunk", raw: frame(role, nullFingerprint, stop, doneEv), schema: schema,
			wantFatal: []string{"chunk 2 does not match the schema", "system_fingerprint"}},
		{name: "schema ignored when nil", raw: frame(role, nullFingerprint, stop, doneEv), schema: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeTB{TB: t}
			var sum *Summary
			f.run(func(tb testing.TB) { sum = CheckStreamAll(tb, tt.raw, tt.opt, tt.schema) })
			if tt.wantFatal == nil {
				if f.fatal != "" || sum == nil {
					t.Fatalf("valid stream failed: %s", f.fatal)
				}
				return
			}
			if f.fatal == "" {
				t.Fatal("invalid stream passed")
			}
			for _, w := range tt.wantFatal {
				if !strings.Contains(f.fatal, w) {
					t.Errorf("failure message lacks %q:\n%s", w, f.fatal)
				}
			}
		})
	}
}
