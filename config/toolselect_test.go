package config

import (
	"slices"
	"testing"
)

// A model's [models.tool_select] replaces the keys it sets; the rest come
// from [middleware.tool_select], then the defaults; enabled = false or no
// selector model turns selection off.
func TestToolSelectFor(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(validBase + `
[[models]]
name = "own"
provider = "p"
[models.tool_select]
max_tools = 8
always_include = ["x"]
[[models]]
name = "off"
provider = "p"
[models.tool_select]
enabled = false
[middleware.tool_select]
model = "m"
min_tools = 2
always_include = ["a", "b"]
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model    int
		on       bool
		max, min int
		always   []string
	}{
		{model: 0, on: true, max: DefaultSelectMaxTools, min: 2, always: []string{"a", "b"}},
		{model: 1, on: true, max: 8, min: 2, always: []string{"x"}},
		{model: 2, on: false, max: DefaultSelectMaxTools, min: 2, always: []string{"a", "b"}},
	}
	for _, tc := range tests {
		m := &c.Models[tc.model]
		ts, on := c.ToolSelectFor(m)
		if on != tc.on || ts.Model != "m" || ts.MaxTools != tc.max || ts.MinTools != tc.min || !slices.Equal(ts.AlwaysInclude, tc.always) {
			t.Errorf("%s: %+v on=%v", m.Name, ts, on)
		}
	}
	if _, on := (&Config{}).ToolSelectFor(&Model{Name: "n"}); on { // nothing set, not even defaults
		t.Error("on without a selector model")
	}
}
