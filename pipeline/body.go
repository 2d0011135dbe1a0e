package pipeline

import (
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// InvalidJSON is the error of a request body jsonvalid refuses: one nested
// past its bound is named so, not called invalid.
func InvalidJSON(body []byte) *Error {
	if jsonvalid.TooDeep(body) {
		return BadRequest("", "the request body nests arrays and objects more than %d levels deep", jsonvalid.MaxDepth)
	}
	return BadRequest("", "the request body is not valid JSON")
}

// NotUTF8 is the error of a JSON request body whose text is not UTF-8.
func NotUTF8() *Error { return BadRequest("", "the request body is not valid UTF-8") }

// RequestObject checks the body of a request the gateway reads itself (a
// chat or Responses request) and returns it parsed, as a view of body: a
// JSON object, its nesting bounded, its text valid UTF-8. JSON text is
// UTF-8: a broken byte passed on would reach the upstream, and an answer
// that echoes it (a Responses object's instructions) would be unreadable to
// the client's JSON parser.
func RequestObject(body []byte) (gjson.Result, error) {
	if len(body) == 0 {
		return gjson.Result{}, BadRequest("", "the request body is empty; expected a JSON object")
	}
	if !jsonvalid.Bytes(body) {
		return gjson.Result{}, InvalidJSON(body)
	}
	if !utf8.Valid(body) {
		return gjson.Result{}, NotUTF8()
	}
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))) // body is never written while read from
	if !root.IsObject() {
		return gjson.Result{}, BadRequest("", "the request body must be a JSON object")
	}
	return root, nil
}
