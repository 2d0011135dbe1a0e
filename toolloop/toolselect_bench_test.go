package toolloop

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/toolselect"
	"github.com/tidwall/gjson"
)

// BenchmarkToolSelectNotTriggered measures what configured tool selection
// adds to a request that offers no more than max_tools tools: "on" minus
// "off" is its whole cost (Needed), through the loop's fast path.
func BenchmarkToolSelectNotTriggered(b *testing.B) {
	cfg, err := config.Parse([]byte("[[providers]]\nname = \"p\"\nkind = \"mock\"\n[[models]]\nname = \"gpt-x\"\nprovider = \"p\"\n" +
		"[[models]]\nname = \"picker\"\nprovider = \"p\"\n[middleware.tool_select]\nmodel = \"picker\"\nmax_tools = 20\n"))
	if err != nil {
		b.Fatal(err)
	}
	sel := toolselect.New(toolselect.Options{Config: cfg})
	var tools []string
	for i := range 10 {
		tools = append(tools, `{"type":"function","function":{"name":"tool_`+strconv.Itoa(i)+`","description":"Does thing `+strconv.Itoa(i)+`","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}`)
	}
	history := strings.Repeat(`{"role":"user","content":"an earlier question about the weather"},{"role":"assistant","content":"an earlier answer about the weather"},`, 8)
	resp := &pipeline.Response{Body: []byte(`{}`)}
	h := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return resp, nil })
	for _, tc := range []struct{ name, body string }{
		{"no tools", `{"model":"gpt-x","messages":[` + history + `{"role":"user","content":"hi"}]}`},
		{"10 client tools", `{"model":"gpt-x","messages":[` + history + `{"role":"user","content":"hi"}],"tools":[` + strings.Join(tools, ",") + `]}`},
	} {
		for _, on := range []bool{false, true} {
			name := tc.name + "/off"
			if on {
				name = tc.name + "/on"
			}
			b.Run(name, func(b *testing.B) {
				l := newLoop(b, nil, func(o *Options) {
					if on {
						o.Selector = sel
					}
				})
				req := request(h, false, tc.body)
				// As ingress sets it, from a new body every time: two
				// copies taken in turn, so that no comparison is a pointer's.
				copies := [2][]byte{[]byte(gjson.Get(tc.body, "tools").Raw), []byte(gjson.Get(tc.body, "tools").Raw)}
				ctx := context.Background()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					req.Tools = copies[i%2]
					if len(req.Tools) == 0 {
						req.Tools = nil
					}
					if _, err := l.Chat(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
