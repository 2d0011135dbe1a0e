package mockllm

import (
	"github.com/llmgw/gateway/jsonstring"
	"strings"
	"sync/atomic"
)

// Sequence answers the calls in order with turns, across all models, and
// repeats the last turn once they are used up (an empty Turn when there are
// none). The returned function is safe for concurrent use.
func Sequence(turns ...Turn) func(*Call) Turn {
	turns = append([]Turn(nil), turns...)
	var next atomic.Int64
	return func(*Call) Turn {
		if len(turns) == 0 {
			return Turn{}
		}
		i := int(next.Add(1) - 1)
		if i >= len(turns) {
			i = len(turns) - 1
		}
		return turns[i]
	}
}

// ToolThenAnswer scripts a one-tool round trip: when the last message is from
// the user and tool is offered, it calls tool with args; when the history
// ends with tool results, it answers with answer followed by the results'
// text (space separated); otherwise it answers with answer alone.
func ToolThenAnswer(tool, args, answer string) func(*Call) Turn {
	return func(c *Call) Turn {
		switch {
		case c.LastRole == "tool":
			parts := append([]string{answer}, c.ToolResults...)
			return Turn{Text: strings.Join(parts, " ")}
		case c.LastRole == "user" && c.Offers(tool):
			return Turn{ToolCalls: []ToolCall{{Name: tool, Arguments: args}}}
		}
		return Turn{Text: answer}
	}
}

// DemoResponder is the deterministic offline demo model. When the last user
// message mentions "time" and a current_time tool is offered, or holds an
// arithmetic expression (like "2 + 3*4") and a calculator tool is offered, it
// calls them (both, in that order, when both apply; current_time with
// {"timezone":"UTC"}, which the shipped config's schema requires, calculator
// with {"expression":"..."}). After tool results it summarises
// them. When write_todos is offered and the message asks for a plan, it
// plans with it (demoPlan). Asked by the gateway to select tools, it picks
// them by name (demoSelect). Prompted for tools in text, it answers in the
// same protocol (demoPrompted). Otherwise it answers "Hello from the demo model.
// You said: <text>".
func DemoResponder(c *Call) Turn {
	if cands, ok := c.ToolSelection(); ok {
		return demoSelect(c, cands)
	}
	if t, ok := demoPrompted(c); ok {
		return t
	}
	if t, ok := demoPlan(c); ok {
		return t
	}
	if c.LastRole == "tool" && len(c.ToolResults) > 0 {
		return Turn{Text: "Here is what the tools returned: " + strings.Join(c.ToolResults, "; ")}
	}
	if c.LastRole == "user" {
		var calls []ToolCall
		if c.Offers("current_time") && strings.Contains(strings.ToLower(c.LastText), "time") {
			calls = append(calls, ToolCall{Name: "current_time", Arguments: `{"timezone":"UTC"}`})
		}
		if c.Offers("calculator") {
			if expr := findExpression(c.LastText); expr != "" {
				args := jsonstring.Append([]byte(`{"expression":`), expr)
				calls = append(calls, ToolCall{Name: "calculator", Arguments: string(append(args, '}'))})
			}
		}
		if len(calls) > 0 {
			return Turn{ToolCalls: calls}
		}
	}
	return Turn{Text: "Hello from the demo model. You said: " + c.LastText}
}

// findExpression returns the first run of arithmetic characters in s that
// holds a digit, an operator and another digit, trimmed; "" when none.
func findExpression(s string) string {
	isExpr := func(c byte) bool {
		return c >= '0' && c <= '9' || strings.IndexByte("+-*/().^% ", c) >= 0
	}
	for i := 0; i < len(s); {
		if !isExpr(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isExpr(s[j]) {
			j++
		}
		run := strings.Trim(s[i:j], " +*/^%")
		if isArithmetic(run) {
			return run
		}
		i = j
	}
	return ""
}

// isArithmetic reports whether run has a digit, then an operator, then a digit.
func isArithmetic(run string) bool {
	seenDigit, seenOp := false, false
	for k := 0; k < len(run); k++ {
		c := run[k]
		switch {
		case c >= '0' && c <= '9':
			if seenOp {
				return true
			}
			seenDigit = true
		case seenDigit && strings.IndexByte("+-*/^%", c) >= 0:
			seenOp = true
		}
	}
	return false
}
