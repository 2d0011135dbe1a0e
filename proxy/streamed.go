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
// gateway's own JSON answers of a stream are (wire.ChatJSON). It fails as
// the same stream relayed would: an error event is the error it says, a
// stream with no content (no text, no call) and no finish is UpstreamCut
// wrapping pipeline.ErrNoContent, and one that ends with neither a finish
// nor [DONE] is cut. A finish the upstream left out, after [DONE], is
// tool_calls when the answer called a tool, as the relay's (finishes.due).
// Chunks of several choices (only choice 0 would be kept) are malformed.
// The stream of the opposite case, JSON for a stream request, is
// completionStream.
func (pc *providerClient) streamedAnswer(body []byte, model string, msgs pipeline.MessageMap) ([]byte, error) {
	rd := sse.NewReader(bytes.NewReader(body), maxEventBytes)
	var dec wire.ChunkDecoder
	var enc *wire.ChatJSON
	var content, finished, done bool
	// The calls are gathered by the index the decoder gives each (in the
	// order their headers came) and handed to enc at the end: ChatJSON adds
	// arguments to the last call, and parallel calls' fragments may
	// interleave.
	type pendingCall struct {
		id, name string
		args     []byte
	}
	var calls []pendingCall
	emit := func(e *wire.Event) {
		switch e.Kind {
		case wire.Text:
			content = content || len(e.Text) > 0
		case wire.CallHeader:
			calls = append(calls, pendingCall{id: e.ID, name: e.Name})
			return
		case wire.CallArgs:
			if e.Index >= 0 && e.Index < len(calls) {
				calls[e.Index].args = append(calls[e.Index].args, e.Text...)
			}
			return
		case wire.Finish:
			finished = true
		}
		enc.Encode(nil, e)
	}
	for !done {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, sse.ErrEventTooLarge) {
				return nil, pc.malformed(err)
			}
			return nil, pc.bodyError(err) // the body ended inside an event: cut, as the relay reports it
		}
		data := bytes.TrimSpace(ev.Data)
		if string(ev.Name) == "error" {
			return nil, pc.errorAnswer(data, errErrorEvent, msgs)
		}
		switch {
		case len(data) == 0:
			continue
		case sse.IsDone(data):
			done = true
			continue
		case data[0] != '{' || !jsonvalid.Bytes(data):
			return nil, pc.malformed(errStreamedNotChunks)
		}
		res := gjson.GetManyBytes(data, "error", "choices.#.index", "id", "created", "system_fingerprint", "service_tier", "choices.0", "usage")
		if res[0].Exists() && res[0].Type != gjson.Null {
			return nil, pc.errorAnswer(data, errErrorEvent, msgs)
		}
		if !res[6].Exists() && !res[7].IsObject() {
			continue // no choice and no usage: a keep-alive, or Azure's prompt-filter chunk (id "", created 0)
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
		dec.Decode(data, emit)
	}
	for i, c := range calls {
		enc.Encode(nil, &wire.Event{Kind: wire.CallHeader, Index: i, ID: c.id, Name: c.name})
		enc.Encode(nil, &wire.Event{Kind: wire.CallArgs, Index: i, Text: c.args})
	}
	switch {
	case !content && len(calls) == 0 && !finished:
		return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: pc.cfg.Name, Err: pipeline.ErrNoContent}
	case !finished && !done:
		return nil, pc.bodyError(io.ErrUnexpectedEOF)
	case !finished:
		f := "stop"
		if len(calls) > 0 {
			f = "tool_calls"
		}
		enc.Encode(nil, &wire.Event{Kind: wire.Finish, Finish: f})
	}
	return enc.Encode(nil, &wire.Event{Kind: wire.End}), nil
}

// malformed is the failure of an upstream answer the gateway cannot read.
func (pc *providerClient) malformed(err error) error {
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: pc.cfg.Name, Err: err}
}

var (
	errStreamedNotChunks = errors.New("the upstream answered a JSON request with an event stream of something other than chat chunks")
	errStreamedChoices   = errors.New("the upstream answered a JSON request with an event stream of several choices")
)
