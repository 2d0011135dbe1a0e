package toolloop

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/tidwall/gjson"
)

// Under a JSON response_format, the text a model writes in a round whose
// server calls run is not part of the answer: the content is the structured
// answer alone, so that it parses, and the stream's accumulated content is
// the JSON answer's. The history the next round sends keeps the text.
func TestStructuredAnswerHidesToolRoundText(t *testing.T) {
	t.Parallel()
	const answer = `{"answer": 1024}`
	calc := `{"expression":"2^10"}`
	callJSON := `[{"id":"call_a","type":"function","function":{"name":"calculator","arguments":` + q(calc) + `}}]`
	for _, format := range []string{
		`{"type":"json_object"}`,
		`{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"}}}`,
	} {
		for _, before := range []string{"Let me compute that. ", `{"draft": true} `} {
			t.Run(fmt.Sprintf("%s/%q", gjson.Get(format, "type").Str, before), func(t *testing.T) {
				t.Parallel()
				round := []string{
					chunk("up-1", `{"role":"assistant","content":""}`, ""),
					chunk("up-1", `{"content":`+q(before)+`}`, ""),
					chunk("up-1", callWhole(0, "call_a", "calculator", calc), ""),
					chunk("up-1", `{}`, "tool_calls"),
					usageChunk("up-1", 10, 5, 0),
				}
				var got [2]string
				for i, stream := range []bool{false, true} {
					m := &fakeModel{turns: []turnFn{
						always(round, completion("up-1", before, callJSON, "tool_calls", 10, 5)),
						always(textRound("up-2", answer, 10, 5), completion("up-2", answer, "", "stop", 10, 5)),
					}}
					l := newLoop(t, []config.Tool{calcTool}, nil)
					body := userBody + `,"response_format":` + format
					if stream {
						body += `,"stream":true`
					}
					resp, err := l.Chat(context.Background(), request(m, stream, body+`}`))
					if err != nil {
						t.Fatal(err)
					}
					if stream {
						got[i] = checkStream(t, sse(t, resp.Stream), false).Content
					} else {
						got[i] = gjson.GetBytes(resp.Body, "choices.0.message.content").Str
					}
					if m.calls() != 2 {
						t.Fatalf("stream=%v: %d model calls, want 2", stream, m.calls())
					}
					if kept := gjson.GetBytes(m.body(1), `messages.#(role=="assistant").content`).Str; kept != before {
						t.Fatalf("stream=%v: the history's assistant text %q, want %q", stream, kept, before)
					}
				}
				if got[0] != answer || got[1] != answer || !json.Valid([]byte(got[0])) {
					t.Fatalf("JSON content %q, stream content %q; want the structured answer %q alone", got[0], got[1], answer)
				}
			})
		}
	}
}
