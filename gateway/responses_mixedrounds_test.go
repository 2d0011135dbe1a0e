package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/mockllm"
)

// A mixed turn whose server call came in an earlier round than the client
// call ("Step 0." and the calculator, then "Step 1." and get_weather),
// replayed with store false as @openai/agents sends it (each message its
// own item, the mcp_call without its output): the follow-up's model sees
// the rounds it produced, the calculator's call and result included. A
// near miss (calculater) is run and kept under its tool's name, in the
// kept round and the mcp_call item alike: the kept round named the slip
// and the item the tool, so a replay with the output carried the server
// round twice.
func TestResponsesMixedRoundsReplayWithoutOutput(t *testing.T) {
	t.Parallel()
	for _, called := range []string{"calculator", "calculater"} {
		t.Run(called, func(t *testing.T) {
			t.Parallel()
			mixedRoundsReplay(t, called)
		})
	}
}

func mixedRoundsReplay(t *testing.T, called string) {
	h := newHarness(t, baseConfig+calculatorTool, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		switch strings.Count(string(c.Body), `"role":"tool"`) {
		case 0:
			return mockllm.Turn{Text: "Step 0.", ToolCalls: []mockllm.ToolCall{{Name: called, Arguments: `{"expression":"6*7"}`}}}
		case 1:
			return mockllm.Turn{Text: "Step 1.", ToolCalls: []mockllm.ToolCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}
		}
		return mockllm.Turn{Text: "Results: " + strings.Join(c.ToolResults, " | ")}
	}})
	weather := `{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}`
	// How the client replays the mcp_call: without its output, as
	// @openai/agents does; with it, as a client that sends the output
	// back; or not at all, each message a message of its own, as the AI
	// SDK's Responses provider does.
	for _, replay := range []string{"without output", "with output", "omitted"} {
		keep := replay == "with output"
		status, _, first := send(t, "POST", h.base+"/responses", "sk-client", `{"model":"gpt-x","store":false,"input":"go","tools":[`+weather+`]}`)
		if status != 200 {
			t.Fatalf("%d %s", status, first)
		}
		input := `[{"role":"user","content":"go"}`
		var callID string
		gjson.GetBytes(first, "output").ForEach(func(_, it gjson.Result) bool {
			raw := it.Raw
			switch it.Get("type").Str {
			case "mcp_call":
				if replay == "omitted" {
					return true
				}
				if !keep {
					raw, _ = sjson.Delete(raw, "output")
				}
			case "function_call":
				callID = it.Get("call_id").Str
			}
			input += "," + raw
			return true
		})
		if callID == "" {
			t.Fatalf("first answer %s", first)
		}
		input += `,{"type":"function_call_output","call_id":"` + callID + `","output":"sunny"}]`
		status, _, next := send(t, "POST", h.base+"/responses", "sk-client", `{"model":"gpt-x","store":false,"tools":[`+weather+`],"input":`+input+`}`)
		if status != 200 {
			t.Fatalf("%d %s", status, next)
		}
		reqs := h.mock.Requests()
		// Once, whether the client carried the server round or not.
		want := "user | assistant Step 0. [calculator] | tool | assistant Step 1. [get_weather] | tool"
		if got := historyShape(reqs[len(reqs)-1].Body); got != want {
			t.Fatalf("mcp_call %s: the follow-up's history:\n got %s\nwant %s\n%s", replay, got, want, first)
		}
	}
}

// historyShape lists a chat request's messages: each role, an assistant's
// text and the names of its calls.
func historyShape(body []byte) string {
	var shape []string
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		s := m.Get("role").Str
		if c := m.Get("content").Str; c != "" && s == "assistant" {
			s += " " + c
		}
		m.Get("tool_calls.#.function.name").ForEach(func(_, n gjson.Result) bool {
			s += " [" + n.Str + "]"
			return true
		})
		shape = append(shape, s)
		return true
	})
	return strings.Join(shape, " | ")
}
