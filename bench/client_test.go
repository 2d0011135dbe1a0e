package main

import (
	"bytes"
	"testing"
)

// TestContentDelta: what counts as the first content token.
func TestContentDelta(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		want       bool
	}{
		{"role with empty content", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, false},
		{"text", `{"choices":[{"index":0,"delta":{"content":"The "}}]}`, true},
		{"tool call", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":""}}]}}]}`, true},
		{"empty tool calls", `{"choices":[{"index":0,"delta":{"tool_calls":[]}}]}`, false},
		{"null content", `{"choices":[{"index":0,"delta":{"content":null}}]}`, false},
		{"second choice", `{"choices":[{"index":0,"delta":{}},{"index":1,"delta":{"content":"x"}}]}`, true},
		{"finish only", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, false},
		{"usage only", `{"choices":[],"usage":{"total_tokens":3}}`, false},
		{"done", `[DONE]`, false},
		{"not json", `{"choices":[{"delta":{"content":"x"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := contentDelta([]byte(tc.data)); got != tc.want {
				t.Fatalf("contentDelta(%s) = %v, want %v", tc.data, got, tc.want)
			}
		})
	}
}

// FuzzContentDelta: any bytes are safe, the answer does not depend on
// surrounding whitespace, and content is only found where its key is.
func FuzzContentDelta(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"index":0,"delta":{"content":"The "}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`,
		`{"choices":[{"delta":{"role":"assistant","content":""}}]}`,
		`[DONE]`, `{"choices":{"delta":1}}`, "\xff{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := contentDelta(data)
		if got && !bytes.Contains(data, []byte("content")) && !bytes.Contains(data, []byte("tool_calls")) {
			t.Fatalf("content found in %q, which names neither content nor tool_calls", data)
		}
		padded := append(append([]byte(" \n"), data...), ' ')
		if json := bytes.TrimSpace(data); len(json) > 0 && json[0] == '{' && contentDelta(padded) != got {
			t.Fatalf("contentDelta(%q) = %v, with whitespace around it %v", data, got, !got)
		}
	})
}
