package pipeline

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestErrorConstructors pins what each constructor of the vocabulary
// builds: the status, type and code the proxy's mapper writes.
func TestErrorConstructors(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	tests := []struct {
		name   string
		err    *Error
		status int
		typ    string
		code   string
		param  string
		retry  time.Duration
		cause  error
	}{
		{name: "bad request", err: BadRequest("model", "bad %s", "model"), status: http.StatusBadRequest, typ: TypeInvalidRequest, param: "model"},
		{name: "invalid", err: Invalid(http.StatusRequestTimeout, CodeRequestTimeout, "slow"), status: http.StatusRequestTimeout, typ: TypeInvalidRequest, code: CodeRequestTimeout},
		{name: "not found", err: NotFound(CodeModelNotFound, "no"), status: http.StatusNotFound, typ: TypeInvalidRequest, code: CodeModelNotFound},
		{name: "forbidden", err: Forbidden(CodePathNotAllowed, "no"), status: http.StatusForbidden, typ: TypeInvalidRequest, code: CodePathNotAllowed},
		{name: "unauthorized", err: Unauthorized(cause, "who"), status: http.StatusUnauthorized, typ: TypeInvalidRequest, code: CodeInvalidAPIKey, cause: cause},
		{name: "too large", err: TooLarge("big"), status: http.StatusRequestEntityTooLarge, typ: TypeInvalidRequest, code: CodeRequestTooLarge},
		{name: "unavailable", err: Unavailable(CodeCircuitOpen, time.Second, cause, "later"), status: http.StatusServiceUnavailable, typ: TypeServer, code: CodeCircuitOpen, retry: time.Second, cause: cause},
		{name: "internal", err: Internal(cause, "oops"), status: http.StatusInternalServerError, typ: TypeServer, cause: cause},
		{name: "rate limited", err: RateLimited(TypeTokens, time.Millisecond, "slow down"), status: http.StatusTooManyRequests, typ: TypeTokens, code: CodeRateLimitExceeded, retry: time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.err
			if e.Status != tc.status || e.Type != tc.typ || e.Code != tc.code || e.Param != tc.param || e.RetryAfter != tc.retry || e.Err != tc.cause || e.Message == "" {
				t.Fatalf("got %+v", e)
			}
		})
	}
	if m := BadRequest("", "bad %s", "model").Message; m != "bad model" {
		t.Fatalf("message %q", m)
	}
}
