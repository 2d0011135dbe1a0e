package anthropic

import (
	"errors"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// errNotMessage is the cause of a response body that is not a message.
var errNotMessage = errors.New("anthropic: response body is not a message")

// DecodeMessage returns the chat.completion of a Messages response body:
// text blocks are the content, thinking blocks the reasoning_content,
// tool_use blocks the tool calls (input as arguments), stop_reason the
// finish_reason and usage the chat usage; redacted_thinking and other
// blocks are not shown. That is what StreamDecoder's chunks of the same
// message accumulate to: a request answers the same streamed or not. h
// gives created and the client's model; the id is the message's. A body
// that is not a message is an UpstreamMalformed error. body is only read;
// the result is a new slice.
func DecodeMessage(provider string, body []byte, h wire.Header) ([]byte, error) {
	return DecodeMessageStopping(provider, body, h, nil)
}

// DecodeMessageStopping is DecodeMessage with the local stop sequences of
// the request (LocalStops) applied to the answer's content.
func DecodeMessageStopping(provider string, body []byte, h wire.Header, stops []string) ([]byte, error) {
	if !jsonvalid.Bytes(body) {
		return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: provider, Err: errNotMessage}
	}
	root := gjson.ParseBytes(body)
	if root.Get("type").Str == "error" {
		return nil, eventError(provider, body)
	}
	content := root.Get("content")
	if !root.IsObject() || !content.IsArray() {
		return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: provider, Err: errNotMessage}
	}
	if id := root.Get("id").Str; id != "" {
		h.ID = id
	}
	j := wire.NewChatJSON(h)
	var out []byte
	st := newStopper(stops)
	e := wire.Event{Kind: wire.Role}
	out = encodeStopping(out, j, st, &e)
	bad := false
	content.ForEach(func(_, b gjson.Result) bool {
		switch b.Get("type").Str {
		case "text":
			if t := b.Get("text").Str; t != "" { // as the stream: an empty block is no content
				e = wire.Event{Kind: wire.Text, Key: "content", Text: []byte(t)}
				out = encodeStopping(out, j, st, &e)
			}
		case "thinking":
			if t := b.Get("thinking").Str; t != "" { // as the stream: no empty reasoning_content
				e = wire.Event{Kind: wire.Text, Key: "reasoning_content", Text: []byte(t)}
				out = encodeStopping(out, j, st, &e)
			}
		case "tool_use":
			name := b.Get("name")
			if bad = name.Type != gjson.String || name.Str == ""; bad {
				return false // a call no one can answer: as the stream, malformed
			}
			e = wire.Event{Kind: wire.CallHeader, ID: b.Get("id").Str, Name: name.Str}
			out = encodeStopping(out, j, st, &e)
			e = wire.Event{Kind: wire.CallArgs, Text: toolInput(b.Get("input"))}
			out = encodeStopping(out, j, st, &e)
		}
		return true
	})
	if bad {
		return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: provider, Err: errBlock}
	}
	var u usage
	u.read(root.Get("usage"))
	e = wire.Event{Kind: wire.Finish, Finish: finishReason(root.Get("stop_reason").Str)}
	out = encodeStopping(out, j, st, &e)
	e = wire.Event{Kind: wire.Usage, Raw: u.appendChat(nil)}
	out = encodeStopping(out, j, st, &e)
	e = wire.Event{Kind: wire.End}
	return encodeStopping(out, j, st, &e), nil
}

// encodeStopping appends e as st (nil: none) lets it be shown.
func encodeStopping(out []byte, j *wire.ChatJSON, st *stopper, e *wire.Event) []byte {
	if st != nil {
		flush, show := st.filter(e)
		if flush != nil {
			out = j.Encode(out, &wire.Event{Kind: wire.Text, Key: "content", Text: flush})
		}
		if !show {
			return out
		}
	}
	return j.Encode(out, e)
}

// toolInput is a tool_use block's input as arguments: its JSON as sent,
// {} when there is none. An input that is not an object (a model's
// mistake) goes as it is, as its streamed fragments do: the client, or
// the tool loop's validation, sees what the model wrote.
func toolInput(in gjson.Result) []byte {
	if !in.Exists() || in.Type == gjson.Null {
		return []byte("{}")
	}
	return []byte(in.Raw)
}

// hasInput reports whether a tool_use block's start carries its input
// whole: anything but none, null and an empty value (the {} the start of a
// streamed input carries, or "" or []), which input_json_delta fragments
// may follow.
func hasInput(in gjson.Result) bool {
	switch {
	case !in.Exists() || in.Type == gjson.Null:
		return false
	case in.Type == gjson.String:
		return in.Str != ""
	case !in.IsObject() && !in.IsArray():
		return true
	}
	members := false
	in.ForEach(func(_, _ gjson.Result) bool { members = true; return false })
	return members
}
