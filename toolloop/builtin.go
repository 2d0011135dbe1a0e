package toolloop

import (
	"context"
	"strconv"
	"time"
	_ "time/tzdata" // current_time must work in minimal images without zoneinfo

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

type builtin struct {
	exec        executor
	params      string
	description string
	prompt      string // system prompt addition when offered; the tool's system key replaces it
	// pure: its result depends on its arguments alone and it changes
	// nothing outside the request (config.Tool.Repeatable).
	pure bool
}

// builtins are the kind="builtin" tools, by builtin name.
var builtins = map[string]builtin{
	"current_time": {
		exec:        execFunc(currentTime),
		params:      `{"type":"object","properties":{"timezone":{"type":"string","description":"IANA time zone such as Europe/Oslo; default UTC"}},"additionalProperties":false}`,
		description: "Current date and time in a time zone.",
	},
	"calculator": {
		exec:        execFunc(calculator),
		pure:        true,
		params:      `{"type":"object","properties":{"expression":{"type":"string","description":"Arithmetic with + - * / ^, parentheses, decimals and unary minus"}},"required":["expression"],"additionalProperties":false}`,
		description: "Evaluate an arithmetic expression exactly as written.",
	},
	todosBuiltin: {
		exec:        execFunc(writeTodos),
		pure:        true,
		params:      todosParams,
		description: todosDescription,
		prompt:      defaultTodosPrompt,
	},
}

func currentTime(_ context.Context, c *pipeline.ToolCall) ([]byte, error) {
	tz := gjson.GetBytes(c.Arguments, "timezone").String()
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &ToolError{Kind: "invalid_arguments", Field: "/timezone", Message: "unknown time zone " + strconv.Quote(tz) + "; use an IANA name such as Europe/Oslo"}
	}
	now := time.Now().In(loc)
	out := make([]byte, 0, 128)
	out = append(out, `{"time":`...)
	out = strconv.AppendQuote(out, now.Format(time.RFC3339))
	out = append(out, `,"timezone":`...)
	out = strconv.AppendQuote(out, loc.String())
	out = append(out, `,"weekday":`...)
	out = strconv.AppendQuote(out, now.Weekday().String())
	out = append(out, `,"unix":`...)
	out = strconv.AppendInt(out, now.Unix(), 10)
	return append(out, '}'), nil
}

func calculator(_ context.Context, c *pipeline.ToolCall) ([]byte, error) {
	expr := gjson.GetBytes(c.Arguments, "expression").String()
	v, err := Calculate(expr)
	if err != nil {
		return nil, &ToolError{Kind: "invalid_arguments", Field: "/expression", Message: err.Error()}
	}
	out := make([]byte, 0, 64)
	out = append(out, `{"result":`...)
	out = strconv.AppendFloat(out, v, 'g', -1, 64)
	return append(out, '}'), nil
}
