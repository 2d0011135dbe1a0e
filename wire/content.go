package wire

import (
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// ContentText is a chat message content's text: the string, or its text parts
// joined by newlines.
func ContentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var parts []string
	c.ForEach(func(_, p gjson.Result) bool {
		if t := p.Get("text"); t.Type == gjson.String {
			parts = append(parts, t.Str)
		}
		return true
	})
	return strings.Join(parts, "\n")
}

// FinishReason returns the reason a choice's finish_reason gives, "" when
// it gives none: null, absent, or the "" Ollama and SGLang send on every
// chunk, which ends nothing.
func FinishReason(choice gjson.Result) string {
	if fr := choice.Get("finish_reason"); fr.Type == gjson.String {
		return fr.Str
	}
	return ""
}

// ChunkHasContent reports whether a chat chunk carries something the client
// sees as the answer: a non-empty content (a string, or a list of parts as
// Mistral's reasoning models stream it), refusal or reasoning delta,
// tool_calls, a function_call or audio delta, or a finish_reason (a
// non-empty string). chunk is only read; any bytes are safe.
func ChunkHasContent(chunk []byte) bool {
	found := false
	// gjson.Get on a string view: GetBytes would copy the result, and
	// nothing read here outlives the call.
	gjson.Get(unsafe.String(unsafe.SliceData(chunk), len(chunk)), "choices").ForEach(func(_, c gjson.Result) bool {
		found = FinishReason(c) != "" || DeltaHasContent(c.Get("delta"))
		return !found
	})
	return found
}

// DeltaHasContent reports whether a chunk choice's delta carries something
// of the answer (ChunkHasContent, but for the finish_reason).
func DeltaHasContent(d gjson.Result) bool {
	if !d.IsObject() {
		return false
	}
	found := false
	d.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			found = (v.Type == gjson.String && v.Str != "") || (v.IsArray() && v.Get("0").Exists())
		case "refusal", "reasoning_content", "reasoning":
			found = v.Type == gjson.String && v.Str != ""
		case "tool_calls":
			found = v.IsArray() && v.Get("0").Exists()
		case "function_call", "audio":
			found = v.IsObject()
		}
		return !found
	})
	return found
}
