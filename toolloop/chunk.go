package toolloop

import (
	"io"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

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
	res := readCompletion(body)
	b := make([]byte, 0, len(body)+64)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, []byte(res.id.String()))
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, res.created.Int(), 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, []byte(res.model.String()))
	for _, f := range [...]struct {
		key string
		v   gjson.Result
	}{{`,"system_fingerprint":`, res.fingerprint}, {`,"service_tier":`, res.tier}} {
		if f.v.Type == gjson.String {
			b = append(b, f.key...)
			b = appendJSONString(b, []byte(f.v.Str))
		}
	}
	b = append(b, `,"choices":[{"index":0,"delta":{"content":`...)
	b = appendJSONString(b, []byte(res.content.String()))
	calls := callsFromMessage(res.toolCalls, false) // re-read by the accumulator, which assigns ids
	if len(calls) > 0 {
		b = append(b, `,"tool_calls":`...)
		b = appendToolCalls(b, calls, true)
	}
	b = append(b, `},"logprobs":`...)
	if res.logprobs.IsObject() {
		b = append(b, res.logprobs.Raw...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"finish_reason":`...)
	b = appendJSONString(b, []byte(res.finish.String()))
	b = append(b, `}],"usage":`...)
	if res.usage.IsObject() {
		b = append(b, res.usage.Raw...)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}
