package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/observe"
)

// insaneUsage is a provider whose answers report a usage with negative
// counts, or, when the request's body says "huge", a prompt count of
// 1.5e300; "normal" gets a usage of 7 prompt tokens. It answers chat
// completions (JSON or stream), embeddings and native Responses calls
// (JSON or stream).
func insaneUsage(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	chat := `{"prompt_tokens":-5,"completion_tokens":-1,"total_tokens":-6,"prompt_tokens_details":{"cached_tokens":-100}}`
	resp := `{"input_tokens":-3,"output_tokens":-1,"total_tokens":-4,"input_tokens_details":{"cached_tokens":-100}}`
	switch {
	case bytes.Contains(body, []byte("huge")):
		chat = `{"prompt_tokens":1.5e300,"completion_tokens":3,"total_tokens":1.5e300}`
		resp = `{"input_tokens":1.5e300,"output_tokens":3,"total_tokens":1.5e300}`
	case bytes.Contains(body, []byte("normal")):
		chat = `{"prompt_tokens":7,"completion_tokens":0,"total_tokens":7}`
	}
	stream := gjson.GetBytes(body, "stream").Bool()
	switch r.URL.Path {
	case "/v1/chat/completions":
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}],"usage":`+chat+`}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"fine"},"finish_reason":null}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[],"usage":` + chat + `}`,
		} {
			fmt.Fprint(w, "data: "+c+"\n\n")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	case "/v1/embeddings":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"model":"up-model","usage":`+chat+`}`)
	case "/v1/responses":
		done := `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"up-model","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"fine","annotations":[]}]}],"usage":` + resp + `}`
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, done)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"fine\"}\n\n")
		fmt.Fprint(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":"+done+"}\n\n")
	default:
		w.WriteHeader(404)
	}
}

// An upstream whose usage has negative counts (or a count so large its
// cost overflowed) took the gateway down: Prometheus panics on a counter's
// negative Add, which the meter made from the usage. On a pass-through
// answer (embeddings, a native /v1/responses call, JSON or a stream) the
// panic was on fasthttp's body-writer goroutine and ended the process; on
// the chat route it cost the request a 500, or a stream cut without
// [DONE], and the call was never charged. Now every answer reaches its
// client whole (a relayed answer with the usage as the upstream sent it);
// a usage with a count that is not one (negative, 1.5e300) is no usage
// to the meter, which charges the call's estimate as for an upstream that
// reports none (a huge count used to charge 1<<40 tokens, enough to spend
// any budget on one broken answer); nothing panics.
// Not parallel: it counts the process's panics.
func TestInsaneUpstreamUsage(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(insaneUsage))
	t.Cleanup(up.Close)
	cfg := withNativeResponses(strings.Replace(strings.Split(limitsConfig, "[[limits]]")[0], "context_window = 1000\n",
		"context_window = 1000\n[models.price]\ninput = 2\noutput = 10\ncached_input = 1\n", 1))
	h := newHarness(t, strings.ReplaceAll(cfg, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	panicsBefore := testutil.ToFloat64(observe.Panics)

	const (
		chatBody   = `{"model":"gpt-x","messages":[{"role":"user","content":"%s"}]%s}`
		withUsage  = `,"stream":true,"stream_options":{"include_usage":true}`
		justStream = `,"stream":true`
	)
	for _, tc := range []struct {
		name, path, body string
		want             []string // in the answer
		sse              string   // a stream's last event
	}{
		{"embeddings", "/embeddings", `{"model":"gpt-x","input":"x"}`, []string{`"embedding":[0.5]`, `"prompt_tokens":-5`}, ""},
		{"embeddings, huge", "/embeddings", `{"model":"gpt-x","input":"huge"}`, []string{`"embedding":[0.5]`, `"prompt_tokens":1.5e300`}, ""},
		{"native responses", "/responses", `{"model":"gpt-x","input":"x"}`, []string{`"input_tokens":-3`}, ""},
		{"native responses stream", "/responses", `{"model":"gpt-x","input":"x","stream":true}`, []string{`"input_tokens":-3`}, "response.completed"},
		{"chat", "/chat/completions", fmt.Sprintf(chatBody, "x", ""), []string{`"content":"fine"`, `"prompt_tokens":-5`}, ""},
		{"chat, huge", "/chat/completions", fmt.Sprintf(chatBody, "huge", ""), []string{`"content":"fine"`, `"prompt_tokens":1.5e300`}, ""},
		{"chat stream with usage", "/chat/completions", fmt.Sprintf(chatBody, "x", withUsage), []string{`"content":"fine"`, `"prompt_tokens":-5`}, "data: [DONE]"},
		{"chat stream", "/chat/completions", fmt.Sprintf(chatBody, "x", justStream), []string{`"content":"fine"`}, "data: [DONE]"},
		{"translated responses", "/responses", `{"model":"translated","input":"x"}`, []string{`"text":"fine"`}, ""},
		{"the next call", "/embeddings", `{"model":"gpt-x","input":"normal"}`, []string{`"prompt_tokens":7`}, ""},
	} {
		status, _, body := send(t, "POST", h.base+tc.path, "sk-team", tc.body)
		if status != 200 {
			t.Fatalf("%s: %d %s", tc.name, status, body)
		}
		for _, w := range tc.want {
			if !bytes.Contains(body, []byte(w)) {
				t.Fatalf("%s: %s lacks %s", tc.name, body, w)
			}
		}
		if tc.sse != "" && !bytes.Contains(body[max(0, len(body)-2048):], []byte(tc.sse)) {
			t.Fatalf("%s: the stream does not end with %q: %s", tc.name, tc.sse, body)
		}
		if tc.name == "chat stream" && bytes.Contains(body, []byte(`"usage"`)) {
			t.Fatalf("%s: a client that did not ask for usage got it: %s", tc.name, body)
		}
	}

	// Charged sanely: the nine broken reports are estimates (a few tokens
	// each), the normal call its 7; nothing near 1<<40.
	var team gjson.Result
	for deadline := time.Now().Add(5 * time.Second); ; {
		status, _, body := send(t, "GET", h.base+"/gateway/usage?group_by=tenant", "sk-ops", "")
		if status != 200 {
			t.Fatalf("usage report: %d %s", status, body)
		}
		if team = gjson.GetBytes(body, `data.#(group=="team")`); team.Get("upstream_calls").Int() >= 10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if in := team.Get("input_tokens").Int(); team.Get("upstream_calls").Int() != 10 || in < 7+9 || in > 1000 || team.Get("output_tokens").Int() > 100 ||
		team.Get("cached_tokens").Int() != 0 || team.Get("cost_microdollars").Int() > 10000 {
		t.Fatalf("usage of the team: %s", team.Raw)
	}
	if n := testutil.ToFloat64(observe.Panics) - panicsBefore; n != 0 {
		t.Fatalf("%v panics", n)
	}
}
