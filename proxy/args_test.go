package proxy

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// Arguments sent as JSON (an object, an array) become the string of that
// JSON, in a JSON answer and in a chunk; strings, null and text that only
// mentions "arguments" are left as they are.
func TestStringArgs(t *testing.T) {
	t.Parallel()
	answer := `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"a","type":"function","function":{"name":"f","arguments":{"x":1}}},` +
		`{"id":"b","type":"function","function":{"name":"g","arguments":"{\"y\":2}"}},` +
		`{"id":"c","type":"function","function":{"name":"h","arguments" : [1, 2]}}]},"finish_reason":"tool_calls"}]}`
	out := stringArgs([]byte(answer), "message")
	for i, want := range []string{`{"x":1}`, `{"y":2}`, `[1, 2]`} {
		a := gjson.GetBytes(out, "choices.0.message.tool_calls."+string(rune('0'+i))+".function.arguments")
		if a.Type != gjson.String || a.Str != want {
			t.Fatalf("call %d: %s in %s", i, a.Raw, out)
		}
	}
	chunk := `{"choices":[{"index":0,"delta":{"function_call":{"name":"f","arguments":{"x":1}}},"finish_reason":null}]}`
	if a := gjson.GetBytes(stringArgs([]byte(chunk), "delta"), "choices.0.delta.function_call.arguments"); a.Str != `{"x":1}` {
		t.Fatalf("legacy call: %s", a.Raw)
	}
	for _, same := range []string{
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"\"arguments\": {}"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":null}}]}}]}`,
	} {
		if got := stringArgs([]byte(same), "delta"); string(got) != same {
			t.Fatalf("changed %s into %s", same, got)
		}
	}
}

// FuzzStringArgs: never a panic, valid JSON stays valid, and every
// arguments member of a choice's calls is a string or null after.
func FuzzStringArgs(f *testing.F) {
	f.Add(`{"choices":[{"index":0,"message":{"tool_calls":[{"function":{"arguments":{"x":1}}}]}}]}`, true)
	f.Add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"x"}}]}}]}`, false)
	f.Add(`{"arguments":1}`, false)
	f.Fuzz(func(t *testing.T, body string, answer bool) {
		key := "delta"
		if answer {
			key = "message"
		}
		out := stringArgs([]byte(body), key)
		if !jsonvalid.Bytes([]byte(body)) {
			return
		}
		if !jsonvalid.Bytes(out) {
			t.Fatalf("%s gave invalid %s", body, out)
		}
		gjson.GetBytes(out, "choices").ForEach(func(_, ch gjson.Result) bool {
			ch.Get(key + ".tool_calls").ForEach(func(_, tc gjson.Result) bool {
				if a := tc.Get("function.arguments"); a.Exists() && a.Type != gjson.String && a.Type != gjson.Null && gjson.GetBytes([]byte(body), "choices").IsArray() {
					t.Fatalf("%s left arguments %s", body, a.Raw)
				}
				return true
			})
			return true
		})
	})
}

// FuzzDropNullCalls: never a panic, valid JSON stays valid, and no
// choice's message or delta keeps a null tool_calls or function_call (the
// first of a duplicated member, the one a reader takes); a body without a
// null call is returned as it is.
func FuzzDropNullCalls(f *testing.F) {
	f.Add(`{"choices":[{"index":0,"message":{"content":"hi","tool_calls":null}}]}`, true)
	f.Add(`{"choices":[{"message":{"function_call" :null,"tool_calls":[]}},{"message":{"tool_calls":null}}]}`, true)
	f.Add(`{"choices":[{"index":0,"delta":{"content":"x","tool_calls":null,"function_call":null}}]}`, false)
	f.Add(`{"choices":[{"message":{"content":"\"tool_calls\":null"}}]}`, true)
	f.Fuzz(func(t *testing.T, body string, answer bool) {
		key := "delta"
		if answer {
			key = "message"
		}
		out := dropNullCalls([]byte(body), key)
		if !hasNullCall([]byte(body)) && string(out) != body {
			t.Fatalf("%s changed to %s", body, out)
		}
		if !jsonvalid.Bytes([]byte(body)) {
			return
		}
		if !jsonvalid.Bytes(out) {
			t.Fatalf("%s gave invalid %s", body, out)
		}
		gjson.GetBytes(out, "choices").ForEach(func(_, ch gjson.Result) bool {
			for _, k := range nullCallKeys {
				m := ch.Get(key)
				if v := m.Get(k); v.Exists() && v.Type == gjson.Null && strings.Count(m.Raw, `"`+k+`"`) < 2 && gjson.GetBytes([]byte(body), "choices").IsArray() {
					t.Fatalf("%s kept %s null: %s", body, k, out)
				}
			}
			return true
		})
	})
}
