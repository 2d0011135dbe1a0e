package gateway

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/wiretest"
)

// A turn that hands a call over for approval is never served from the
// response cache, even with tool_calls = true: each pause mints its own
// approval id, carries x-gateway-approval: pending and
// x_gateway.awaiting_approval, and a decision on it is taken, not the
// decision made on an earlier pause of the same question.
func TestCacheNeverReplaysAnApprovalPause(t *testing.T) {
	t.Parallel()
	h, se := approvalHarness(t, `
[middleware.cache]
enabled = true
tool_calls = true
`)
	schema := wiretest.LoadSchema(t)
	for i, tc := range []struct{ decision, wantRun string }{
		{`{"decision":"reject","message":"not now"}`, ""},
		{`{"decision":"approve"}`, `{"path":"/tmp/a"}`},
	} {
		for _, stream := range []bool{false, true} {
			p := det("clean up")
			msg, finish, xg, hdr := h.ask(t, p, stream, schema)
			if finish != "tool_calls" || len(msg.ToolCalls) != 1 || !strings.HasPrefix(msg.ToolCalls[0].ID, "call_gwa_") {
				t.Fatalf("ask %d (stream %v): finish %q, calls %+v", i, stream, finish, msg.ToolCalls)
			}
			if c := hdr.Get("x-gateway-cache"); c == "hit" {
				t.Fatalf("ask %d (stream %v): the pause was served from the cache", i, stream)
			}
			if xg.Get("awaiting_approval.0.id").Str != msg.ToolCalls[0].ID || (!stream && hdr.Get("x-gateway-approval") != "pending") {
				t.Fatalf("ask %d (stream %v): x_gateway %s, x-gateway-approval %q", i, stream, xg.Raw, hdr.Get("x-gateway-approval"))
			}
			if stream {
				continue
			}
			before := len(se.runs())
			h.ask(t, answer(p, msg, tc.decision), false, schema)
			runs := se.runs()[before:]
			if tc.wantRun == "" && len(runs) != 0 || tc.wantRun != "" && (len(runs) != 1 || runs[0] != tc.wantRun) {
				t.Fatalf("decision %s: tool runs %v, want %q", tc.decision, runs, tc.wantRun)
			}
		}
	}
}
