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
