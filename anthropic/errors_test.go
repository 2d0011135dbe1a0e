package anthropic

import (
	"strconv"
	"testing"

	"github.com/tidwall/gjson"
)

// Anthropic counts messages in the translated request: system messages
// are gone and runs of one role merged. Renumber names the chat body's
// message instead, the first one a translated message holds.
func TestRenumber(t *testing.T) {
	t.Parallel()
	const chat = `{"messages":[
	 {"role":"system","content":"s"},
	 {"role":"user","content":"a"},
	 {"role":"user","content":"b"},
	 {"role":"assistant","tool_calls":[{"id":"x.1","type":"function","function":{"name":"f","arguments":"{}"}}]},
	 {"role":"tool","tool_call_id":"x.1","content":"r"},
	 {"role":"user","content":"c"}]}`
	tests := []struct{ name, message, want string }{
		{"tool_use id", "messages.1.content.0.tool_use.id: String should match pattern", "messages.3.content.0.tool_use.id: String should match pattern"},
		{"several", "messages.0: x; messages.2: y", "messages.1: x; messages.4: y"},
		{"out of range", "messages.7.content: x", "messages.7.content: x"},
		{"not an index", "messages.abc, submessages.1, messages.1x", "messages.abc, submessages.1, messages.1x"},
		{"none", "prompt is too long", "prompt is too long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := envelope([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":` + strconv.Quote(tc.message) + `}}`))
			out := Renumber(env, []byte(chat))
			if got := gjson.GetBytes(out, "error.message").Str; got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if gjson.GetBytes(out, "error.type").Str != "invalid_request_error" {
				t.Errorf("envelope %s", out)
			}
		})
	}
}
