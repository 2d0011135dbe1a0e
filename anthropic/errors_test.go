package anthropic

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// Anthropic counts messages in the translated request: system messages
// are gone and runs of one role merged. Renumber names the chat body's
// message instead, the first one a translated message holds.
func TestRenumber(t *testing.T) {
	t.Parallel()
	const chat = `{"messages":[
	 {"role":"system","content":"s"},
	 {"role":"user","content":"a"},
	 {"role":"user","content":"b"},
	 {"role":"assistant","tool_calls":[{"id":"x.1","type":"function","function":{"name":"f","arguments":"{}"}}]},
	 {"role":"tool","tool_call_id":"x.1","content":"r"},
	 {"role":"user","content":"c"}]}`
	tests := []struct{ name, message, want string }{
		{"tool_use id", "messages.1.content.0.tool_use.id: String should match pattern", "messages.3.content.0.tool_use.id: String should match pattern"},
		{"several", "messages.0: x; messages.2: y", "messages.1: x; messages.4: y"},
		{"out of range", "messages.7.content: x", "messages.7.content: x"},
		{"not an index", "messages.abc, submessages.1, messages.1x", "messages.abc, submessages.1, messages.1x"},
		{"none", "prompt is too long", "prompt is too long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := envelope([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":` + strconv.Quote(tc.message) + `}}`))
			out := Renumber(env, []byte(chat))
			if got := gjson.GetBytes(out, "error.message").Str; got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if gjson.GetBytes(out, "error.type").Str != "invalid_request_error" {
				t.Errorf("envelope %s", out)
			}
		})
	}
}

// A billing error (the gateway's account has no credit) is OpenAI's 429
// insufficient_quota, as an answer and as a stream's error event, so that
// the proxy answers it with its own message, not the provider's about the
// account.
func TestBillingErrorIsInsufficientQuota(t *testing.T) {
	body := []byte(`{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low to access the Anthropic API."}}`)
	for name, ue := range map[string]*pipeline.UpstreamError{
		"answer": StatusError("a", http.StatusPaymentRequired, body, 0),
		"event":  eventError("a", body),
	} {
		if ue.Status != http.StatusTooManyRequests || gjson.GetBytes(ue.Body, "error.code").Str != pipeline.CodeInsufficientQuota {
			t.Errorf("%s: %d %s", name, ue.Status, ue.Body)
		}
	}
}

// Anthropic's error types that OpenAI names otherwise reach the client
// under OpenAI's names (a probe: overloaded_error, api_error and
// not_found_error came through as they were); the ones the proxy reads
// keep theirs.
func TestErrorTypesAreOpenAIs(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]string{
		"api_error": "server_error", "overloaded_error": "server_error", "timeout_error": "server_error",
		"not_found_error": "invalid_request_error", "request_too_large": "invalid_request_error",
		"billing_error": "insufficient_quota", "invalid_request_error": "invalid_request_error",
		"rate_limit_error": "rate_limit_error", "authentication_error": "authentication_error",
	} {
		body := []byte(`{"type":"error","error":{"type":"` + typ + `","message":"m"}}`)
		for name, ue := range map[string]*pipeline.UpstreamError{
			"answer": StatusError("a", http.StatusBadRequest, body, 0),
			"event":  eventError("a", body),
		} {
			if got := gjson.GetBytes(ue.Body, "error.type").Str; got != want {
				t.Errorf("%s %s: type %q, want %q", typ, name, got, want)
			}
		}
	}
}
