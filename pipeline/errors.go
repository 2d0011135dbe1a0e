package pipeline

import (
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// Error is a failure with a client-facing meaning. The mapper in proxy
// writes it as the OpenAI envelope; Message is shown to the client, Err never.
type Error struct {
	Status     int    // HTTP status
	Type       string // envelope type, e.g. "invalid_request_error"
	Code       string // envelope code, "" for null
	Param      string // envelope param, "" for null
	Message    string // safe to show to the client
	RetryAfter time.Duration
	// Spent: a per-minute counter of the gateway's own limits refused
	// the request, so the x-ratelimit trio of Type (requests or tokens)
	// says none remains (a concurrency limit or a store that cannot be
	// asked spends no counter).
	Spent bool
	Err   error // internal cause, for logs only
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Type, e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// The envelope types the gateway writes ("type" of the OpenAI envelope).
// TypeRequests and TypeTokens follow OpenAI's 429s: the type names the
// rate limit that refused.
const (
	TypeInvalidRequest    = "invalid_request_error"
	TypeServer            = "server_error"
	TypeTimeout           = "timeout_error"
	TypeUpstream          = "upstream_error"
	TypeUpstreamAuth      = "upstream_auth_error"
	TypeInsufficientQuota = "insufficient_quota"
	TypeRequests          = "requests"
	TypeTokens            = "tokens"
)

// The envelope codes the gateway writes ("code" of the OpenAI envelope;
// "" is written as null).
const (
	CodeInvalidAPIKey            = "invalid_api_key"
	CodeAdminRequired            = "admin_required"
	CodeModelNotFound            = "model_not_found"
	CodeModelNotPriced           = "model_not_priced" // a model the config does not name, with no known price, under a budget
	CodePathNotAllowed           = "path_not_allowed"
	CodeUnknownURL               = "unknown_url"
	CodeInvalidPath              = "invalid_path"
	CodeMethodNotAllowed         = "method_not_allowed"
	CodeAmbiguousCredential      = "ambiguous_credential" // more than one Authorization or Api-Key header
	CodeUnsupportedMediaType     = "unsupported_media_type"
	CodeUnsupportedParameter     = "unsupported_parameter" // a request field the model's provider cannot honour
	CodeResponseNotFound         = "response_not_found"    // an unknown, expired or other tenant's response id
	CodeItemNotFound             = "item_not_found"        // an unknown, expired or other tenant's stored item id
	CodeRequestTooLarge          = "request_too_large"
	CodeRequestTimeout           = "request_timeout"
	CodeIntegerAboveMax          = "integer_above_max_value"
	CodeIntegerBelowMin          = "integer_below_min_value"
	CodeContextLengthExceeded    = "context_length_exceeded"
	CodeMaxModelCalls            = "max_model_calls"
	CodeRateLimitExceeded        = "rate_limit_exceeded"
	CodeInsufficientQuota        = "insufficient_quota"
	CodeTooLargeForLimit         = "request_too_large_for_limit" // needs more than a rate limit's whole minute
	CodeUsageUnavailable         = "usage_unavailable"
	CodeApprovalUnavailable      = "approval_unavailable" // a call awaiting approval could not be kept (the state store failed)
	CodeStoreUnavailable         = "store_unavailable"    // the stored Responses API responses could not be read or written (the store failed)
	CodeCircuitOpen              = "circuit_open"
	CodeServerShuttingDown       = "server_shutting_down"
	CodeClientClosed             = "client_closed"
	CodeTimeout                  = "timeout"
	CodeInternal                 = "internal_error"
	CodeUpstreamAuth             = "upstream_auth"
	CodeUpstreamTimeout          = "upstream_timeout"
	CodeUpstreamCut              = "upstream_cut"
	CodeUpstreamMalformed        = "upstream_malformed"
	CodeUpstreamResponseTooLarge = "upstream_response_too_large"
	CodeUpstreamUnreachable      = "upstream_unreachable"
	CodeHTTPVersionNotSupported  = "http_version_not_supported" // a request line of another HTTP version than 1.1 or 1.0
	CodeNoRoute                  = "no_route"
	CodeBadUpstream              = "bad_upstream"
	CodeToolChoiceUnmet          = "tool_choice_unmet" // a prompted model did not call the tool tool_choice requires
	CodeContentBlocked           = "content_blocked"   // a guardrail blocked the request or the answer
)

// BadRequest is a 400 invalid_request_error naming param.
func BadRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// Errorf builds an Error with a status, type and code.
func Errorf(status int, typ, code, format string, args ...any) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is an invalid_request_error with status and code, for the
// client's mistakes other than a plain 400 (BadRequest).
func Invalid(status int, code, format string, args ...any) *Error {
	return Errorf(status, TypeInvalidRequest, code, format, args...)
}

// NotFound is a 404 invalid_request_error with code.
func NotFound(code, format string, args ...any) *Error {
	return Invalid(http.StatusNotFound, code, format, args...)
}

// ItemNotFound is OpenAI's answer to an input naming a stored item that
// is unknown, expired or another tenant's: 404 item_not_found, param
// input, the id quoted back (its first 128 bytes, whole characters).
func ItemNotFound(id string) *Error {
	e := NotFound(CodeItemNotFound, "Item with id '%s' not found.", clip(id, 128))
	e.Param = "input"
	return e
}

// ModelNotFound is OpenAI's answer to a model the caller may not use,
// whether no route has the name or the key's policy does not allow it:
// 404 model_not_found, param model, one message for both, so a key learns
// nothing of the models other keys may use. The name is quoted back (its
// first 200 bytes, whole characters).
func ModelNotFound(name string) *Error {
	e := NotFound(CodeModelNotFound, "The model '%s' does not exist or you do not have access to it.", clip(name, 200))
	e.Param = "model"
	return e
}

// clip returns s's first n bytes or fewer: whole characters.
func clip(s string, n int) string {
	n = min(len(s), n)
	for n < len(s) && n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Forbidden is a 403 invalid_request_error with code.
func Forbidden(code, format string, args ...any) *Error {
	return Invalid(http.StatusForbidden, code, format, args...)
}

// Unauthorized is a 401 invalid_api_key; err (may be nil) is for logs.
func Unauthorized(err error, format string, args ...any) *Error {
	e := Invalid(http.StatusUnauthorized, CodeInvalidAPIKey, format, args...)
	e.Err = err
	return e
}

// TooLarge is a 413 request_too_large.
func TooLarge(format string, args ...any) *Error {
	return Invalid(http.StatusRequestEntityTooLarge, CodeRequestTooLarge, format, args...)
}

// Unavailable is a 503 server_error with code, retryable after retry; err
// (may be nil) is for logs.
func Unavailable(code string, retry time.Duration, err error, format string, args ...any) *Error {
	e := Errorf(http.StatusServiceUnavailable, TypeServer, code, format, args...)
	e.RetryAfter, e.Err = retry, err
	return e
}

// Internal is a 500 server_error without code: msg is shown, err only logged.
func Internal(err error, msg string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: msg, Err: err}
}

// RateLimited is a 429 rate_limit_exceeded of the limit typ (TypeRequests
// or TypeTokens), retryable after retry.
func RateLimited(typ string, retry time.Duration, format string, args ...any) *Error {
	e := Errorf(http.StatusTooManyRequests, typ, CodeRateLimitExceeded, format, args...)
	e.RetryAfter = retry
	return e
}

// UpstreamError is a failed upstream attempt. Status is 0 for transport
// failures (Kind says which). Body holds the upstream's error body, copied.
type UpstreamError struct {
	Kind       UpstreamKind
	Status     int
	Body       []byte
	RetryAfter time.Duration // from retry-after / retry-after-ms; 0 when absent
	Provider   string
	Err        error
	// Messages is the failed request's MessageMap: how an index in the
	// upstream's error param maps to the client's messages.
	Messages MessageMap
}

// UpstreamKind classifies an upstream failure.
type UpstreamKind int

// The kinds of upstream failure.
const (
	UpstreamStatus    UpstreamKind = iota // a non-2xx response
	UpstreamConnect                       // refused, DNS, a TLS verification failure: the request was not taken
	UpstreamTimeout                       // connect, first-byte or total timeout
	UpstreamIdle                          // a stream stalled longer than the idle timeout
	UpstreamCut                           // the connection ended (closed, reset) after the request, before the answer was whole
	UpstreamMalformed                     // bytes that are not a valid SSE chunk
)

var kindNames = [...]string{"status", "connect", "timeout", "idle", "cut", "malformed"}

func (k UpstreamKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

func (e *UpstreamError) Error() string {
	if e.Kind == UpstreamStatus {
		return fmt.Sprintf("upstream %s: status %d", e.Provider, e.Status)
	}
	return fmt.Sprintf("upstream %s: %s: %v", e.Provider, e.Kind, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// ErrNoContent is the cause of the UpstreamCut failure reported for an
// upstream answer without content: a stream that ends cleanly before any
// (fallback), or a 200 JSON answer whose choices are missing or empty
// (proxy). An empty answer is a failure, never a success, in either form.
var ErrNoContent = errors.New("pipeline: upstream answered without content")

// ErrResponseTooLarge is the cause of the UpstreamMalformed failure of an
// upstream answer over a bound the gateway keeps it to: a non-streamed body
// over the provider's max_response_bytes, or the signed reasoning a stream
// brings for the next round over Thinking.Max. The client gets 502
// upstream_response_too_large.
var ErrResponseTooLarge = errors.New("pipeline: upstream response exceeds the gateway's size limit")

// ErrClientGone reports that the client disconnected; it is logged as 499.
var ErrClientGone = errors.New("pipeline: client disconnected")

// AfterSideEffects wraps err, the failure of a request during which the
// gateway already ran server tools (whose effects a retry would repeat: an
// HTTP tool that wrote something, an e-mail sent): the client is told not
// to retry (x-should-retry: false), which the official SDKs obey, whatever
// err's status would otherwise allow.
func AfterSideEffects(err error) error {
	if err == nil {
		return nil
	}
	return &SideEffectsError{Err: err}
}

// SideEffectsError is AfterSideEffects' error; Unwrap gives the failure.
type SideEffectsError struct{ Err error }

func (e *SideEffectsError) Error() string { return e.Err.Error() }
func (e *SideEffectsError) Unwrap() error { return e.Err }
