package pipeline

import (
	"errors"
	"fmt"
	"time"
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
	Err        error // internal cause, for logs only
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Type, e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// BadRequest is a 400 invalid_request_error naming param.
func BadRequest(param, format string, args ...any) *Error {
	return &Error{Status: 400, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

// Errorf builds an Error with a status, type and code.
func Errorf(status int, typ, code, format string, args ...any) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: fmt.Sprintf(format, args...)}
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
}

// UpstreamKind classifies an upstream failure.
type UpstreamKind int

// The kinds of upstream failure.
const (
	UpstreamStatus    UpstreamKind = iota // a non-2xx response
	UpstreamConnect                       // refused, reset, DNS, TLS before any response
	UpstreamTimeout                       // connect, first-byte or total timeout
	UpstreamIdle                          // a stream stalled longer than the idle timeout
	UpstreamCut                           // the connection ended before [DONE]
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

// ErrClientGone reports that the client disconnected; it is logged as 499.
var ErrClientGone = errors.New("pipeline: client disconnected")
