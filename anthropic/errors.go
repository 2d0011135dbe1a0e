package anthropic

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// StatusOverloaded is Anthropic's status for overloaded_error.
const StatusOverloaded = 529

// errorStatus is the HTTP status of each Anthropic error type, for errors
// that arrive as stream events.
var errorStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusTooManyRequests, // as OpenAI's insufficient_quota (StatusError)
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      StatusOverloaded,
}

// errEvent is the cause of an UpstreamError made from an error event.
var errEvent = errors.New("anthropic: error event in stream")

// StatusError is the upstream error of a non-2xx Messages response. Its
// Body is the OpenAI envelope of Anthropic's error (see envelope), so that
// fallback and the proxy's error mapper read it as any upstream's; 529
// (overloaded) becomes 503, which every OpenAI client knows to retry, and
// 402 (billing_error: the gateway's account has no credit) the 429
// insufficient_quota OpenAI answers for the same, which the proxy answers
// with its own message rather than the provider's about the account.
// body is only read.
func StatusError(provider string, status int, body []byte, retryAfter time.Duration) *pipeline.UpstreamError {
	switch status {
	case StatusOverloaded:
		status = http.StatusServiceUnavailable
	case http.StatusPaymentRequired:
		status = http.StatusTooManyRequests
	}
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: status, Provider: provider,
		RetryAfter: retryAfter, Body: envelope(body)}
}

// eventError is the upstream error of an error event in a stream.
func eventError(provider string, data []byte) *pipeline.UpstreamError {
	status, ok := errorStatus[gjson.GetBytes(data, "error.type").Str]
	if !ok {
		status = http.StatusBadGateway
	}
	ue := StatusError(provider, status, data, 0)
	ue.Err = errEvent
	return ue
}

// envelope rewrites Anthropic's error body ({"type":"error","error":{"type",
// "message"}}) as {"error":{"message","type","param","code"}}. A request
// over the model's window (overWindow) gets the code
// context_length_exceeded. A body that is not Anthropic's error is
// returned copied, as it is.
func envelope(body []byte) []byte {
	e := gjson.GetBytes(body, "error")
	if !jsonvalid.Bytes(body) || !e.IsObject() {
		return append([]byte(nil), body...)
	}
	typ, msg := e.Get("type").Str, e.Get("message").Str
	var code string
	switch {
	case typ == "invalid_request_error" && overWindow(msg):
		code = pipeline.CodeContextLengthExceeded
	case typ == "rate_limit_error":
		code = pipeline.CodeRateLimitExceeded
	case typ == "overloaded_error":
		code = "overloaded"
	case typ == "billing_error":
		code = pipeline.CodeInsufficientQuota
	}
	out := make([]byte, 0, len(msg)+len(typ)+64)
	out = append(out, `{"error":{"message":`...)
	out = jsonstring.Append(out, msg)
	out = append(out, `,"type":`...)
	out = jsonstring.Append(out, openAIType(typ))
	out = append(out, `,"param":null,"code":`...)
	if code == "" {
		out = append(out, "null"...)
	} else {
		out = jsonstring.Append(out, code)
	}
	return append(out, "}}"...)
}

// openAIType is the OpenAI error type of Anthropic's error type typ, for
// the types OpenAI names otherwise: a server's failure is server_error, a
// request refused as it stands invalid_request_error, a spent credit
// insufficient_quota. The rest keep their names, which the proxy reads
// (authentication_error, permission_error and rate_limit_error are about the
// gateway's account and get the gateway's own message).
func openAIType(typ string) string {
	switch typ {
	case "api_error", "overloaded_error", "timeout_error":
		return pipeline.TypeServer
	case "not_found_error", "request_too_large":
		return pipeline.TypeInvalidRequest
	case "billing_error":
		return pipeline.TypeInsufficientQuota
	}
	return typ
}

// overWindow reports whether an invalid_request_error's message says the
// request does not fit the model's context window: the prompt alone
// ("prompt is too long: 215000 tokens > 200000 maximum"), or the prompt
// with max_tokens, which models since Claude 3.7 refuse instead of
// shortening the answer ("input length and `max_tokens` exceed context
// limit: 178959 + 64000 > 200000, ..."). OpenAI's code for both is
// context_length_exceeded, which fallback reads.
func overWindow(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "prompt is too long") || strings.Contains(m, "exceed context limit")
}

// Renumber rewrites the message indexes in the message of an error
// envelope (Anthropic's "messages.2.content.0...", counted in the
// translated request, where leading system messages are gone and runs of
// one role are merged) as indexes of chat's messages: the first chat
// message each translated one holds. So the proxy's error mapper, which maps the chat
// body's indexes to the client's, names the right message. envelope and
// chat are only read; the result is envelope itself when nothing changed.
func Renumber(envelope, chat []byte) []byte {
	msg := gjson.GetBytes(envelope, "error.message")
	if !strings.Contains(msg.Str, "messages.") {
		return envelope
	}
	var t translator
	gjson.GetBytes(chat, "messages").ForEach(func(_, m gjson.Result) bool {
		return t.message(m) == nil
	})
	var b strings.Builder
	text := msg.Str
	for {
		at := strings.Index(text, "messages.")
		if at < 0 {
			break
		}
		end := at + len("messages.")
		digits := end
		for digits < len(text) && digits-end < 9 && text[digits] >= '0' && text[digits] <= '9' {
			digits++
		}
		b.WriteString(text[:end])
		n, err := strconv.Atoi(text[end:digits])
		wordBefore := at > 0 && isWordByte(text[at-1])
		if err == nil && !wordBefore && n < len(t.from) && (digits == len(text) || !isWordByte(text[digits])) {
			b.WriteString(strconv.Itoa(t.from[n]))
		} else {
			b.WriteString(text[end:digits])
		}
		text = text[digits:]
	}
	b.WriteString(text)
	out, err := sjson.SetBytes(envelope, "error.message", b.String())
	if err != nil {
		return envelope
	}
	return out
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
