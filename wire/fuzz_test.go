package wire

import (
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wiretest"
)

// FuzzChatSSE: whatever text, names and fragments the producer passes
// (they come from upstreams and tools), the chunks are valid JSON that
// keep the stream rules, and the text a client accumulates is the text
// given when it was valid UTF-8.
func FuzzChatSSE(f *testing.F) {
	f.Add("hello", "f", `{"a":1}`, "\x00\"\\\u2028😀")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, text, name, args, id string) {
		raw, _ := encodeAll(Header{ID: "c" + id, Created: 1, Model: "m" + name}, []Event{{Kind: Role},
			{Kind: Text, Key: "content", Text: []byte(text)},
			{Kind: CallHeader, ID: "call_" + id, Name: "n" + name}, {Kind: CallArgs, Text: []byte(args)},
			{Kind: Finish, Finish: "tool_calls"}})
		sum, err := wiretest.CheckStream(raw, wiretest.Options{})
		if err != nil {
			t.Fatalf("%v\n%q", err, raw)
		}
		if utf8.ValidString(text) && sum.Content != text {
			t.Fatalf("content %q, want %q", sum.Content, text)
		}
		if utf8.ValidString(args) && len(sum.ToolCalls) == 1 && sum.ToolCalls[0].Arguments != args {
			t.Fatalf("arguments %q, want %q", sum.ToolCalls[0].Arguments, args)
		}
	})
}

// FuzzTopFields: on any valid JSON document (request bodies come from
// clients) TopFields finds what gjson.Get finds for each key.
func FuzzTopFields(f *testing.F) {
	f.Add(`{"model":"m","n":1,"a":{"n":2}}`)
	f.Add(`{"n":1,"n":2,"\u006d\u006fdel":"x"}`)
	f.Add(`[{"n":1}]`)
	keys := []string{"model", "n", "a"}
	f.Fuzz(func(t *testing.T, doc string) {
		if !gjson.Valid(doc) {
			return
		}
		out := make([]gjson.Result, len(keys))
		TopFields([]byte(doc), keys, out)
		for i, k := range keys {
			if want := gjson.Get(doc, k); out[i].Raw != want.Raw {
				t.Fatalf("%s: %q, gjson.Get %q in %s", k, out[i].Raw, want.Raw, doc)
			}
		}
	})
}
