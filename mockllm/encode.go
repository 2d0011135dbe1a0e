package mockllm

import (
	"strconv"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/wire"
)

// This file appends JSON by hand: the mock is a load target, so no reflection
// in the hot path. Every function appends to dst and returns the extended slice.

// appendNullableString appends s as a JSON string, or null when s is empty.
func appendNullableString(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return jsonstring.Append(dst, s)
}

// appendUsage appends an OpenAI CompletionUsage object.
func appendUsage(dst []byte, u Usage) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Completion), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Prompt+u.Completion), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.Cached), 10)
	if u.CacheWrite > 0 {
		dst = append(dst, `,"cache_write_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.CacheWrite), 10)
	}
	return append(dst, `},"completion_tokens_details":{"reasoning_tokens":0}}`...)
}

// appendErrorObject appends {"error":{"message","type","param","code"}} with
// all four keys; empty param and code are null.
func appendErrorObject(dst []byte, e *apiError) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonstring.Append(dst, e.message)
	dst = append(dst, `,"type":`...)
	dst = jsonstring.Append(dst, e.typ)
	dst = append(dst, `,"param":`...)
	dst = appendNullableString(dst, e.param)
	dst = append(dst, `,"code":`...)
	dst = appendNullableString(dst, e.code)
	return append(dst, "}}"...)
}

// appendToolCall appends one complete tool call of a non-stream message.
func appendToolCall(dst []byte, tc ToolCall) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonstring.Append(dst, tc.ID)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = jsonstring.Append(dst, tc.Name)
	dst = append(dst, `,"arguments":`...)
	dst = jsonstring.Append(dst, tc.Arguments)
	return append(dst, "}}"...)
}

// appendCompletion appends a whole chat.completion object.
func appendCompletion(dst []byte, a *answer) []byte {
	dst = wire.AppendHead(dst, "chat.completion", a.header())
	if a.empty() {
		dst = append(dst, `,"choices":[],"usage":`...)
		dst = appendUsage(dst, a.usage)
		dst = wire.AppendFingerprint(dst, fingerprint)
		return append(dst, '}')
	}
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if a.turn.Text == "" && len(a.turn.ToolCalls) > 0 {
		dst = append(dst, "null"...)
	} else {
		dst = jsonstring.Append(dst, a.turn.Text)
	}
	dst = append(dst, `,"refusal":null`...)
	if len(a.turn.ToolCalls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, tc := range a.turn.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendToolCall(dst, tc)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = jsonstring.Append(dst, a.finish)
	dst = append(dst, `}],"usage":`...)
	dst = appendUsage(dst, a.usage)
	dst = wire.AppendFingerprint(dst, fingerprint)
	return append(dst, '}')
}
