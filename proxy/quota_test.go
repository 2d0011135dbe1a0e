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
