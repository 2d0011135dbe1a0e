package wire

import (
	"strconv"
	"unsafe"

	"github.com/llmgw/gateway/jsonstring"
)

// ChatSSE encodes a response as chat.completion.chunk objects, one per
// event (the SSE framing, "data: " and "[DONE]", is the sink's). It keeps
// the stream rules of docs/wire.md whatever the producer does: one id,
// created and model on every chunk (system_fingerprint and service_tier
// too, when known); a text's logprobs on its chunk; the role once; tool calls numbered
// densely in the order their headers come, fragments on the last call;
// one finish chunk of its own; "usage":null on choice chunks and one
// usage chunk last only when the client asked for usage. The zero value is
// not usable: see NewChatSSE. Not safe for concurrent use.
type ChatSSE struct {
	prefix    []byte // {"id":..,"object":"chat.completion.chunk","created":..,"model":..
	usage     bool
	roleSent  bool
	finished  bool
	usageSent bool
	calls     int // headers sent: the next call's index
}

// NewChatSSE returns the chunk encoder of the response h describes.
func NewChatSSE(h Header) *ChatSSE {
	w := &ChatSSE{}
	w.Reset(h)
	return w
}

// Reset makes w encode a new response, reusing its buffer.
func (w *ChatSSE) Reset(h Header) {
	p := w.prefix[:0]
	if need := 112 + len(h.ID) + len(h.Model) + len(h.Fingerprint) + len(h.ServiceTier); cap(p) < need {
		p = make([]byte, 0, need)
	}
	p = AppendHead(p, "chat.completion.chunk", h)
	p = AppendFingerprint(p, h.Fingerprint)
	p = AppendServiceTier(p, h.ServiceTier)
	*w = ChatSSE{prefix: p, usage: h.IncludeUsage}
}

// Encode appends e's chunk to dst, or nothing when the stream rules do not
// allow e here (see Encoder).
func (w *ChatSSE) Encode(dst []byte, e *Event) []byte {
	if w.finished && e.Kind != Usage {
		return dst
	}
	switch e.Kind {
	case Role:
		if w.roleSent {
			return dst
		}
		w.roleSent = true
		dst = w.open(dst)
		dst = append(dst, `{"role":"assistant","content":null}`...)
		return w.close(dst, "", nil)
	case Text:
		if len(e.Text) == 0 {
			return dst
		}
		dst = w.open(dst)
		dst = append(dst, `{"`...)
		dst = append(dst, e.Key...)
		dst = append(dst, `":`...)
		dst = appendString(dst, e.Text)
		dst = append(dst, '}')
		dst = appendChoiceEnd(dst, e.Logprobs, "", w.usage)
		return append(dst, '}')
	case CallHeader:
		w.calls++
		dst = w.open(dst)
		dst = append(dst, `{"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(w.calls-1), 10)
		dst = append(dst, `,"id":`...)
		dst = jsonstring.Append(dst, e.ID)
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = jsonstring.Append(dst, e.Name)
		dst = append(dst, `,"arguments":""}}]}`...)
		return w.close(dst, "", nil)
	case CallArgs:
		if w.calls == 0 || len(e.Text) == 0 {
			return dst
		}
		dst = w.open(dst)
		dst = append(dst, `{"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(w.calls-1), 10)
		dst = append(dst, `,"function":{"arguments":`...)
		dst = appendString(dst, e.Text)
		dst = append(dst, `}}]}`...)
		return w.close(dst, "", nil)
	case Extra:
		if len(e.Raw) == 0 {
			return dst
		}
		dst = w.open(dst)
		dst = append(dst, '{')
		dst = append(dst, e.Raw...)
		dst = append(dst, '}')
		return w.close(dst, "", nil)
	case Finish:
		w.finished = true
		dst = w.open(dst)
		dst = append(dst, "{}"...)
		finish := e.Finish
		if finish == "" {
			finish = "stop"
		}
		dst = AppendChoiceEnd(dst, finish, w.usage)
		if len(e.Raw) > 0 {
			dst = append(dst, ',')
			dst = append(dst, e.Raw...)
		}
		dst = appendTrace(dst, e.Trace)
		return append(dst, '}')
	case Usage:
		if !w.usage || w.usageSent || !w.finished {
			return dst
		}
		w.usageSent = true
		dst = append(dst, w.prefix...)
		dst = append(dst, `,"choices":[],"usage":`...)
		dst = append(dst, e.Raw...)
		dst = appendTrace(dst, e.Trace)
		return append(dst, '}')
	}
	return dst
}

// open starts a choice chunk; its delta object follows.
func (w *ChatSSE) open(dst []byte) []byte {
	dst = append(dst, w.prefix...)
	return append(dst, `,"choices":[{"index":0,"delta":`...)
}

// close ends a choice chunk; finish "" is null.
func (w *ChatSSE) close(dst []byte, finish string, trace []byte) []byte {
	dst = AppendChoiceEnd(dst, finish, w.usage)
	dst = appendTrace(dst, trace)
	return append(dst, '}')
}

func appendTrace(dst, trace []byte) []byte {
	if len(trace) == 0 {
		return dst
	}
	dst = append(dst, `,"x_gateway":`...)
	return append(dst, trace...)
}

// appendString appends s as a JSON string without copying it to a string.
func appendString(dst, s []byte) []byte {
	return jsonstring.Append(dst, unsafe.String(unsafe.SliceData(s), len(s))) // read-only view
}
