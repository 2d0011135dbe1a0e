package mockllm

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// apiError is a refusal written as the OpenAI error envelope.
type apiError struct {
	status                    int
	typ, code, param, message string
}

func invalid(param, code, message string) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", param: param, code: code, message: message}
}

// parsed is what the handler needs from a chat completion body besides the
// Call handed to the responder.
type parsed struct {
	call         Call
	includeUsage bool
	promptTokens int
}

// parseChat reads and validates a chat completion body the way a strict
// upstream does. body is only read; strings in the result are copies.
func parseChat(body []byte) (*parsed, *apiError) {
	if !jsonvalid.Bytes(body) {
		return nil, invalid("", "", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, invalid("", "", "Invalid request body: expected a JSON object.")
	}
	model := root.Get("model")
	if model.Type != gjson.String || model.Str == "" {
		return nil, invalid("model", "missing_required_parameter", "you must provide a model parameter")
	}
	p := &parsed{}
	p.call.Model = model.Str
	p.call.Body = body

	stream := root.Get("stream")
	if stream.Exists() && stream.Type != gjson.True && stream.Type != gjson.False && stream.Type != gjson.Null {
		return nil, invalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean.")
	}
	p.call.Stream = stream.Type == gjson.True
	if so := root.Get("stream_options"); so.Exists() && so.Type != gjson.Null {
		if !p.call.Stream {
			return nil, invalid("stream_options", "invalid_value", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		p.includeUsage = so.Get("include_usage").Type == gjson.True
	}
	if n := root.Get("n"); n.Exists() && n.Type != gjson.Null && (n.Type != gjson.Number || n.Num != 1) {
		// The mock answers with one choice: a request for more is refused,
		// as a provider that cannot honour it refuses it, never answered
		// with fewer than asked for.
		return nil, invalid("n", "unsupported_parameter", "this model returns one choice: n must be 1")
	}

	msgs := root.Get("messages")
	if !msgs.Exists() {
		return nil, invalid("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	if !msgs.IsArray() {
		return nil, invalid("messages", "invalid_type", "Invalid type for 'messages': expected an array of objects.")
	}
	if err := checkMessages(msgs, &p.call); err != nil {
		return nil, err
	}

	tools := root.Get("tools")
	if tools.IsArray() {
		tools.ForEach(func(_, t gjson.Result) bool {
			name := t.Get("function.name")
			if !name.Exists() {
				name = t.Get("custom.name")
			}
			if name.Type == gjson.String {
				p.call.Tools = append(p.call.Tools, name.Str)
			}
			return true
		})
	}
	p.promptTokens = max(1, (len(msgs.Raw)+len(tools.Raw))/4)
	return p, nil
}

var knownRoles = [...]string{"system", "developer", "user", "assistant", "tool", "function"}

// checkMessages validates roles and the pairing of assistant tool calls with
// tool messages, and fills the message-derived fields of call.
func checkMessages(msgs gjson.Result, call *Call) *apiError {
	var (
		err     *apiError
		idx     int
		pending []string // ids of the last assistant tool_calls still unanswered
		pendAt  = -1     // index of that assistant message; -1 outside a tool run
		last    gjson.Result
		trail   []string
	)
	msgs.ForEach(func(_, m gjson.Result) bool {
		i := idx
		idx++
		if !m.IsObject() {
			err = invalid(msgAt(i), "invalid_type", "Invalid type for '"+msgAt(i)+"': expected an object.")
			return false
		}
		role := m.Get("role")
		if role.Type != gjson.String {
			err = invalid(msgAt(i)+".role", "missing_required_parameter", "Missing required parameter: '"+msgAt(i)+".role'.")
			return false
		}
		if !isKnownRole(role.Str) {
			err = invalid(msgAt(i)+".role", "invalid_value", "Invalid value: '"+role.Str+"'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.")
			return false
		}
		if role.Str == "tool" {
			id := m.Get("tool_call_id")
			if id.Type != gjson.String || id.Str == "" {
				err = invalid(msgAt(i)+".tool_call_id", "missing_required_parameter", "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.")
				return false
			}
			if pendAt < 0 {
				err = invalid(msgAt(i)+".role", "", "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
				return false
			}
			k := indexOf(pending, id.Str)
			if k < 0 {
				err = invalid(msgAt(i)+".tool_call_id", "", "Invalid parameter: 'tool_call_id' of '"+id.Str+"' not found in 'tool_calls' of previous message.")
				return false
			}
			pending = append(pending[:k], pending[k+1:]...)
			trail = append(trail, contentText(m.Get("content")))
			last = m
			return true
		}
		if len(pending) > 0 {
			err = unanswered(pendAt, pending)
			return false
		}
		pendAt = -1
		trail = trail[:0]
		if role.Str == "assistant" {
			if tcs := m.Get("tool_calls"); tcs.IsArray() {
				tcs.ForEach(func(_, tc gjson.Result) bool {
					id := tc.Get("id")
					if id.Type != gjson.String || id.Str == "" {
						err = invalid(msgAt(i)+".tool_calls", "missing_required_parameter", "Missing required parameter: '"+msgAt(i)+".tool_calls[].id'.")
						return false
					}
					pending = append(pending, id.Str)
					return true
				})
				if err != nil {
					return false
				}
				if len(pending) > 0 {
					pendAt = i
				}
			}
		}
		last = m
		return true
	})
	if err != nil {
		return err
	}
	if idx == 0 {
		return invalid("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	if len(pending) > 0 {
		return unanswered(pendAt, pending)
	}
	call.LastRole = last.Get("role").Str
	call.LastText = contentText(last.Get("content"))
	if len(trail) > 0 {
		call.ToolResults = trail
	}
	return nil
}

// msgAt names message i as OpenAI's param does: "messages.[i]".
func msgAt(i int) string { return "messages.[" + strconv.Itoa(i) + "]" }

func unanswered(at int, ids []string) *apiError {
	return invalid("messages.["+strconv.Itoa(at)+"].role", "",
		"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "+strings.Join(ids, ", "))
}

func isKnownRole(r string) bool {
	for _, k := range knownRoles {
		if r == k {
			return true
		}
	}
	return false
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// contentText returns a message content as text: the string itself, or the
// text parts of an array joined without separator.
func contentText(c gjson.Result) string {
	switch {
	case c.Type == gjson.String:
		return c.Str
	case c.IsArray():
		var b strings.Builder
		c.ForEach(func(_, part gjson.Result) bool {
			if t := part.Get("text"); t.Type == gjson.String {
				b.WriteString(t.Str)
			}
			return true
		})
		return b.String()
	}
	return ""
}
