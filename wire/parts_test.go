package wire

import "testing"

func TestParts(t *testing.T) {
	t.Parallel()
	h := Header{ID: "c\"1", Created: 7, Model: "m", Fingerprint: "fp"}
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"head", AppendHead(nil, "chat.completion.chunk", h), `{"id":"c\"1","object":"chat.completion.chunk","created":7,"model":"m"`},
		{"fingerprint", AppendFingerprint(nil, "fp"), `,"system_fingerprint":"fp"`},
		{"no fingerprint", AppendFingerprint(nil, ""), ``},
		{"choice end", AppendChoiceEnd(nil, "", false), `,"logprobs":null,"finish_reason":null}]`},
		{"choice end with usage", AppendChoiceEnd(nil, "stop", true), `,"logprobs":null,"finish_reason":"stop"}],"usage":null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if string(tt.got) != tt.want {
				t.Fatalf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}
