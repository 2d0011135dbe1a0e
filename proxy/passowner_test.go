package proxy

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// ownerTapAll feeds body to a new tap of contentType in pieces of at most
// piece bytes and returns what it found.
func ownerTapAll(contentType string, body []byte, piece int) (string, bool) {
	o := newOwnerTap([]byte(contentType))
	if o == nil {
		return "", false
	}
	found, ok := "", false
	for len(body) > 0 {
		n := min(piece, len(body))
		if id, got := o.write(body[:n]); got {
			if ok {
				return "", false // twice: never
			}
			found, ok = id, true
		}
		body = body[n:]
	}
	return found, ok
}

// The tap finds the id of the response a pass-through answer creates, as
// a JSON reader would read it, however the answer is cut into reads.
func TestOwnerTap(t *testing.T) {
	t.Parallel()
	const js, sse = "application/json", "text/event-stream"
	for _, tc := range []struct {
		name, ct, body, want string
	}{
		{"json", js, `{"id":"resp_1","object":"response","output":[]}`, "resp_1"},
		{"object first", js, `{ "object" : "response", "status":"completed", "id" : "resp_2" }`, "resp_2"},
		{"nested ids first", js, `{"output":[{"id":"msg_1","object":"response","x":{"id":"y"}}],"id":"resp_3","object":"response"}`, "resp_3"},
		{"a string that looks like members", js, `{"instructions":"}{\"id\":\"resp_evil\",\"object\":\"response\"","id":"resp_4","object":"response"}`, "resp_4"},
		{"the first of two ids", js, `{"id":"resp_a","id":"resp_b","object":"response"}`, "resp_a"},
		{"long keys", js, `{"previous_response_id":"resp_prev","id":"resp_5","object":"response"}`, "resp_5"},
		{"another object", js, `{"id":"conv_1","object":"conversation"}`, ""},
		{"no object", js, `{"id":"resp_6"}`, ""},
		{"an escaped id", js, `{"id":"resp_\u0037","object":"response"}`, ""},
		{"an escaped key", js, `{"\u0069d":"resp_x","id":"resp_8","object":"response"}`, ""},
		{"an id not a string", js, `{"id":9,"object":"response"}`, ""},
		{"an array", js, `[{"id":"resp_9","object":"response"}]`, ""},
		{"an id too long", js, `{"id":"resp_` + string(make([]byte, 200)) + `","object":"response"}`, ""},
		{"no content type", "", `{"id":"resp_10","object":"response"}`, "resp_10"},
		{"created", sse, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_11\",\"object\":\"response\"}}\n\n", "resp_11"},
		{"crlf, no space", sse, "event: response.created\r\ndata:{\"response\":{\"output\":[{\"id\":\"msg\"}],\"id\":\"resp_12\"}}\r\n\r\n", "resp_12"},
		{"the first event with one", sse, "data: {\"type\":\"x\",\"item\":{\"id\":\"msg_1\"},\"id\":\"resp_no\"}\n\ndata: {\"response\":{\"id\":\"resp_13\"}}\n\ndata: {\"response\":{\"id\":\"resp_later\"}}\n\n", "resp_13"},
		{"not a data line", sse, ": {\"response\":{\"id\":\"resp_no\"}}\nevent: {\"response\":{\"id\":\"resp_no\"}}\n\n", ""},
		{"done", sse, "data: [DONE]\n\n", ""},
		{"an image", "image/png", `{"id":"resp_1","object":"response"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, piece := range []int{1, 2, 3, 7, len(tc.body)} {
				if piece == 0 {
					continue
				}
				id, ok := ownerTapAll(tc.ct, []byte(tc.body), piece)
				if ok != (tc.want != "") || id != tc.want {
					t.Fatalf("in pieces of %d: %q %v, want %q", piece, id, ok, tc.want)
				}
			}
		})
	}
}

// The tap never panics, finds the same id however the answer is cut, and
// in a valid JSON answer finds only what a JSON reader reads there.
func FuzzOwnerTap(f *testing.F) {
	f.Add([]byte(`{"id":"resp_1","object":"response"}`), uint8(3), false)
	f.Add([]byte(`{"output":[{"id":"m"}],"object":"response","id":"resp_2"}`), uint8(1), false)
	f.Add([]byte(`{"a":"\"}{","id":"resp_3","object":"response"}`), uint8(5), false)
	f.Add([]byte("data: {\"response\":{\"id\":\"resp_4\"}}\n\n"), uint8(2), true)
	f.Add([]byte("event: x\r\ndata:{\"x\":[{]}\ndata: {\"response\":{\"id\":\"resp_5\"}}\n"), uint8(4), true)
	f.Fuzz(func(t *testing.T, body []byte, piece uint8, stream bool) {
		ct := "application/json"
		if stream {
			ct = "text/event-stream"
		}
		id, ok := ownerTapAll(ct, body, len(body)+1)
		id2, ok2 := ownerTapAll(ct, body, int(piece)+1)
		if id != id2 || ok != ok2 {
			t.Fatalf("whole: %q %v; in pieces of %d: %q %v", id, ok, int(piece)+1, id2, ok2)
		}
		if ok && (id == "" || len(id) > maxScanValue) {
			t.Fatalf("found %q", id)
		}
		if ok && !stream && jsonvalid.Bytes(body) {
			if got := gjson.GetBytes(body, "id"); got.Str != id || gjson.GetBytes(body, "object").Str != "response" {
				t.Fatalf("found %q; a JSON reader reads id %s, object %s", id, got.Raw, gjson.GetBytes(body, "object").Raw)
			}
		}
	})
}

// A pass-through path names a response unless it is /v1/responses itself
// or one of its collections as the last segment: a collection's name with
// more after it (/v1/Responses/compact/resp_x) is checked as an id, which
// it was not.
func TestPathResponseID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, id string
		ok       bool
	}{
		{"/v1/responses", "", false},
		{"/v1/responses/input_tokens", "", false},
		{"/v1/responses/compact", "", false},
		{"/v1/responses/resp_1", "resp_1", true},
		{"/v1/Responses/resp_1/input_items", "resp_1", true},
		{"/v1/responses/compact/resp_1", "compact", true},
		{"/v1/Responses/input_tokens/x", "input_tokens", true},
		{"/v1/chat/completions", "", false},
		{"/v1/responsesx/resp_1", "", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			id, ok := pathResponseID(tc.path)
			if ok != tc.ok || (ok && id != tc.id) {
				t.Fatalf("%q %v, want %q %v", id, ok, tc.id, tc.ok)
			}
		})
	}
}
