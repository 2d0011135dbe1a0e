package proxy

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Some upstreams send a tool call's arguments as a JSON object, not as the
// string of it. The chat form's arguments are a string: a typed SDK fails
// to read the answer, or an accumulator concatenates objects. The tool loop
// and the response guardrails already read such arguments as the string of
// their JSON; the answers relayed as they are get the same: the member
// becomes the string of its JSON text, in a JSON answer and in a chunk.

var argsKey = []byte(`"arguments"`)

// hasRawArgs reports whether body may hold an "arguments" member whose
// value is not a string (nor null); false means it holds none (one byte
// search on a chunk without calls). Inside a string a quote is escaped, so
// a match is a key or a value "arguments" (a false alarm costs a parse).
func hasRawArgs(body []byte) bool {
	for i := 0; ; {
		j := bytes.Index(body[i:], argsKey)
		if j < 0 {
			return false
		}
		i += j + len(argsKey)
		v := skipSpace(body, i)
		if v == len(body) || body[v] != ':' {
			continue
		}
		if v = skipSpace(body, v+1); v < len(body) && body[v] != '"' && body[v] != 'n' {
			return true
		}
	}
}

// stringArgs returns body, a JSON answer (key "message") or a chunk (key
// "delta"), with each choice's tool calls' (and legacy function_call's)
// arguments that are not a string made the string of their JSON; body
// itself when there are none.
func stringArgs(body []byte, key string) []byte {
	if !hasRawArgs(body) {
		return body
	}
	type edit struct {
		path string
		raw  string
	}
	var edits []edit
	gjson.GetBytes(body, "choices").ForEach(func(ci, ch gjson.Result) bool {
		base := "choices." + strconv.Itoa(int(ci.Int())) + "." + key
		note := func(path string, a gjson.Result) {
			if a.Exists() && a.Type != gjson.String && a.Type != gjson.Null {
				edits = append(edits, edit{path, a.Raw})
			}
		}
		ch.Get(key + ".tool_calls").ForEach(func(ti, tc gjson.Result) bool {
			note(base+".tool_calls."+strconv.Itoa(int(ti.Int()))+".function.arguments", tc.Get("function.arguments"))
			return true
		})
		note(base+".function_call.arguments", ch.Get(key+".function_call.arguments"))
		return true
	})
	for _, e := range edits {
		if out, err := sjson.SetBytes(body, e.path, e.raw); err == nil {
			body = out
		}
	}
	return body
}

// Some upstreams (SGLang, LiteLLM, Mistral) send "tool_calls": null (or
// "function_call": null) on a message or delta that has no call. In the
// chat schema both are an object or array when present, never null: the
// null member is left out (a typed client reads either as no call; a
// schema check refuses the null).
var nullCallKeys = [...]string{"tool_calls", "function_call"}

// callSuffix ends both keys: one search finds either.
var callSuffix = []byte(`_call`)

// hasNullCall reports whether body may hold a "tool_calls" or
// "function_call" member whose value is null; false means it holds none
// (one byte search on a chunk or answer without calls).
func hasNullCall(body []byte) bool {
	for i := 0; ; {
		j := bytes.Index(body[i:], callSuffix)
		if j < 0 {
			return false
		}
		i += j + len(callSuffix)
		if i < len(body) && body[i] == 's' {
			i++
		}
		if i == len(body) || body[i] != '"' {
			continue
		}
		v := skipSpace(body, i+1)
		if v == len(body) || body[v] != ':' {
			continue
		}
		if bytes.HasPrefix(body[skipSpace(body, v+1):], finishNull) {
			return true
		}
	}
}

// dropNullCalls returns body, a JSON answer (key "message") or a chunk (key
// "delta"), without its choices' null tool_calls and function_call
// members; body itself when it has none.
func dropNullCalls(body []byte, key string) []byte {
	if !hasNullCall(body) {
		return body
	}
	choices := gjson.GetBytes(body, "choices")
	if !choices.IsArray() {
		return body
	}
	var drop []string
	choices.ForEach(func(ci, ch gjson.Result) bool {
		for _, k := range nullCallKeys {
			if v := ch.Get(key + "." + k); v.Type == gjson.Null && v.Exists() {
				drop = append(drop, "choices."+strconv.Itoa(int(ci.Int()))+"."+key+"."+k)
			}
		}
		return true
	})
	for _, path := range drop {
		if out, err := sjson.DeleteBytes(body, path); err == nil {
			body = out
		}
	}
	return body
}
