package wiretest

import (
	"strings"
	"testing"
)

// validResponses is a small well-formed Responses stream: one message
// with one text part.
const validResponses = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","output":[]}}

event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","output":[]}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message"}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Hi"}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":6,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","text":"Hi"}]}}

event: response.completed
data: {"type":"response.completed","sequence_number":7,"response":{"id":"resp_1","output":[{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","text":"Hi"}]}]}}

`

// The checker accepts a well-formed stream and names each broken rule.
func TestCheckResponsesStream(t *testing.T) {
	if sum, err := CheckResponsesStream([]byte(validResponses), nil); err != nil || sum.Terminal != "response.completed" {
		t.Fatalf("valid stream: %v %+v", err, sum)
	}
	cases := map[string]struct{ from, to, want string }{
		"event line differs":      {"event: response.output_text.delta", "event: response.text.delta", "event line"},
		"sequence goes back":      {`"sequence_number":5`, `"sequence_number":3`, "does not increase"},
		"opens wrong":             {"event: response.in_progress\ndata: {\"type\":\"response.in_progress\"", "event: response.queued\ndata: {\"type\":\"response.queued\"", "opens with"},
		"response id changes":     {`"sequence_number":7,"response":{"id":"resp_1"`, `"sequence_number":7,"response":{"id":"resp_2"`, "changed"},
		"delta of unknown item":   {`"item_id":"msg_1","output_index":0,"content_index":0,"delta"`, `"item_id":"msg_9","output_index":0,"content_index":0,"delta"`, "item_id"},
		"done text differs":       {`"text":"Hi"}` + "\n\nevent: response.output_item.done", `"text":"Ho"}` + "\n\nevent: response.output_item.done", "differs from its deltas"},
		"final text differs":      {`"text":"Hi"}]}]}}`, `"text":"Ha"}]}]}}`, "the deltas said"},
		"final differs from done": {`"status":"completed","content":[{"type":"output_text","text":"Hi"}]}]}}`, `"status":"incomplete","content":[{"type":"output_text","text":"Hi"}]}]}}`, "its output_item.done said"},
		"final lists no item":     {`"output":[{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","text":"Hi"}]}]`, `"output":[]`, "lists 0 output items"},
		"index skipped":           {`"sequence_number":2,"output_index":0`, `"sequence_number":2,"output_index":1`, "next is 0"},
		"delta before its part":   {`"sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0`, `"sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":1`, "never added"},
		"done logprobs differ":    {`"content_index":0,"text":"Hi"}`, `"content_index":0,"logprobs":[{"token":"Hi","logprob":-1}],"text":"Hi"}`, "logprobs"},
		"final logprobs differ":   {`"text":"Hi"}]}]}}`, `"text":"Hi","logprobs":[{"token":"Hi","logprob":-1}]}]}]}}`, "logprobs"},
	}
	for name, tc := range cases {
		raw := strings.Replace(validResponses, tc.from, tc.to, 1)
		if raw == validResponses {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		if _, err := CheckResponsesStream([]byte(raw), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
	cut := validResponses[:strings.Index(validResponses, "event: response.completed")]
	if _, err := CheckResponsesStream([]byte(cut), nil); err == nil || !strings.Contains(err.Error(), "ended without") {
		t.Error("a stream cut before its terminal event passed")
	}
}
