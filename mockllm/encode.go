package mockllm

import (
	"strconv"
	"unicode/utf8"
)

// This file appends JSON by hand: the mock is a load target, so no reflection
// in the hot path. Every function appends to dst and returns the extended slice.

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does, so every output is a valid JSON document.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendNullableString appends s as a JSON string, or null when s is empty.
func appendNullableString(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, s)
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
	dst = appendJSONString(dst, e.message)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, e.typ)
	dst = append(dst, `,"param":`...)
	dst = appendNullableString(dst, e.param)
	dst = append(dst, `,"code":`...)
	dst = appendNullableString(dst, e.code)
	return append(dst, "}}"...)
}

// appendToolCall appends one complete tool call of a non-stream message.
func appendToolCall(dst []byte, tc ToolCall) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, tc.ID)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = appendJSONString(dst, tc.Name)
	dst = append(dst, `,"arguments":`...)
	dst = appendJSONString(dst, tc.Arguments)
	return append(dst, "}}"...)
}

// appendCompletion appends a whole chat.completion object.
func appendCompletion(dst []byte, a *answer) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, a.id)
	dst = append(dst, `,"object":"chat.completion","created":`...)
	dst = strconv.AppendInt(dst, a.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, a.model)
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if a.turn.Text == "" && len(a.turn.ToolCalls) > 0 {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, a.turn.Text)
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
	dst = appendJSONString(dst, a.finish)
	dst = append(dst, `}],"usage":`...)
	dst = appendUsage(dst, a.usage)
	return append(dst, `,"system_fingerprint":"fp_mock"}`...)
}
