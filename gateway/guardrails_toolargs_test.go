package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// Tool-call arguments past what the response guardrails judge (1 MiB per
// answer) cannot be judged whole: the JSON answer is the 400
// content_blocked and the stream ends with the error event instead of
// [DONE], the same for the same answer. Escaped values in arguments are
// judged decoded, in both forms.
func TestGuardrailToolCallArgumentsLimits(t *testing.T) {
	t.Parallel()
	p := withClientTools(userMsg("hi"))
	t.Run("past the bound", func(t *testing.T) {
		t.Parallel()
		// The raw upstream's 3-byte fragments would make a million
		// chunks: this one sends the arguments in 64 KiB fragments.
		args := `{"blob":"` + strings.Repeat("z", 1<<20) + `"}`
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if !gjson.GetBytes(b, "stream").Bool() {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, rawAnswer([]rawTurn{{usage: [2]int{9, 4}, calls: []rawCall{{"call_1", "lookup_city", args}}}}))
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			ev := func(choice string) { _, _ = io.WriteString(w, "data: "+rawHead+choice+"]}\n\n") }
			ev(`{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup_city","arguments":""}}]},"logprobs":null,"finish_reason":null}`)
			for s := args; s != ""; {
				n := min(64<<10, len(s))
				frag, _ := json.Marshal(s[:n])
				s = s[n:]
				ev(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + string(frag) + `}}]},"logprobs":null,"finish_reason":null}`)
			}
			ev(`{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}`)
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		}))
		t.Cleanup(up.Close)
		h := newHarness(t, strings.ReplaceAll(parityGuardRelay, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
		for _, stream := range []bool{false, true} {
			e, status := parityError(t, h, p, stream)
			if !strings.Contains(e, "code=content_blocked") || !strings.Contains(e, "1 MiB") {
				t.Errorf("stream %v (%d): %s", stream, status, e)
			}
		}
	})
	t.Run("escaped value", func(t *testing.T) {
		t.Parallel()
		h := parityHarness(t, parityCase{config: parityGuardRelay, raw: func([]byte) []rawTurn {
			return []rawTurn{{tokens: []string{"Asking."}, usage: [2]int{9, 4}, calls: []rawCall{{"call_1", "lookup_city", `{"mail":"bob\u0040example.com"}`}}}}
		}})
		const want = `{"mail":"[REDACTED]"}`
		for form, a := range map[string]parityAnswer{"json": parityJSON(t, h, p), "stream": parityStream(t, h, p)} {
			if tc := a.Choices[0].ToolCalls; len(tc) != 1 || tc[0].Arguments != want {
				t.Errorf("%s: calls %+v, want arguments %s", form, tc, want)
			}
		}
	})
}
