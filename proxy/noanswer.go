package proxy

import (
	"errors"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
)

// errErrorEvent and errErrorAnswer are the causes of the failures an
// upstream's error object in a 200 answer becomes (errorAnswer).
var (
	errErrorEvent  = errors.New("proxy: error event in stream")
	errErrorAnswer = errors.New("proxy: error object and no choices in a 200 answer")
)

// noAnswer returns nil when body, a 200 chat completion (valid JSON, only
// read), has a choice. Otherwise it returns the failure the same answer
// streamed is: with an error object, an error event's (errorAnswer);
// without, a stream that ends before any content (UpstreamCut wrapping
// pipeline.ErrNoContent, as fallback's prime reports it). The failure
// keeps a copy of what it needs.
func (pc *providerClient) noAnswer(body []byte, msgs pipeline.MessageMap) error {
	doc := unsafe.String(unsafe.SliceData(body), len(body)) // read-only view; nothing read here is kept
	if hasElement(gjson.Get(doc, "choices")) {
		return nil
	}
	if isErrorObject(doc) {
		if len(body) > maxErrorBody {
			body = body[:maxErrorBody]
		}
		return pc.errorAnswer(body, errErrorAnswer, msgs)
	}
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: pc.cfg.Name, Err: pipeline.ErrNoContent}
}

// inBandRateLimit reports whether body, an error object in a 200 answer or
// an error event, is about a rate limit or a spent quota: by its type or
// code, as an HTTP 429's (aboutRateLimit), or a code of 429 (OpenRouter's
// {"error":{"code":429,...}}).
func inBandRateLimit(body []byte) bool {
	e := gjson.GetBytes(body, "error")
	if !e.IsObject() {
		e = gjson.ParseBytes(body) // {"object":"error",...}: the error is the body
	}
	code := e.Get("code")
	return aboutRateLimit(e.Get("type").String(), code.String()) || code.Type == gjson.Number && code.Int() == 429
}

// isErrorObject reports whether doc, an answer or an event without
// choices, is an upstream's error: an "error" member that is not null, or
// an {"object":"error",...} (an older vLLM form). A JSON answer and a
// stream event decide by it alike.
func isErrorObject(doc string) bool {
	if e := gjson.Get(doc, "error"); e.Exists() && e.Type != gjson.Null {
		return true
	}
	return gjson.Get(doc, "object").Str == "error"
}

// hasElement reports whether r is a JSON array with at least one element,
// from its first bytes: r.Raw begins with '[' when r is an array.
func hasElement(r gjson.Result) bool {
	if !r.IsArray() {
		return false
	}
	for i := 1; i < len(r.Raw); i++ {
		switch r.Raw[i] {
		case ' ', '\t', '\n', '\r':
		case ']':
			return false
		default:
			return true
		}
	}
	return false
}

// errorAnswer is the failure an upstream's error object in a 200 answer
// is, streamed (an error event) or not: a 502 whose body, copied from
// body, mapError relays as it relays a 5xx error body. It is retried and
// falls back as a 5xx is. An error saying the prompt is over the model's
// window is a 400, as that error before the 200 is: a retry cannot fit
// the prompt, the fallback moves to a larger window, and the client is
// told that its request is too long, not that the upstream failed.
func (pc *providerClient) errorAnswer(body []byte, cause error, msgs pipeline.MessageMap) *pipeline.UpstreamError {
	status := fasthttp.StatusBadGateway
	switch {
	case fallback.ContextLengthExceeded(body):
		status = fasthttp.StatusBadRequest
	case inBandRateLimit(body):
		// A rate limit (or spent quota) said in the answer is the 429 it
		// says: retried and fallen back as one, not counted toward the
		// breaker, and answered with the gateway's own message (it was a
		// 502, and five opened the deployment's circuit).
		status = fasthttp.StatusTooManyRequests
	}
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: status,
		Provider: pc.cfg.Name, Body: append([]byte(nil), body...), Err: cause, Messages: msgs}
}
