package toolloop

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// write_todos is the planning tool (LangChain's to-do list middleware): the
// model writes its plan as a list of {content, status} and sends the whole
// list again whenever a status changes. The gateway validates the list,
// returns it as the result and reports the last valid list of the request
// in x_gateway.todos, so a UI can show progress. The tool keeps no state:
// the list lives in the conversation, like every other tool result.

const todosBuiltin = "write_todos"

// todosParams bounds the list so that it always fits a result and the
// x_gateway field (50 items of at most 500 characters).
const todosParams = `{"type":"object","properties":{"todos":{"type":"array","maxItems":50,` +
	`"description":"The complete list, every time: items left out are dropped",` +
	`"items":{"type":"object","properties":{` +
	`"content":{"type":"string","minLength":1,"maxLength":500,"description":"The task, as an imperative sentence"},` +
	`"status":{"type":"string","enum":["pending","in_progress","completed"]}},` +
	`"required":["content","status"],"additionalProperties":false}}},` +
	`"required":["todos"],"additionalProperties":false}`

const todosDescription = "Write or update the to-do list of the current task. Send the complete list every time; " +
	"at most one item may be in_progress."

// defaultTodosPrompt is added to the system prompt of a request that is
// offered write_todos, unless the tool's system key replaces it.
const defaultTodosPrompt = `## Planning with write_todos
You have the write_todos tool to plan and track tasks of three steps or more. Skip it for simple requests.
- Write the plan before you start: every step pending, the first in_progress.
- Mark a step completed as soon as it is done and the next one in_progress in the same call; keep at most one step in_progress.
- Send the complete list every time. Add, remove or reword steps when you learn more.`

// todoStatuses are the statuses an item may have.
var todoStatuses = [...]string{"pending", "in_progress", "completed"}

// writeTodos validates the list and returns it, normalised to content and
// status, as {"todos":[...]}. The schema checks the shape first; these
// rules hold whatever schema the config gives the tool.
func writeTodos(_ context.Context, c *pipeline.ToolCall) ([]byte, error) {
	todos := gjson.GetBytes(c.Arguments, "todos")
	if !todos.IsArray() {
		return nil, &ToolError{Kind: "invalid_arguments", Field: "/todos", Message: "todos must be an array of {content, status}"}
	}
	out := make([]byte, 0, len(todos.Raw)+16)
	out = append(out, `{"todos":[`...)
	var err *ToolError
	i, inProgress := 0, -1
	todos.ForEach(func(_, v gjson.Result) bool {
		content, status := v.Get("content"), v.Get("status")
		at := "/todos/" + strconv.Itoa(i)
		switch {
		case content.Type != gjson.String || strings.TrimSpace(content.Str) == "":
			err = &ToolError{Kind: "invalid_arguments", Field: at + "/content", Message: "every item needs a content: the task as text"}
		case status.Type != gjson.String || !validTodoStatus(status.Str):
			err = &ToolError{Kind: "invalid_arguments", Field: at + "/status", Message: "status must be pending, in_progress or completed"}
		case status.Str == "in_progress" && inProgress >= 0:
			err = &ToolError{Kind: "invalid_arguments", Field: at + "/status",
				Message: fmt.Sprintf("only one item may be in_progress; items %d and %d are: mark one pending or completed", inProgress, i)}
		}
		if err != nil {
			return false
		}
		if status.Str == "in_progress" {
			inProgress = i
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"content":`...)
		out = appendJSONString(out, []byte(content.Str))
		out = append(out, `,"status":"`...)
		out = append(out, status.Str...)
		out = append(out, `"}`...)
		i++
		return true
	})
	if err != nil {
		return nil, err
	}
	return append(out, "]}"...), nil
}

func validTodoStatus(s string) bool {
	for _, v := range todoStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// withToolPrompts adds the system prompt additions of the offered tools
// (write_todos) to msgs, the request's messages array: to the content of a
// leading system or developer message, else as a new first system message.
// It returns nil when no offered tool has one, and whether it put a new
// message in front.
func withToolPrompts(msgs []byte, tools []*tool) (_ []byte, prepended bool, _ error) {
	var add []byte
	for _, t := range tools {
		if t.prompt == "" {
			continue
		}
		if len(add) > 0 {
			add = append(add, "\n\n"...)
		}
		add = append(add, t.prompt...)
	}
	if len(add) == 0 {
		return nil, false, nil
	}
	first := gjson.GetBytes(msgs, "0")
	role, content := first.Get("role").Str, first.Get("content")
	if role == "system" || role == "developer" {
		switch {
		case content.Type == gjson.String:
			v := append(append([]byte(content.Str), "\n\n"...), add...)
			out, err := sjson.SetRawBytes(msgs, "0.content", appendJSONString(nil, v))
			return out, false, err
		case content.IsArray():
			part := append(appendJSONString([]byte(`{"type":"text","text":`), add), '}')
			out, err := sjson.SetRawBytes(msgs, "0.content.-1", part)
			return out, false, err
		}
	}
	out := make([]byte, 0, len(msgs)+len(add)+40)
	out = append(out, `[{"role":"system","content":`...)
	out = appendJSONString(out, add)
	out = append(out, '}')
	if rest := bytes.TrimSpace(bytes.TrimSpace(msgs)[1:]); len(rest) > 0 && rest[0] != ']' {
		out = append(out, ',')
		out = append(out, rest...)
		return out, true, nil
	}
	return append(out, ']'), true, nil
}

// noteTodos keeps the list of a successful write_todos result: the last one
// is the request's x_gateway.todos.
func (s *session) noteTodos(r *pipeline.ToolResult) {
	if !s.p.todos || r.IsError {
		return
	}
	if t := s.p.set.get(r.Name); t == nil || !t.todos {
		return
	}
	if v := gjson.GetBytes(r.Content, "data.todos"); v.IsArray() {
		s.todos = append(s.todos[:0], v.Raw...)
	}
}

// appendTodos adds "todos" to the x_gateway object tr, or returns tr
// unchanged when no list was written. A nil tr (no trace) becomes an object
// of its own.
func (s *session) appendTodos(tr []byte) []byte {
	if s.todos == nil {
		return tr
	}
	tr = appendTraceMember(tr, `"todos":`)
	tr = append(tr, s.todos...)
	return append(tr, '}')
}
