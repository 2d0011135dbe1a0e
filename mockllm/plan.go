package mockllm

import (
	"strings"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/tidwall/gjson"
)

// demoSteps is the plan the demo model writes with write_todos.
var demoSteps = [...]string{"Outline the answer", "Write the answer"}

// demoPlan is the demo model's planning scenario. When write_todos is
// offered and the user's message asks for a plan, it writes demoSteps, the
// first in_progress. After each write_todos result it completes the step in
// progress and starts the next one, in one call; once every step is
// completed it answers. ok is false when the scenario does not apply.
func demoPlan(c *Call) (t Turn, ok bool) {
	if !c.Offers("write_todos") {
		return Turn{}, false
	}
	switch c.LastRole {
	case "user":
		if !strings.Contains(strings.ToLower(c.LastText), "plan") {
			return Turn{}, false
		}
		return todosTurn(0), true
	case "tool":
		if len(c.ToolResults) != 1 {
			return Turn{}, false
		}
		todos := gjson.Get(c.ToolResults[0], "data.todos")
		if !todos.IsArray() {
			return Turn{}, false
		}
		done := 0
		for _, t := range todos.Array() {
			if t.Get("status").Str == "completed" {
				done++
			}
		}
		if done >= len(demoSteps) {
			return Turn{Text: "Every step of the plan is completed: " + strings.Join(demoSteps[:], ", then ") + "."}, true
		}
		return todosTurn(done + 1), true
	}
	return Turn{}, false
}

// todosTurn calls write_todos with the first done steps completed and the
// next one in progress.
func todosTurn(done int) Turn {
	args := []byte(`{"todos":[`)
	for i, s := range demoSteps {
		if i > 0 {
			args = append(args, ',')
		}
		status := "pending"
		switch {
		case i < done:
			status = "completed"
		case i == done:
			status = "in_progress"
		}
		args = append(args, `{"content":`...)
		args = jsonstring.Append(args, s)
		args = append(args, `,"status":"`+status+`"}`...)
	}
	return Turn{ToolCalls: []ToolCall{{Name: "write_todos", Arguments: string(append(args, "]}"...))}}}
}
