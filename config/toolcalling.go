package config

import (
	"strconv"
	"strings"
)

// The tool-calling keys of [[models]]: how a model that cannot call tools
// natively is made to (toolprompt).
//
//	tool_calling   = "native" | "prompted"   default native
//	prompted_format = "fenced" | "json_schema" default fenced
//	tool_prompt    = "... {tools} ..."         default the format's prompt

func (c *Config) setToolCallingDefaults() {
	for i := range c.Models {
		m := &c.Models[i]
		setStr(&m.ToolCalling, "native")
		setStr(&m.PromptedFormat, "fenced")
	}
}

func (c *Config) validateToolCalling(p *problems, o *origin) {
	for i, m := range c.Models {
		at := "models[" + strconv.Itoa(o.model(i)) + "]"
		p.checkEnum(at+".tool_calling", m.ToolCalling, "native", "prompted")
		p.checkEnum(at+".prompted_format", m.PromptedFormat, "fenced", "json_schema")
		if m.ToolPrompt != "" && !strings.Contains(m.ToolPrompt, "{tools}") {
			p.add(at+".tool_prompt", "must contain {tools}, where the tool list goes")
		}
		if m.ToolCalling != "prompted" && (m.ToolPrompt != "" || m.PromptedFormat != "fenced") {
			p.add(at+".tool_calling", `prompted_format and tool_prompt need tool_calling = "prompted"`)
		}
	}
}
