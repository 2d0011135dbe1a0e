package toolloop

import (
	"strconv"
	"time"
)

// trace records what the loop did, for the x_gateway field (tool_trace).
type trace struct {
	calls []traceCall
}

type traceCall struct {
	name     string
	args     []byte
	status   string
	duration time.Duration
}

// appendJSON appends `,"x_gateway":{...}` for the final response or chunk.
func (t *trace) appendJSON(dst []byte, iterations int, stop string) []byte {
	dst = append(dst, `,"x_gateway":{"tool_calls":[`...)
	for i, c := range t.calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = appendJSONString(dst, []byte(c.name))
		dst = append(dst, `,"arguments":`...)
		dst = appendJSONString(dst, c.args)
		dst = append(dst, `,"status":`...)
		dst = appendJSONString(dst, []byte(c.status))
		dst = append(dst, `,"duration_ms":`...)
		dst = strconv.AppendInt(dst, c.duration.Milliseconds(), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"iterations":`...)
	dst = strconv.AppendInt(dst, int64(iterations), 10)
	dst = append(dst, `,"stop_reason":`...)
	dst = appendJSONString(dst, []byte(stop))
	return append(dst, '}')
}
