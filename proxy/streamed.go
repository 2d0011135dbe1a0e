package proxy

import (
	"bytes"
	"errors"
	"io"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wire"
)

// streamedAnswer is the chat.completion that body, an event stream an
// upstream sent for a request that asked for JSON (a server that always
// streams), holds: its chunks decoded and accumulated under model, as the
// gateway's own JSON answers of a stream are (wire.ChatJSON). An error
// event is the failure it is in a stream; a body with no chunk, or with
// chunks of several choices (only choice 0 would be kept), is malformed.
// The stream of the opposite case, JSON for a stream request, is
// completionStream.
func (pc *providerClient) streamedAnswer(body []byte, model string, msgs pipeline.MessageMap) ([]byte, error) {
	rd := sse.NewReader(bytes.NewReader(body), maxEventBytes)
	var dec wire.ChunkDecoder
	var enc *wire.ChatJSON
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, pc.malformed(err) // an event over maxEventBytes: the body is all here
		}
		data := bytes.TrimSpace(ev.Data)
		if string(ev.Name) == "error" {
			return nil, pc.errorAnswer(data, errErrorEvent, msgs)
		}
		if len(data) == 0 {
			continue
		}
		if sse.IsDone(data) {
			break
		}
		if data[0] != '{' || !jsonvalid.Bytes(data) {
			return nil, pc.malformed(errStreamedNotChunks)
		}
		res := gjson.GetManyBytes(data, "error", "choices.#.index", "id", "created", "system_fingerprint", "service_tier")
		if res[0].Exists() && res[0].Type != gjson.Null {
			return nil, pc.errorAnswer(data, errErrorEvent, msgs)
		}
		several := false
		res[1].ForEach(func(_, i gjson.Result) bool {
			several = i.Int() != 0
			return !several
		})
		if several {
			return nil, pc.malformed(errStreamedChoices)
		}
		if enc == nil {
			enc = wire.NewChatJSON(wire.Header{ID: res[2].Str, Created: res[3].Int(), Model: model, Fingerprint: res[4].Str, ServiceTier: res[5].Str})
		}
		dec.Decode(data, func(e *wire.Event) { enc.Encode(nil, e) })
	}
	if enc == nil {
		return nil, pc.malformed(errStreamedNotChunks)
	}
	return enc.Encode(nil, &wire.Event{Kind: wire.End}), nil
}

// malformed is the failure of an upstream answer the gateway cannot read.
func (pc *providerClient) malformed(err error) error {
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: pc.cfg.Name, Err: err}
}

var (
	errStreamedNotChunks = errors.New("the upstream answered a JSON request with an event stream of no chat chunks")
	errStreamedChoices   = errors.New("the upstream answered a JSON request with an event stream of several choices")
)
