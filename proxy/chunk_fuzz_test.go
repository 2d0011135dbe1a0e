package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
)

// FuzzStreamChunk: whatever data an upstream event carries, chunk never
// panics; a chunk it passes on is one JSON object on one line with a
// choices array and without an "error" member; it skips only an empty
// event or an object that is no chunk (no choice, no usage); and an error
// event becomes an upstream error.
func FuzzStreamChunk(f *testing.F) {
	f.Add([]byte(`{"id":"a","model":"up","choices":[{"delta":{"content":"x"}}]}`), "")
	f.Add([]byte("{\"id\":\"a\",\n\"choices\":[],\"error\":null}"), "")
	f.Add([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`), "")
	f.Add([]byte(`{"choices":[]}`), "error")
	f.Add([]byte(`{"id":"a","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"x"},{"index":1,"finish_reason":null,"finish_reason":"length","m":{"finish_reason":"s"}}]}`), "")
	f.Add([]byte(`not json`), "")
	f.Add([]byte(``), "")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		if sse.IsDone(data) || bytes.IndexByte(data, '\r') >= 0 {
			// [DONE] drains the reader, which this test has none of; a CR
			// ends a line for the SSE reader, so no data value holds one.
			return
		}
		s := &upstreamStream{pc: &providerClient{}, model: "m"}
		chunk, skip, err := s.chunk(sse.Event{Data: bytes.Clone(data), Name: []byte(name)})
		switch {
		case err != nil:
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) {
				t.Fatalf("%q: %v is not an upstream error", data, err)
			}
		case skip:
			one := bytes.ReplaceAll(data, []byte("\n"), []byte(" ")) // several data lines are one
			choices := gjson.GetBytes(one, "choices")
			noChunk := json.Valid(one) && bytes.HasPrefix(one, []byte("{")) && (!choices.IsArray() || !choices.Get("0").Exists()) &&
				!gjson.GetBytes(one, "usage").IsObject()
			if len(data) != 0 && !noChunk {
				t.Fatalf("%q skipped", data)
			}
		default:
			if !json.Valid(chunk) || chunk[0] != '{' || bytes.ContainsAny(chunk, "\r\n") {
				t.Fatalf("%q -> %q: not one JSON object on one line", data, chunk)
			}
			if gjson.GetBytes(chunk, "error").Exists() {
				t.Fatalf("%q -> %q: an error member passed", data, chunk)
			}
			if !gjson.GetBytes(chunk, "choices").IsArray() {
				t.Fatalf("%q -> %q: no choices array", data, chunk)
			}
		}
	})
}

// FuzzMapUpstream: whatever status and body an upstream error has, the
// client's envelope is valid JSON with a message, a 4xx or 5xx status, and
// no registered secret.
func FuzzMapUpstream(f *testing.F) {
	const secret = "sk-fuzz-registered-secret"
	observe.Secrets.Add(secret)
	f.Add(400, []byte(`{"error":{"message":"bad","type":"invalid_request_error","param":"x","code":"y"}}`))
	f.Add(401, []byte(`{"error":{"message":"Incorrect API key provided: sk-fuzz-registered-secret"}}`))
	f.Add(502, []byte(`{"error":{"message":"sk-fuzz-registered-secret","code":"invalid_api_key"}}`))
	f.Add(200, []byte(`{"error":"a string"}`))
	f.Add(999, []byte(`{"error":{"message":"`+strings.Repeat("é", 2000)+`"}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		env := mapUpstream(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: status, Body: body})
		if env.status < 400 || env.status > 599 {
			t.Fatalf("status %d -> %d", status, env.status)
		}
		e := gjson.GetBytes(env.body, "error")
		if !json.Valid(env.body) || e.Get("message").Str == "" || e.Get("type").Str == "" {
			t.Fatalf("%d %q -> %s: not the envelope", status, body, env.body)
		}
		if strings.Contains(e.Get("message").Str, secret) {
			t.Fatalf("%d %q -> %s: the secret was quoted", status, body, env.body)
		}
		if (status == http.StatusUnauthorized || status == http.StatusForbidden) && e.Get("message").Str != "the upstream provider rejected the gateway's credentials" {
			t.Fatalf("%d -> %s: a credential error's text passed", status, env.body)
		}
	})
}

// FuzzStreamedAnswer: whatever event stream an upstream sends for a JSON
// request, streamedAnswer never panics; it returns a chat.completion (one
// JSON object with one choice, under the client's model) or an upstream
// error.
func FuzzStreamedAnswer(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n"))
	f.Add([]byte("event: error\ndata: {\"error\":{\"message\":\"m\"}}\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":1,\"delta\":{}}]}\n\n"))
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\n"))
	f.Add([]byte(": comment\n\ndata: not json\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		pc := &providerClient{}
		out, err := pc.streamedAnswer(body, "m", pipeline.MessageMap{})
		if err != nil {
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) {
				t.Fatalf("%q: %v is not an upstream error", body, err)
			}
			return
		}
		if !json.Valid(out) || gjson.GetBytes(out, "model").Str != "m" || gjson.GetBytes(out, "choices.#").Int() != 1 ||
			gjson.GetBytes(out, "object").Str != "chat.completion" {
			t.Fatalf("%q -> %s", body, out)
		}
	})
}
