package toolprompt

import (
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzRewrite: any client body the ingress accepts becomes a valid JSON
// body without tools, or an error; never a panic.
func FuzzRewrite(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"a","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[{"type":"function","function":{"name":"g"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`))
	h := &handler{prompt: DefaultPrompt}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) || !gjson.GetBytes(body, "messages").IsArray() {
			return
		}
		rw, err := h.rewrite(body, false)
		if err != nil || rw == nil {
			return
		}
		if !gjson.ValidBytes(rw.body) {
			t.Fatalf("invalid body %s", rw.body)
		}
		if r := gjson.GetManyBytes(rw.body, "tools", "tool_choice"); r[0].Exists() || r[1].Exists() {
			t.Fatalf("tools left in %s", rw.body)
		}
		if hasToolHistory(gjson.GetBytes(rw.body, "messages")) {
			t.Fatalf("tool history left in %s", rw.body)
		}
	})
}
