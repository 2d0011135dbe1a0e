package toolloop

import (
	"context"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/tidwall/gjson"
)

func TestAccumulator(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		deltas []string
		want   []call
	}{
		{"fragments by index", []string{
			`{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":""}}`,
			`{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}`,
			`{"index":0,"function":{"arguments":"{\"x\""}}`,
			`{"index":0,"function":{"arguments":":1}"}}`},
			[]call{{id: "a", name: "f", args: []byte(`{"x":1}`)}, {id: "b", name: "g", args: []byte(`{}`)}}},
		{"missing index continues, new id starts a call", []string{
			`{"id":"a","function":{"name":"f","arguments":"{"}}`,
			`{"function":{"arguments":"}"}}`,
			`{"id":"b","function":{"name":"g","arguments":"{}"}}`},
			[]call{{id: "a", name: "f", args: []byte(`{}`)}, {id: "b", name: "g", args: []byte(`{}`)}}},
		{"negative index is 0, repeated name not doubled", []string{
			`{"index":-1,"id":"a","function":{"name":"f","arguments":"{"}}`,
			`{"index":0,"function":{"name":"f","arguments":"}"}}`},
			[]call{{id: "a", name: "f", args: []byte(`{}`)}}},
		{"new id at a used index starts a call", []string{
			`{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}`,
			`{"index":0,"id":"b","type":"function","function":{"name":"g","arguments":"{"}}`,
			`{"index":0,"function":{"arguments":"}"}}`,
			`{"index":0,"id":"b","function":{"arguments":""}}`},
			[]call{{id: "a", name: "f", args: []byte(`{"x":1}`)}, {id: "b", name: "g", args: []byte(`{}`)}}},
		{"object arguments", []string{`{"index":0,"id":"a","function":{"name":"f","arguments":{"x":1}}}`},
			[]call{{id: "a", name: "f", args: []byte(`{"x":1}`)}}},
		{"junk ignored", []string{`1`, `"x"`, `null`, `{"index":"zero"}`}, []call{{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var a accumulator
			for _, d := range tc.deltas {
				a.add(gjson.Parse(d))
			}
			if len(a.calls) != len(tc.want) {
				t.Fatalf("calls %d, want %d", len(a.calls), len(tc.want))
			}
			for i, w := range tc.want {
				c := a.calls[i]
				if c.id != w.id || c.name != w.name || string(c.args) != string(w.args) {
					t.Fatalf("call %d = %q %q %q", i, c.id, c.name, c.args)
				}
			}
		})
	}
}

// FuzzAccumulator feeds arbitrary chunk JSON through the accumulator and the
// stream's chunk handler: nothing may panic, and what reaches the client
// must stay valid JSON.
func FuzzAccumulator(f *testing.F) {
	for _, s := range []string{
		chunk("a", callHeader(0, "c", "get_weather"), ""),
		chunk("a", callFrag(3, `{"x":`), ""),
		chunk("a", `{"tool_calls":[{"index":99999999999},{"index":-5,"function":{"arguments":{"a":[1]}}}]}`, ""),
		chunk("a", `{"tool_calls":[1,"x",null,{"function":"f"}]}`, "tool_calls"),
		`{"choices":[{"delta":{"content":"{\"a\":1}"}}],"usage":{"prompt_tokens":"x"}}`,
		`{"choices":"x"}`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	l := newLoop(f, []config.Tool{calcTool}, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		var a accumulator
		gjson.GetBytes(b, "choices.0.delta.tool_calls").ForEach(func(_, e gjson.Result) bool {
			a.add(e)
			return true
		})
		ctx, cancel := context.WithCancel(context.Background())
		st := &loopStream{s: l.newSession(request(nil, true, userBody+`}`), &plan{clientNames: []string{"get_weather"}, set: &toolSet{tools: l.static.tools}}),
			ctx: ctx, cancel: cancel, op: make(chan opResult, 1)}
		defer st.Close()
		if !gjson.ValidBytes(b) {
			return // a provider's stream hands out chunks checked as JSON
		}
		st.onChunk(b)
		st.onChunk(b)
		st.endRound()
		for _, q := range st.queue {
			if ch := st.out[q[0]:q[1]]; !gjson.ValidBytes(ch) {
				t.Fatalf("invalid chunk %s", ch)
			}
		}
	})
}
