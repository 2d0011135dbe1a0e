package gateway

import (
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmgw/gateway/mockllm"
)

// A /v1/responses call is counted under its own route, in the request
// count, the duration and the time to first byte alike: its first byte
// was filed under /v1/chat/completions, and its count and duration under
// the pass-through routes' /v1/*, so no two of them could be matched.
func TestResponsesMetricsRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	h.respond(params, false)
	h.respond(params, true)
	m := h.metrics()
	for _, name := range []string{"gateway_requests_total", "gateway_request_duration_seconds", "gateway_time_to_first_byte_seconds"} {
		found := false
		for _, s := range m[name].GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == "/v1/responses" {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s has no route=\"/v1/responses\" series", name)
		}
	}
}
