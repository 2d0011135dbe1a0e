package proxy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// bodyUpstream is an upstream that answers every chat request with 200 and
// the body named by the request's X-Request-Id: as JSON, or for a stream as
// one data event followed by [DONE].
func bodyUpstream(t *testing.T, bodies map[string]string) *Upstream {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := bodies[r.Header.Get("X-Request-Id")]
		var req bytes.Buffer
		_, _ = req.ReadFrom(r.Body)
		if bytes.Contains(req.Bytes(), []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: " + body + "\n\ndata: [DONE]\n\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	_, u := testUpstream(t, srv.URL+"/v1", "")
	return u
}

// A 200 JSON answer without an answer is the failure the same answer
// streamed is: an error object and no choices is an error event (a 502
// status failure whose envelope relays the upstream's message), and no
// choice at all is an answer without content. Anything with a choice is
// the answer, an error member beside it included.
func TestNoAnswerIsAFailure(t *testing.T) {
	t.Parallel()
	const head = `{"id":"c","object":"chat.completion","created":1,"model":"up",`
	cases := []struct {
		name, body string
		kind       pipeline.UpstreamKind
		noContent  bool // the failure wraps pipeline.ErrNoContent
		answer     bool // returned as the answer
		status     int  // the client's status for a status failure; 0 = 502
	}{
		{name: "error object only", body: `{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}`, kind: pipeline.UpstreamStatus},
		{name: "error object and empty choices", body: head + `"choices":[],"error":{"message":"overloaded","type":"server_error"}}`, kind: pipeline.UpstreamStatus},
		{name: "error string", body: `{"error":"overloaded"}`, kind: pipeline.UpstreamStatus},
		// Over the window: the 400 the same error before the 200 is, so
		// that it is not retried and falls back to a larger window only.
		{name: "context length error", body: `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			kind: pipeline.UpstreamStatus, status: 400},
		{name: "context length message only", body: `{"error":{"message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","code":400}}`,
			kind: pipeline.UpstreamStatus, status: 400},
		{name: "credentials error", body: `{"error":{"message":"bad key sk-abc","type":"authentication_error","code":"invalid_api_key"}}`, kind: pipeline.UpstreamStatus},
		{name: "empty choices", body: head + `"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}`, kind: pipeline.UpstreamCut, noContent: true},
		{name: "empty choices with spaces", body: head + `"choices":[ ` + "\n" + ` ]}`, kind: pipeline.UpstreamCut, noContent: true},
		{name: "choices missing", body: head + `"usage":null}`, kind: pipeline.UpstreamCut, noContent: true},
		{name: "choices null", body: head + `"choices":null}`, kind: pipeline.UpstreamCut, noContent: true},
		{name: "error null and no choices", body: head + `"choices":[],"error":null}`, kind: pipeline.UpstreamCut, noContent: true},
		{name: "answer", body: head + `"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, answer: true},
		{name: "answer with an error member", body: head + `"choices":[ {"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"error":{"message":"x"}}`, answer: true},
	}
	bodies := make(map[string]string, len(cases))
	for _, c := range cases {
		bodies[c.name] = c.body
	}
	u := bodyUpstream(t, bodies)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			req := chatReq(false)
			req.ID = c.name
			resp, err := u.Chat(context.Background(), req)
			if c.answer {
				if err != nil || !bytes.Contains(resp.Body, []byte(`"model":"m"`)) {
					t.Fatalf("an answer with a choice was not returned: %v", err)
				}
				return
			}
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) || ue.Kind != c.kind || errors.Is(err, pipeline.ErrNoContent) != c.noContent {
				t.Fatalf("got %v (%#v), want a %s failure (no content: %v)", err, ue, c.kind, c.noContent)
			}
			if c.kind != pipeline.UpstreamStatus {
				return
			}
			// The stream of the same error fails as the JSON answer does,
			// and the client gets the same envelope either way.
			sreq := chatReq(true)
			sreq.ID = c.name
			sresp, err := u.Chat(context.Background(), sreq)
			if err != nil {
				t.Fatal(err)
			}
			_, serr := sresp.Stream.Next()
			sresp.Stream.Close()
			je, se := mapError(ue), mapError(serr)
			want := c.status
			if want == 0 {
				want = 502
			}
			if je.status != want || se.status != je.status || !bytes.Equal(se.body, je.body) {
				t.Fatalf("JSON: %d %s\nstream: %d %s", je.status, je.body, se.status, se.body)
			}
			if c.name == "error object only" && !bytes.Contains(je.body, []byte(`"message":"overloaded"`)) {
				t.Fatalf("the upstream's message was not relayed as a 5xx body's is: %s", je.body)
			}
			if bytes.Contains(je.body, []byte("sk-abc")) {
				t.Fatalf("a credentials error's message was relayed: %s", je.body)
			}
		})
	}
}

// hasElement agrees with gjson's own count of a JSON value's elements.
func FuzzHasElement(f *testing.F) {
	for _, s := range []string{`{"choices":[]}`, `{"choices":[ ]}`, `{"choices":[{}]}`, `{"choices":[null]}`,
		`{"choices":{}}`, `{"choices":"[x]"}`, `{"choices":[` + "\t\r\n" + `]}`, `{"error":{}}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !jsonvalid.Bytes(body) {
			return // noAnswer reads only bodies that passed the check
		}
		r := gjson.GetBytes(body, "choices")
		if want := r.IsArray() && len(r.Array()) > 0; hasElement(r) != want {
			t.Fatalf("hasElement(%s) = %v, want %v", r.Raw, !want, want)
		}
	})
}

// BenchmarkNoAnswer is the check's cost on every non-streamed answer: a
// typical completion, whose choices come before its usage.
func BenchmarkNoAnswer(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("token ", 40) + `","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":40,"total_tokens":49},"system_fingerprint":"fp"}`)
	pc := &providerClient{}
	b.ReportAllocs()
	for b.Loop() {
		if pc.noAnswer(body, pipeline.MessageMap{}) != nil {
			b.Fatal("an answer was refused")
		}
	}
}

// A stream request answered with JSON: an error object is the failure it is
// in a JSON answer, with the same envelope (its message kept, a window
// error a 400); a chat.completion (an upstream that does not stream) is the
// stream of it; another body is a malformed answer. It was all read as an
// event stream without events: a cut, whose 502 lost the upstream's message.
func TestStreamAnsweredWithJSON(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"overloaded": `{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}`,
		"window":     `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		"completion": `{"id":"c","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`,
		"nothing":    `{"object":"list"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write([]byte(bodies[r.Header.Get("X-Request-Id")]))
	}))
	t.Cleanup(srv.Close)
	_, u := testUpstream(t, srv.URL+"/v1", "")
	for name, want := range map[string]int{"overloaded": 502, "window": 400} {
		jreq, sreq := chatReq(false), chatReq(true)
		jreq.ID, sreq.ID = name, name
		_, jerr := u.Chat(context.Background(), jreq)
		_, serr := u.Chat(context.Background(), sreq)
		je, se := mapError(jerr), mapError(serr)
		if se.status != want || je.status != want || !bytes.Equal(se.body, je.body) {
			t.Fatalf("%s: JSON %d %s\nstream %d %s", name, je.status, je.body, se.status, se.body)
		}
	}
	// An upstream that does not stream: its answer comes as the stream of
	// it, under the client's model name.
	sreq := chatReq(true)
	sreq.ID = "completion"
	resp, err := u.Chat(context.Background(), sreq)
	if err != nil || resp.Stream == nil {
		t.Fatalf("a completion for a stream: %v", err)
	}
	var text strings.Builder
	finish := ""
	for {
		c, err := resp.Stream.Next()
		if err != nil {
			break
		}
		if gjson.GetBytes(c, "model").Str != "m" {
			t.Fatalf("chunk %s", c)
		}
		text.WriteString(gjson.GetBytes(c, "choices.0.delta.content").Str)
		if f := gjson.GetBytes(c, "choices.0.finish_reason").Str; f != "" {
			finish = f
		}
	}
	resp.Stream.Close()
	if text.String() != "hi" || finish != "stop" {
		t.Fatalf("streamed %q, finish %q", text.String(), finish)
	}
	// A body that is neither an error nor an answer is malformed.
	sreq.ID = "nothing"
	_, err = u.Chat(context.Background(), sreq)
	var ue *pipeline.UpstreamError
	if !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamMalformed {
		t.Fatalf("an empty object for a stream: %v, want a malformed answer", err)
	}
}

// A JSON answer to a stream request is read up to the provider's
// max_response_bytes, as a JSON answer is: one over the 64 KiB an error body
// is read to comes whole, one over the bound is malformed.
func TestStreamAnsweredWithLargeJSON(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("long answer ", 10000) // 120 KB
	answer := `{"id":"c","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"` + text + `"},"finish_reason":"stop"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		extra string
		whole bool
	}{{"", true}, {"max_response_bytes = 100000", false}} {
		_, u := testUpstream(t, srv.URL+"/v1", c.extra)
		resp, err := u.Chat(context.Background(), chatReq(true))
		if !c.whole {
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamMalformed {
				t.Fatalf("over max_response_bytes: %v, want a malformed answer", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		for {
			chunk, err := resp.Stream.Next()
			if err != nil {
				break
			}
			got.WriteString(gjson.GetBytes(chunk, "choices.0.delta.content").Str)
		}
		resp.Stream.Close()
		if got.String() != text {
			t.Fatalf("streamed %d bytes of %d", got.Len(), len(text))
		}
	}
}
