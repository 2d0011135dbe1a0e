package gateway

import (
	"testing"

	"github.com/llmgw/gateway/config"
)

// The tool set version changes with anything that changes what a model is
// offered or what a tool does, so that a Redis-backed response cache shared
// by replicas of an older config (a rolling deploy) never serves answers
// made with the old tools.
func TestToolSetVersionCoversToolSettings(t *testing.T) {
	t.Parallel()
	base := func() *config.Config {
		return &config.Config{
			Tools:      []config.Tool{{Name: "calc", Kind: "builtin", Builtin: "calculator", Models: []string{"a*"}}},
			MCPServers: []config.MCPServer{{Name: "fs", Command: "fs-server", Models: []string{"a*"}}},
			OpenAPI:    []config.OpenAPI{{Name: "pets", Spec: "pets.yaml", Models: []string{"a*"}}},
		}
	}
	v0 := toolSetVersion(base())
	if toolSetVersion(base()) != v0 {
		t.Fatal("the version of one config differs")
	}
	for name, mod := range map[string]func(*config.Config){
		"tool models":       func(c *config.Config) { c.Tools[0].Models = []string{"b*"} },
		"tool builtin":      func(c *config.Config) { c.Tools[0].Builtin = "current_time" },
		"tool system":       func(c *config.Config) { c.Tools[0].System = "Plan first." },
		"mcp server models": func(c *config.Config) { c.MCPServers[0].Models = nil },
		"openapi models":    func(c *config.Config) { c.OpenAPI[0].Models = []string{"b*"} },
	} {
		c := base()
		mod(c)
		if toolSetVersion(c) == v0 {
			t.Errorf("%s: the version did not change", name)
		}
	}
}
