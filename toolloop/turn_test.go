package toolloop

import (
	"testing"

	"github.com/tidwall/sjson"
)

// A round's body is the plan's body with the history appended to its
// messages, whatever surrounds the array; the rest of the body is as it was.
func TestWithHistory(t *testing.T) {
	t.Parallel()
	const h = `,{"role":"assistant","content":null},{"role":"tool","tool_call_id":"c","content":"{}"}`
	for _, tc := range []struct{ name, body string }{
		{"messages first", `{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":[]}`},
		{"messages last", `{"model":"m","messages":[{"role":"user","content":"]"}]}`},
		{"spaces", "{\"model\":\"m\", \"messages\" : [ {\"role\":\"user\",\"content\":\"hi\"} \n] , \"n\":1}"},
		{"empty messages", `{"model":"m","messages":[]}`},
		{"empty messages with spaces", `{"model":"m","messages":[  ],"x":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &session{p: &plan{body: []byte(tc.body)}, history: []byte(h)}
			got := s.withHistory()
			// What the old code built: the array re-set through sjson.
			msgs := []byte(`[{"role":"user","content":"hi"}`)
			switch tc.name {
			case "messages last":
				msgs = []byte(`[{"role":"user","content":"]"}`)
			case "spaces":
				msgs = []byte(`[ {"role":"user","content":"hi"} ` + "\n")
			}
			var arr []byte
			if tc.name == "empty messages" || tc.name == "empty messages with spaces" {
				arr = append([]byte(`[`), h[1:]...)
				if tc.name == "empty messages with spaces" {
					arr = append([]byte(`[  `), h[1:]...)
				}
			} else {
				arr = append(msgs, h...)
			}
			arr = append(arr, ']')
			want, err := sjson.SetRawBytes([]byte(tc.body), "messages", arr)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			if again := s.withHistory(); string(again) != string(got) {
				t.Fatalf("a second round differs: %s", again)
			}
		})
	}
}
