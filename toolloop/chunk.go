package toolloop

import (
	"io"
	"strconv"

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// chunkWriter encodes the chunks the client sees: one id/created/model on
// every chunk (§3.4 rule 1), "usage":null on choice chunks only when the
// client asked for usage. Not safe for concurrent use.
type chunkWriter struct {
	prefix    []byte // {"id":..,"object":"chat.completion.chunk","created":..,"model":..
	usageNull bool
}

func newChunkWriter(id string, created int64, model string, includeUsage bool) chunkWriter {
	p := make([]byte, 0, 96+len(id)+len(model))
	p = append(p, `{"id":`...)
	p = appendJSONString(p, []byte(id))
	p = append(p, `,"object":"chat.completion.chunk","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = appendJSONString(p, []byte(model))
	return chunkWriter{prefix: p, usageNull: includeUsage}
}

// choice appends a chunk with one choice whose delta is the raw JSON object
// delta; finish is "" for null. extra, when set, is appended as top-level
// members (",\"x_gateway\":{...}").
func (w *chunkWriter) choice(dst, delta []byte, finish string, extra []byte) []byte {
	dst = append(dst, w.prefix...)
	dst = append(dst, `,"choices":[{"index":0,"delta":`...)
	dst = append(dst, delta...)
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, []byte(finish))
	}
	dst = append(dst, "}]"...)
	if w.usageNull {
		dst = append(dst, `,"usage":null`...)
	}
	dst = append(dst, extra...)
	return append(dst, '}')
}

// usage appends the one usage chunk (choices []).
func (w *chunkWriter) usage(dst []byte, u *usage, extra []byte) []byte {
	dst = append(dst, w.prefix...)
	dst = append(dst, `,"choices":[],"usage":`...)
	dst = u.appendJSON(dst)
	dst = append(dst, extra...)
	return append(dst, '}')
}

// Delta encoders. Each appends one delta object.

func appendRoleDelta(dst []byte) []byte {
	return append(dst, `{"role":"assistant","content":null}`...)
}

// appendTextDelta appends {"<key>":<quoted>} where quoted is already a JSON
// string token (the upstream's raw token, or appendJSONString output).
func appendTextDelta(dst []byte, key string, quoted []byte) []byte {
	dst = append(dst, `{"`...)
	dst = append(dst, key...)
	dst = append(dst, `":`...)
	dst = append(dst, quoted...)
	return append(dst, '}')
}

// appendCallHeader appends the first delta of a client tool call: index,
// id, type, the complete name and empty arguments (§3.4 rule 3).
func appendCallHeader(dst []byte, c *call) []byte {
	dst = append(dst, `{"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(c.outIndex), 10)
	dst = append(dst, `,"id":`...)
	dst = appendJSONString(dst, []byte(c.id))
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = appendJSONString(dst, []byte(c.name))
	return append(dst, `,"arguments":""}}]}`...)
}

// appendCallArgs appends an arguments-only delta for a client call.
func appendCallArgs(dst []byte, c *call, frag []byte) []byte {
	dst = append(dst, `{"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(c.outIndex), 10)
	dst = append(dst, `,"function":{"arguments":`...)
	dst = appendJSONString(dst, frag)
	return append(dst, `}}]}`...)
}

// asStream returns resp's stream, or a one-chunk stream made from a
// chat.completion body (a model layer may answer from a cache).
func asStream(resp *pipeline.Response) pipeline.Stream {
	if resp.Stream != nil {
		return resp.Stream
	}
	chunk := bodyAsChunk(resp.Body)
	done := false
	return &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
		if done {
			return nil, io.EOF
		}
		done = true
		return chunk, nil
	}}
}

func bodyAsChunk(body []byte) []byte {
	res := gjson.GetManyBytes(body, "id", "created", "model", "choices.0.message.content", "choices.0.message.tool_calls", "choices.0.finish_reason", "usage")
	b := make([]byte, 0, len(body)+64)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, []byte(res[0].String()))
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, res[1].Int(), 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, []byte(res[2].String()))
	b = append(b, `,"choices":[{"index":0,"delta":{"content":`...)
	b = appendJSONString(b, []byte(res[3].String()))
	calls := callsFromMessage(res[4], false) // re-read by the accumulator, which assigns ids
	if len(calls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"id":`...)
			b = appendJSONString(b, []byte(c.id))
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendJSONString(b, []byte(c.name))
			b = append(b, `,"arguments":`...)
			b = appendJSONString(b, c.args)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	b = append(b, `},"finish_reason":`...)
	b = appendJSONString(b, []byte(res[5].String()))
	b = append(b, `}],"usage":`...)
	if res[6].IsObject() {
		b = append(b, res[6].Raw...)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}
