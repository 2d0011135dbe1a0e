package fallback

import (
	"bytes"
	"errors"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// class is what the middleware does after a failed attempt.
type class int

const (
	// classRetryable: a transient failure (transport, 408/409/429/5xx, a
	// stream that ended before its first content). Retry, then fall back.
	// It counts as a circuit-breaker failure.
	classRetryable class = iota
	// classContextLength: the prompt does not fit the model. No retry; fall
	// back only to models with a larger context window.
	classContextLength
	// classFatal: the caller's fault (400/401/403/404/422...) or an error that
	// did not come from the upstream. Returned as it is.
	classFatal
	// classUnsupported: the target's provider cannot honour a field of the
	// request (the Anthropic provider and logprobs), refused before any call.
	// No retry; the route's other deployments and the fallbacks are tried,
	// and it is returned only when no target is left that failed otherwise.
	classUnsupported
)

// classify sorts an attempt's error. Only *pipeline.UpstreamError is ever
// retried: other errors come from middleware or the context and mean the same
// thing on every deployment.
func classify(err error) class {
	var ue *pipeline.UpstreamError
	if !errors.As(err, &ue) {
		// The gateway's own refusal (context editing could not fit the
		// prompt in this model's window) moves to a larger window too.
		var pe *pipeline.Error
		if errors.As(err, &pe) {
			switch pe.Code {
			case pipeline.CodeContextLengthExceeded:
				return classContextLength
			case pipeline.CodeUnsupportedParameter:
				return classUnsupported
			}
		}
		return classFatal
	}
	if ue.Kind != pipeline.UpstreamStatus {
		return classRetryable // connect, timeout, idle, cut, malformed
	}
	switch s := ue.Status; {
	case s == 408 || s == 409 || s == 429 || s >= 500 || s < 400:
		return classRetryable
	case (s == 400 || s == 413) && ContextLengthExceeded(ue.Body):
		return classContextLength
	default:
		return classFatal
	}
}

// contextPhrases are the messages providers use when a prompt is over the
// model's window (OpenAI, Azure, Anthropic, Gemini, vLLM, Mistral, Groq,
// llama.cpp, xAI). Lower case.
var contextPhrases = []string{
	"context_length_exceeded",
	"maximum context length",
	"context length",
	"context window",
	"prompt is too long",
	"too many tokens",
	"input is too long",
	"exceeds the maximum number of tokens",
	"reduce the length of the messages",
	"available context size", // llama.cpp: "request (N tokens) exceeds the available context size (M tokens)"
	"maximum prompt length",  // xAI: "This model's maximum prompt length is N but the request contains M tokens."
}

// contextCodes are the error codes and types that say the prompt is over
// the model's window: OpenAI's, and llama.cpp's type.
var contextCodes = []string{pipeline.CodeContextLengthExceeded, "exceed_context_size_error"}

// maxScan bounds how much of a non-JSON error body is searched.
const maxScan = 4 << 10

// ContextLengthExceeded reports whether an upstream error body says the
// prompt is longer than the model's context window: error.code (or
// error.type) context_length_exceeded or llama.cpp's
// exceed_context_size_error, or one of the known provider messages.
// body is only read; any bytes are safe (untrusted input).
func ContextLengthExceeded(body []byte) bool {
	if len(body) == 0 {
		return false
	}
	var msg string
	if jsonvalid.Bytes(body) {
		e := gjson.GetBytes(body, "error")
		if e.IsObject() {
			if slices.Contains(contextCodes, e.Get("code").Str) || slices.Contains(contextCodes, e.Get("type").Str) {
				return true
			}
			msg = e.Get("message").Str
		} else if e.Type == gjson.String {
			msg = e.Str
		}
		if msg == "" {
			msg = gjson.GetBytes(body, "message").Str
		}
	} else {
		b := body
		if len(b) > maxScan {
			b = b[:maxScan]
		}
		msg = string(bytes.ToLower(b))
		return containsPhrase(msg)
	}
	if len(msg) > maxScan {
		msg = msg[:maxScan]
	}
	return containsPhrase(strings.ToLower(msg))
}

func containsPhrase(lower string) bool {
	for _, p := range contextPhrases {
		if strings.Contains(lower, p) {
			return true
		}
	}
	return false
}
