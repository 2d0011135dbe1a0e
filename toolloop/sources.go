package toolloop

import (
	"context"

	"github.com/llmgw/gateway/config"
)

// JoinSources offers the tools of several sources as one (MCP servers and
// OpenAPI specs). Nil sources are skipped; it returns nil when none is left,
// and the one source when one is.
func JoinSources(srcs ...ToolSource) ToolSource {
	var j joined
	for _, s := range srcs {
		if s != nil {
			j = append(j, s)
		}
	}
	switch len(j) {
	case 0:
		return nil
	case 1:
		return j[0]
	}
	return j
}

type joined []ToolSource

// Version changes when any source's does.
func (j joined) Version() uint64 {
	var v uint64
	for _, s := range j {
		v = v*1_000_003 + s.Version()
	}
	return v
}

func (j joined) Tools() []config.Tool {
	var out []config.Tool
	for _, s := range j {
		out = append(out, s.Tools()...)
	}
	return out
}

// Call asks the first source that lists name.
func (j joined) Call(ctx context.Context, name string, args []byte) ([]byte, bool, error) {
	for _, s := range j {
		for _, t := range s.Tools() {
			if t.Name == name {
				return s.Call(ctx, name, args)
			}
		}
	}
	return []byte("unknown tool " + name), true, nil
}
