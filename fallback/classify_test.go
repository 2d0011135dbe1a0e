package fallback

import (
	"errors"
	"testing"

	"github.com/llmgw/gateway/pipeline"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want class
	}{
		{name: "500", err: status(500, ``), want: classRetryable},
		{name: "529", err: status(529, ``), want: classRetryable},
		{name: "429", err: status(429, ``), want: classRetryable},
		{name: "408", err: status(408, ``), want: classRetryable},
		{name: "409", err: status(409, ``), want: classRetryable},
		{name: "400", err: status(400, `{"error":{"message":"bad"}}`), want: classFatal},
		{name: "401", err: status(401, ``), want: classFatal},
		{name: "403", err: status(403, ``), want: classFatal},
		{name: "404", err: status(404, ``), want: classFatal},
		{name: "422", err: status(422, ``), want: classFatal},
		{name: "400_context", err: status(400, `{"error":{"code":"context_length_exceeded"}}`), want: classContextLength},
		{name: "400_llama_cpp_context", err: status(400, `{"error":{"code":400,"message":"request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error"}}`), want: classContextLength},
		{name: "413_context", err: status(413, `prompt is too long`), want: classContextLength},
		{name: "cut", err: &pipeline.UpstreamError{Kind: pipeline.UpstreamCut}, want: classRetryable},
		{name: "idle", err: &pipeline.UpstreamError{Kind: pipeline.UpstreamIdle}, want: classRetryable},
		{name: "malformed", err: &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed}, want: classRetryable},
		{name: "connect", err: &pipeline.UpstreamError{Kind: pipeline.UpstreamConnect}, want: classRetryable},
		{name: "wrapped", err: &pipeline.Error{Status: 502, Err: status(503, ``)}, want: classRetryable},
		{name: "gateway", err: pipeline.BadRequest("x", "y"), want: classFatal},
		{name: "gateway context length", err: pipeline.Errorf(400, "invalid_request_error", "context_length_exceeded", "too long"), want: classContextLength},
		{name: "plain", err: errors.New("x"), want: classFatal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestContextLengthExceeded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want bool
	}{
		{name: "openai_code", body: `{"error":{"message":"x","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, want: true},
		{name: "openai_message", body: `{"error":{"message":"This model's maximum context length is 128000 tokens.","code":null}}`, want: true},
		{name: "anthropic", body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 201000 tokens > 200000 maximum"}}`, want: true},
		{name: "gemini", body: `{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, want: true},
		// llama.cpp's server: a numeric code, a type of its own.
		{name: "llama_cpp", body: `{"error":{"code":400,"message":"request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9412,"n_ctx":8192}}`, want: true},
		{name: "llama_cpp_type", body: `{"error":{"code":400,"message":"","type":"exceed_context_size_error"}}`, want: true},
		{name: "xai", body: `{"code":"Client specified an invalid argument","error":"This model's maximum prompt length is 131072 but the request contains 136973 tokens."}`, want: true},
		{name: "string_error", body: `{"error":"Input is too long for requested model."}`, want: true},
		{name: "top_message", body: `{"message":"too many tokens in request"}`, want: true},
		{name: "context_window", body: `{"error":{"message":"exceeds the context window"}}`, want: true},
		{name: "plain_text", body: `Context length exceeded`, want: true},
		{name: "other_400", body: `{"error":{"message":"Invalid value for temperature","code":"invalid_value"}}`, want: false},
		{name: "empty", body: ``, want: false},
		{name: "numeric_code", body: `{"error":{"code":400}}`, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ContextLengthExceeded([]byte(tc.body)); got != tc.want {
				t.Fatalf("ContextLengthExceeded = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzContextLengthExceeded(f *testing.F) {
	for _, s := range []string{
		`{"error":{"code":"context_length_exceeded"}}`,
		`{"error":"prompt is too long"}`,
		`{"error":{"message":"maximum context length"`,
		"\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := ContextLengthExceeded(b)
		if got != ContextLengthExceeded(append([]byte(nil), b...)) {
			t.Fatal("not deterministic")
		}
		_ = classify(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 400, Body: b})
	})
}
