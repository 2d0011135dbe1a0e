package toolloop

import (
	"context"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

// A tool's answer that quotes a configured secret with JSON escapes (a
// .NET service writes '+' as \u002B; any character may be escaped) reaches
// the model, and a Responses client's mcp_call output, masked, as the
// plain form does; in an error result too.
func TestToolResultMasksEscapedSecret(t *testing.T) {
	const secret = "tl/Zq8+Rt/Wm3=q"
	observe.Secrets.Add(secret)
	var esc strings.Builder
	for _, c := range secret {
		esc.WriteString(`\u00`)
		esc.WriteString(strings.ToUpper(string("0123456789abcdef"[c>>4])) + string("0123456789abcdef"[c&15]))
	}
	ok := string(okContent([]byte(`{"k":"Bearer ` + esc.String() + `"}`)))
	if strings.Contains(ok, esc.String()) || !strings.Contains(ok, observe.Mask) {
		t.Fatalf("ok result %s", ok)
	}
	bad := string(errContent(&ToolError{Kind: "http_error", Message: "HTTP 500", Detail: errString(`{"k":"tl/Zq8\u002BRt/Wm3\u003Dq"}`)}, true))
	if strings.Contains(bad, "Zq8") || !strings.Contains(bad, observe.Mask) {
		t.Fatalf("error result %s", bad)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// A server call's arguments that carry a configured secret (a model that
// learned one) show masked where a client reads them, the trace and a
// Responses mcp_call item, plain or escaped, as the call's result does;
// the tool itself gets them as written.
func TestShownArgumentsMaskSecrets(t *testing.T) {
	const secret = "argsecret-Kq81vX"
	observe.Secrets.Add(secret)
	m := &fakeModel{turns: []turnFn{
		always(toolRound("up-1", "call_a", "calculator", `{"expression":"1+2","note":"`+secret+`","n2":"argsecret\u002DKq81vX"}`, 10, 5), ""),
		always(textRound("up-2", "3", 20, 6), ""),
	}}
	l := newLoop(t, []config.Tool{calcTool}, nil)
	req := request(m, true, userBody+`,"stream":true}`)
	req.Hints.ToolTrace = true
	var shown []byte
	req.OnServerCall = func(c *pipeline.ServerCall) { shown = append([]byte(nil), c.Arguments...) }
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), false)
	args := gjson.GetBytes(sum.Chunks[len(sum.Chunks)-1], "x_gateway.tool_calls.0.arguments").Str
	for what, s := range map[string]string{"trace": args, "server call": string(shown)} {
		if strings.Contains(s, "Kq81vX") || !strings.Contains(s, observe.Mask) {
			t.Errorf("%s shows %s", what, s)
		}
	}
	if !strings.Contains(string(m.body(1)), secret) {
		t.Errorf("the model's own history lost its arguments: %s", m.body(1))
	}
}
