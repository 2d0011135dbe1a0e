package anthropic

import (
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// usage is Anthropic's token accounting of one message. Input tokens
// exclude the tokens read from and written to the prompt cache.
type usage struct {
	input, output, cacheRead, cacheWrite int64
}

// read takes the counts usage holds (a message's usage object, or a
// message_delta's running totals). Every count is a running total of the
// message, so a count only grows: an absent one, or a smaller one (the
// zeros some servers speaking Anthropic's API send in message_delta),
// keeps its value.
func (u *usage) read(r gjson.Result) {
	if !r.IsObject() {
		return
	}
	for _, f := range [...]struct {
		key string
		dst *int64
	}{
		{"input_tokens", &u.input},
		{"output_tokens", &u.output},
		{"cache_read_input_tokens", &u.cacheRead},
		{"cache_creation_input_tokens", &u.cacheWrite},
	} {
		if n, ok := wire.TokenCount(r.Get(f.key)); ok {
			*f.dst = max(*f.dst, n)
		}
	}
}

// appendChat appends the chat usage object: every input token is a prompt
// token, cache reads are its cached_tokens and cache writes its
// cache_write_tokens.
func (u *usage) appendChat(dst []byte) []byte {
	prompt := u.input + u.cacheRead + u.cacheWrite
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, prompt, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, u.output, 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, prompt+u.output, 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, u.cacheRead, 10)
	dst = append(dst, `,"cache_write_tokens":`...)
	dst = strconv.AppendInt(dst, u.cacheWrite, 10)
	return append(dst, "}}"...)
}

// finishReason maps a stop_reason to a chat finish_reason.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded",
		"pause_turn": // Anthropic paused a long turn for a continuation: the answer is not whole
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	default: // end_turn, stop_sequence
		return "stop"
	}
}
