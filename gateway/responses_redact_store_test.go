package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// A request-stage redacting guardrail redacts what the gateway stores of a
// Responses request too: its input items, the instructions the stored
// response repeats, and the history a continuation sends upstream. The
// upstream never saw the e-mail address, but the stored response kept it
// for the response's life, readable through GET and input_items.
func TestResponsesStoresRedactedInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig, mockllm.Options{})
	const mail = "jane.doe@example.com"
	for _, stream := range []string{"false", "true"} {
		status, _, body := send(t, "POST", h.base+"/responses", "sk-client",
			`{"model":"gpt-x","stream":`+stream+`,"instructions":"write to `+mail+`","input":[{"role":"user","content":"my mail is `+mail+`"}]}`)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		id := gjson.GetBytes(body, "id").Str
		if stream == "true" {
			for _, line := range strings.Split(string(body), "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok && gjson.Get(d, "type").Str == "response.completed" {
					id = gjson.Get(d, "response.id").Str
				}
			}
		}
		if id == "" {
			t.Fatalf("no id: %s", body)
		}
		if strings.Contains(string(body), mail) {
			t.Fatalf("stream %s: the answer repeats the address: %s", stream, body)
		}
		for _, path := range []string{"/responses/" + id, "/responses/" + id + "/input_items"} {
			status, _, got := send(t, "GET", h.base+path, "sk-client", "")
			if status != 200 || strings.Contains(string(got), mail) || !strings.Contains(string(got), "[REDACTED]") {
				t.Fatalf("stream %s: GET %s: %d %s", stream, path, status, got)
			}
		}
		// A continuation sends the stored history upstream: redacted.
		status, _, next := send(t, "POST", h.base+"/responses", "sk-client", `{"model":"gpt-x","previous_response_id":"`+id+`","input":"and then?"}`)
		reqs := h.mock.Requests()
		if status != 200 || strings.Contains(string(reqs[len(reqs)-1].Body), mail) {
			t.Fatalf("stream %s: continuation %d %s", stream, status, next)
		}
	}
}
