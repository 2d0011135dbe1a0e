package toolloop

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/observe"
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
