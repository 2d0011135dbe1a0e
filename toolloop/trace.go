package toolloop

import (
	"strconv"
	"time"

	"github.com/llmgw/gateway/pipeline"
)

// trace records what the loop did, for the x_gateway field (tool_trace).
type trace struct {
	calls  []traceCall
	rounds []roundTrace
}

// roundTrace is one model call of the loop: the model that answered and the
// upstream attempts it took (retries and fallbacks; -1 = not reported, the
// route has no fallback middleware).
type roundTrace struct {
	model    string
	attempts int
	// meta is the round's Meta, read when the trace is written: a
	// prompted model's re-asks within the round (a stream's come after
	// the round began) are counted there.
	meta *pipeline.Meta
}

type traceCall struct {
	name     string
	args     []byte
	status   string
	duration time.Duration
}

// appendCallOf appends the members that show a tool call in x_gateway:
// "name" and "arguments" (the arguments as a JSON string, as the model
// wrote them).
func appendCallOf(dst []byte, name string, args []byte) []byte {
	dst = append(dst, `"name":`...)
	dst = appendJSONString(dst, []byte(name))
	dst = append(dst, `,"arguments":`...)
	return appendJSONString(dst, args)
}

// appendTraceMember starts a member of the x_gateway object tr, whose
// closing brace it removes (the caller writes the value and closes the
// object again); a nil tr starts the object. open is the member's quoted
// key, its colon and what starts its value.
func appendTraceMember(tr []byte, open string) []byte {
	if tr == nil {
		tr = append(tr, '{')
	} else {
		tr = append(tr[:len(tr)-1], ',')
	}
	return append(tr, open...)
}

// appendJSON appends the x_gateway object for the final response or chunk.
// edits are context editing's totals for the request (see contextedit):
// a streamed response's headers left before later rounds were edited, so
// the trace is where a streaming client sees them.
func (t *trace) appendJSON(dst []byte, iterations int, stop string, cleared, saved, dropped int) []byte {
	dst = append(dst, `{"tool_calls":[`...)
	for i, c := range t.calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendCallOf(append(dst, '{'), c.name, c.args)
		dst = append(dst, `,"status":`...)
		dst = appendJSONString(dst, []byte(c.status))
		dst = append(dst, `,"duration_ms":`...)
		dst = strconv.AppendInt(dst, c.duration.Milliseconds(), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"iterations":`...)
	dst = strconv.AppendInt(dst, int64(iterations), 10)
	dst = append(dst, `,"rounds":[`...)
	for i, r := range t.rounds {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if r.model != "" {
			dst = append(dst, `"model":`...)
			dst = appendJSONString(dst, []byte(r.model))
			if r.attempts >= 0 {
				dst = append(dst, ',')
			}
		}
		if r.attempts >= 0 {
			dst = append(dst, `"attempts":`...)
			dst = strconv.AppendInt(dst, int64(r.attempts), 10)
		}
		if n := r.meta.Reasks(); n > 0 {
			if r.model != "" || r.attempts >= 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `"reasks":`...)
			dst = strconv.AppendInt(dst, int64(n), 10)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	dst = append(dst, `,"stop_reason":`...)
	dst = appendJSONString(dst, []byte(stop))
	if cleared > 0 || dropped > 0 {
		dst = append(dst, `,"context_edits":{"cleared":`...)
		dst = strconv.AppendInt(dst, int64(cleared), 10)
		dst = append(dst, `,"tokens_saved":`...)
		dst = strconv.AppendInt(dst, int64(saved), 10)
		dst = append(dst, `,"dropped_messages":`...)
		dst = strconv.AppendInt(dst, int64(dropped), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}
