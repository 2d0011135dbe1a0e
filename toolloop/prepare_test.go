package toolloop

import (
	"context"
	"errors"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// A request the loop does not serve goes upstream without the server
// tools: a tool_choice naming one of them (to call, or among allowed_tools)
// is the gateway's own 400 naming tool_choice, not relayed to a provider
// that refuses it in terms of a tool the client never defined. A choice
// naming a client tool is relayed.
func TestUnservedChoiceOfAServerTool(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{calcTool}, nil)
	client := `"tools":[{"type":"function","function":{"name":"lookup"}}]`
	custom := `"tools":[{"type":"custom","custom":{"name":"sql"}}]`
	for _, c := range []struct {
		body   string
		refuse bool
	}{
		{`{"model":"gpt-x","n":2,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"calculator"}}}`, true},
		{`{"model":"gpt-x","n":2,"messages":[{"role":"user","content":"x"}],` + client + `,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"lookup"}},{"type":"function","function":{"name":"calculator"}}]}}}`, true},
		{`{"model":"gpt-x","messages":[{"role":"user","content":"x"}],` + custom + `,"tool_choice":{"type":"function","function":{"name":"calculator"}}}`, true},
		{`{"model":"gpt-x","n":2,"messages":[{"role":"user","content":"x"}],` + client + `,"tool_choice":{"type":"function","function":{"name":"lookup"}}}`, false},
		// The client's own tool of a server tool's name (a stand-in) is its.
		{`{"model":"gpt-x","n":2,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"calculator"}}],"tool_choice":{"type":"function","function":{"name":"calculator"}}}`, false},
	} {
		fm := &fakeModel{turns: []turnFn{always(nil, completion("up-1", "hi", "", "stop", 1, 1))}}
		_, err := l.Chat(context.Background(), request(fm, false, c.body))
		var pe *pipeline.Error
		refused := errors.As(err, &pe) && pe.Status == 400 && pe.Param == "tool_choice"
		if refused != c.refuse || (!c.refuse && err != nil) {
			t.Errorf("%s: %v, want refused %v", c.body, err, c.refuse)
		}
		if c.refuse && len(fm.bodies) != 0 {
			t.Errorf("%s: the upstream was called", c.body)
		}
	}
}
