package mockllm

import (
	"strings"

	"github.com/tidwall/gjson"
)

// demoPrompted makes the demo model speak the gateway's prompted tool
// protocol (a model with tool_calling = "prompted"): when no tools are
// offered natively but the system prompt lists them with the ```tool_calls
// format, it reads the tool names from the prompt and the results from a
// "Tool results:" message, answers as DemoResponder would, and writes its
// calls as that block. ok is false when the request is not prompted.
func demoPrompted(c *Call) (t Turn, ok bool) {
	if len(c.Tools) > 0 {
		return Turn{}, false
	}
	sys := gjson.GetBytes(c.Body, "messages.0")
	prompt := sys.Get("content").Str
	if sys.Get("role").Str != "system" && sys.Get("role").Str != "developer" || !strings.Contains(prompt, "```tool_calls") {
		return Turn{}, false
	}
	as := *c
	for _, line := range strings.Split(prompt, "\n") {
		if n := gjson.Get(line, "name"); strings.HasPrefix(line, `{"name":`) && n.Type == gjson.String {
			as.Tools = append(as.Tools, n.Str)
		}
	}
	if rest, ok := strings.CutPrefix(c.LastText, "Tool results:"); ok {
		as.LastRole, as.ToolResults = "tool", []string{strings.TrimSpace(rest)}
	}
	t = DemoResponder(&as)
	if len(t.ToolCalls) == 0 {
		return t, true
	}
	block := "```tool_calls\n["
	for i, tc := range t.ToolCalls {
		if i > 0 {
			block += ", "
		}
		block += `{"name": "` + tc.Name + `", "arguments": ` + tc.Arguments + "}"
	}
	return Turn{Text: "Let me use a tool.\n" + block + "]\n```"}, true
}
