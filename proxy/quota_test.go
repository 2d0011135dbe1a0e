package proxy

import (
	"testing"

	"github.com/llmgw/gateway/pipeline"
)

// An upstream's spent quota (429 insufficient_quota, by code or type) is
// answered with x-should-retry: false, as the gateway's own spent budget
// is: no wait makes it pass. A rate limit is not.
func TestSpentQuotaIsPermanent(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]bool{
		`{"error":{"message":"m","type":"billing_error","code":"insufficient_quota"}}`: true,
		`{"error":{"message":"m","type":"insufficient_quota","code":null}}`:            true,
		`{"error":{"message":"m","type":"requests","code":"rate_limit_exceeded"}}`:     false,
	} {
		env := mapError(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 429, Body: []byte(body)})
		if env.permanent != want || env.status != 429 {
			t.Errorf("%s: status %d, permanent %v, want %v", body, env.status, env.permanent, want)
		}
	}
}

// An upstream's 4xx relayed (or rewritten: a 401 about the gateway's own
// key) is as permanent as the gateway's own 4xx, save 408, 409 and 429:
// x-should-retry: false was on the gateway's 4xx only (a docs probe).
func TestUpstream4xxIsPermanent(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{400: true, 401: true, 403: true, 404: true, 422: true, 408: false, 409: false, 429: false, 500: false, 503: false} {
		env := mapError(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: status, Body: []byte(`{"error":{"message":"m","type":"t"}}`)})
		if env.permanent != want || env.status != status {
			t.Errorf("%d: status %d, permanent %v, want %v", status, env.status, env.permanent, want)
		}
	}
}

// A rate limit or a spent quota said in a 200 answer's error object, or in
// an error event, is the 429 it says, as the same error with an HTTP 429
// is: it was a 502, which counted toward the circuit breaker (a wire
// probe: five of them opened it). Other in-band errors stay 502.
func TestInBandRateLimitIs429(t *testing.T) {
	t.Parallel()
	pc := &providerClient{}
	for body, want := range map[string]int{
		`{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":"rate_limit_exceeded"}}`: 429,
		`{"error":{"message":"slow down","code":429}}`:                                                      429,
		`{"error":{"message":"no credit","type":"insufficient_quota"}}`:                                     429,
		`{"object":"error","message":"m","type":"rate_limit_error"}`:                                        429,
		`{"error":{"message":"overloaded","type":"server_error"}}`:                                          502,
	} {
		if ue := pc.errorAnswer([]byte(body), errErrorEvent, pipeline.MessageMap{}); ue.Status != want {
			t.Errorf("%s: status %d, want %d", body, ue.Status, want)
		}
	}
}
