package config

import "fmt"

// ToolSelectFor returns the tool selection settings of requests to model m:
// [middleware.tool_select] (defaults applied) with every key m's own
// [models.tool_select] sets replacing the global one. ok is false when
// selection is off for m (no selector model, or enabled = false).
func (c *Config) ToolSelectFor(m *Model) (ts ToolSelect, ok bool) {
	ts = c.Middleware.ToolSelect
	ts.AlwaysInclude = append([]string(nil), ts.AlwaysInclude...)
	if o := m.ToolSelect; o != nil {
		if o.Model != "" {
			ts.Model = o.Model
		}
		if o.MaxTools != 0 {
			ts.MaxTools = o.MaxTools
		}
		if o.MinTools != 0 {
			ts.MinTools = o.MinTools
		}
		if o.AlwaysInclude != nil {
			ts.AlwaysInclude = append([]string(nil), o.AlwaysInclude...)
		}
		if o.Enabled != nil {
			ts.Enabled = o.Enabled
		}
	}
	return ts, ts.Model != "" && (ts.Enabled == nil || *ts.Enabled)
}

// validateToolSelect checks [middleware.tool_select] and every model's
// table, and the settings each model ends up with.
func (c *Config) validateToolSelect(p *problems, o *origin, models map[string]bool) {
	check := func(at string, ts *ToolSelect) {
		if ts.Model != "" && !models[ts.Model] {
			p.add(at+".model", "%s", c.unknownModel(ts.Model))
		}
		if ts.MaxTools < 0 {
			p.add(at+".max_tools", "must be at least 1")
		}
		if ts.MinTools < 0 {
			p.add(at+".min_tools", "must be at least 1")
		}
		for j, n := range ts.AlwaysInclude {
			if !toolName.MatchString(n) {
				p.add(fmt.Sprintf("%s.always_include[%d]", at, j), "%q must match [a-zA-Z0-9_-]{1,64}", n)
			}
		}
	}
	check("middleware.tool_select", &c.Middleware.ToolSelect)
	globalReported := false
	for i := range c.Models {
		m := &c.Models[i]
		at := fmt.Sprintf("models[%d].tool_select", o.model(i))
		if m.ToolSelect != nil {
			check(at, m.ToolSelect)
		} else if globalReported {
			continue
		} else {
			at = "middleware.tool_select"
		}
		if ts, on := c.ToolSelectFor(m); on && ts.MaxTools > 0 && ts.MinTools > ts.MaxTools {
			p.add(at+".min_tools", "%d is more than max_tools (%d)", ts.MinTools, ts.MaxTools)
			globalReported = globalReported || m.ToolSelect == nil
		}
	}
}
