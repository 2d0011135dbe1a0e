package contextedit

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
)

// Some upstreams number tool calls per response (call_0, call_1, ...), so a
// client's history may hold one id in several turns. A result cleared in one
// round is cleared again in the next round, and only that one: the later
// result that shares its id is among the most recent (keep) and reaches the
// model as it was.
func TestReusedCallIDsClearOnlyTheClearedResult(t *testing.T) {
	t.Parallel()
	h, next := newHandler(ceConfig(func(c *config.ContextEdit) { c.Keep = 2 }))
	elog := &EditLog{}
	recent := toolOutput(3, 8)
	base := []string{
		sysMsg("You are a research agent."), userMsg("Find foxes."),
		callMsg("call_0", "search", `{"query":"foxes"}`), resultMsg("call_0", toolOutput(1, 8)),
		callMsg("call_1", "search", `{"query":"more foxes"}`), resultMsg("call_1", toolOutput(2, 8)),
		asstMsg("Found some."), userMsg("And in Oslo?"),
		callMsg("call_0", "search", `{"query":"foxes Oslo"}`), resultMsg("call_0", recent),
	}
	window := mustCount(t, chatBody(base...)) + 50
	out := round(t, h, next, elog, chatBody(base...), window)
	checkPairing(t, out)
	if got := elog.Cleared(); len(got) != 1 || got[0] != "call_0" {
		t.Fatalf("round 1 cleared %v, want the first call_0", got)
	}
	if m := messages(out); gjson.Get(m[9], "content").Str != recent {
		t.Fatalf("round 1: the latest result was edited: %.80s", m[9])
	}
	// The tool loop's next round: one more server call and its result.
	round2 := append(append([]string(nil), base...), callMsg("call_gw_a", "search", `{"query":"x"}`), resultMsg("call_gw_a", "short"))
	out = round(t, h, next, elog, chatBody(round2...), window)
	if m := messages(out); gjson.Get(m[9], "content").Str != recent {
		t.Fatalf("round 2: the result of the latest call_0, one of the 2 kept, was cleared: %.80s", m[9])
	}
	applied, err := elog.Apply(chatBody(round2...))
	if err != nil {
		t.Fatal(err)
	}
	if m := messages(applied); gjson.Get(m[9], "content").Str != recent {
		t.Fatalf("Apply: the latest call_0 result was cleared: %.80s", m[9])
	}
}
