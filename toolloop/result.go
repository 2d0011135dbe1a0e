package toolloop

import (
	"unsafe"

	"errors"
	"strconv"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"

	"github.com/tidwall/gjson"
)

// ToolError is a tool failure whose Message is safe to show to the model
// (and so to the client through the model). Detail is shown only when
// tool_loop.include_detailed_errors is set. Kind is a short machine word
// ("invalid_arguments", "timeout", "unknown_tool", ...).
type ToolError struct {
	Kind    string
	Message string
	Field   string // JSON pointer of the offending argument, "" if none
	Detail  error
}

func (e *ToolError) Error() string {
	if e.Detail != nil {
		return e.Message + ": " + e.Detail.Error()
	}
	return e.Message
}

func (e *ToolError) Unwrap() error { return e.Detail }

// okContent wraps data (the executor's output) as {"status":"ok","data":...}:
// data that is valid JSON is embedded, anything else becomes a JSON string.
// The gateway's configured secrets in it are masked (observe.Secrets), in
// JSON strings however escaped (RedactEscaped): a service that echoes the
// credentials it was sent, or an MCP server quoting its env, must not hand
// them to the model and through it to the client.
func okContent(data []byte) []byte {
	data = observe.Secrets.RedactEscaped(data)
	out := make([]byte, 0, len(data)+32)
	out = append(out, `{"status":"ok","data":`...)
	if len(data) > 0 && jsonvalid.Bytes(data) {
		out = append(out, data...)
	} else {
		out = appendJSONString(out, data)
	}
	return append(out, '}')
}

// errContent renders err as {"status":"error","error":{...}}. Only the safe
// message of a *ToolError is shown unless detailed is set; configured
// secrets are masked in either, as in okContent.
func errContent(err error, detailed bool) []byte {
	var te *ToolError
	if !errors.As(err, &te) {
		te = &ToolError{Kind: "tool_error", Message: "the tool failed", Detail: err}
	}
	msg := te.Message
	if detailed && te.Detail != nil {
		msg += ": " + te.Detail.Error()
	}
	msg = string(observe.Secrets.RedactEscaped([]byte(msg)))
	out := make([]byte, 0, len(msg)+64)
	out = append(out, `{"status":"error","error":{"type":`...)
	out = strconv.AppendQuote(out, te.Kind)
	out = append(out, `,"message":`...)
	out = appendJSONString(out, []byte(msg))
	if te.Field != "" {
		out = append(out, `,"field":`...)
		out = appendJSONString(out, []byte(te.Field))
	}
	return append(out, "}}"...)
}

// resultText is what a result says in plain text: the data of an ok result
// (a string's value, other JSON as is) or the error message.
func resultText(content []byte) string {
	r := gjson.ParseBytes(content)
	if r.Get("status").String() == "error" {
		return r.Get("error.message").String()
	}
	d := r.Get("data")
	if d.Type == gjson.String {
		return d.String()
	}
	return d.Raw
}

// appendJSONString appends s as a JSON string literal (see jsonstring.Append).
func appendJSONString(dst, s []byte) []byte {
	return jsonstring.Append(dst, unsafe.String(unsafe.SliceData(s), len(s))) // read-only view
}
