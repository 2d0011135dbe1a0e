package sse

// Done is the stream terminator, exactly as every SDK accepts it (Node
// compares the whole data string). It is shared: never modify it.
var Done = []byte("data: [DONE]\n\n")

// KeepAlive is the keep-alive comment event. Comments are the only keep-alive
// form every SDK ignores (a data-less "event: ping" crashes Node and Python).
// It is shared: never modify it.
var KeepAlive = []byte(": keep-alive\n\n")

// AppendData appends the event "data: <data>\n\n" to dst and returns the
// extended slice. It does not allocate when dst has room.
//
// data must be a single line: chat chunks are single-line JSON (as produced by
// encoding/json, gjson and sjson), so no check is made. A '\n' or '\r' inside
// data would split it into several fields and corrupt the stream. data is
// copied; the caller keeps ownership of both slices.
func AppendData(dst, data []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// AppendComment appends the comment event ": <text>\n\n" to dst and returns
// the extended slice. text must be a single line. It does not allocate when
// dst has room.
func AppendComment(dst, text []byte) []byte {
	dst = append(dst, ": "...)
	dst = append(dst, text...)
	return append(dst, "\n\n"...)
}

// AppendError appends the mid-stream error event
// "event: error\ndata: <errorJSON>\n\n" to dst and returns the extended slice.
// errorJSON must be the single-line envelope {"error":{"message","type",
// "param","code"}}: the one form all three SDKs detect (docs/wire.md rule 17).
// The stream must be closed after it, without [DONE]. It does not allocate
// when dst has room.
func AppendError(dst, errorJSON []byte) []byte {
	dst = append(dst, "event: error\ndata: "...)
	dst = append(dst, errorJSON...)
	return append(dst, "\n\n"...)
}
