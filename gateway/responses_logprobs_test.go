package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// The tokens of the upstream's answer "Hello world": two chunks, one token
// each, with a top alternative; the JSON answer has them joined.
const (
	lpHello = `{"token":"Hello","logprob":-0.25,"bytes":[72,101,108,108,111],"top_logprobs":[{"token":"Hi","logprob":-1.5,"bytes":[72,105]}]}`
	lpWorld = `{"token":" world","logprob":-0.5,"bytes":[32,119,111,114,108,100],"top_logprobs":[{"token":" there","logprob":-2,"bytes":null}]}`
)

// logprobsUpstream answers every chat request "Hello world" with its
// logprobs when the request asks for them (logprobs:true), streamed or not,
// and keeps the bodies it was sent.
func logprobsUpstream(t *testing.T) (url string, bodies func() []string) {
	var mu sync.Mutex
	var got []string
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		lp := func(items string) string {
			if !gjson.GetBytes(b, "logprobs").Bool() {
				return "null"
			}
			return `{"content":[` + items + `],"refusal":null}`
		}
		if gjson.GetBytes(b, "stream").Bool() {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: "+head+`{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"+
				"data: "+head+`{"content":"Hello"},"logprobs":`+lp(lpHello)+`,"finish_reason":null}]}`+"\n\n"+
				"data: "+head+`{"content":" world"},"logprobs":`+lp(lpWorld)+`,"finish_reason":null}]}`+"\n\n"+
				"data: "+head+`{},"logprobs":null,"finish_reason":"stop"}]}`+"\n\n"+
				`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`+"\n\n"+
				"data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},`+
			`"logprobs":`+lp(lpHello+","+lpWorld)+`,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// A Responses request that includes "message.output_text.logprobs" gets the
// upstream's token logprobs on its output_text, in the Responses form
// (bytes always an array): the JSON answer, every output_text.delta (its own
// tokens), output_text.done, output_item.done and response.completed, all
// the same and valid against the schema (streamResponse and respond check
// the events, the deltas against the done and terminal logprobs, and the
// objects). The upstream is asked for logprobs with and without
// top_logprobs. Without the include, the output's logprobs stay empty.
func TestResponsesLogprobs(t *testing.T) {
	t.Parallel()
	url, bodies := logprobsUpstream(t)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", url), mockllm.Options{})
	want := `[{"token":"Hello","logprob":-0.25,"bytes":[72,101,108,108,111],"top_logprobs":[{"token":"Hi","logprob":-1.5,"bytes":[72,105]}]},` +
		`{"token":" world","logprob":-0.5,"bytes":[32,119,111,114,108,100],"top_logprobs":[{"token":" there","logprob":-2,"bytes":[]}]}]`
	for _, top := range []bool{false, true} {
		params := responses.ResponseNewParams{
			Model:   "gpt-x",
			Input:   responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			Include: []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs},
		}
		if top {
			params.TopLogprobs = openai.Int(1)
		}
		// JSON.
		r := h.respond(params, false)
		raw, _ := h.lastRaw()
		if got := gjson.GetBytes(raw, "output.0.content.0.logprobs").Raw; got != want {
			t.Fatalf("top_logprobs %v: JSON logprobs\n got %s\nwant %s", top, got, want)
		}
		if lp := r.Output[0].Content[0].Logprobs; len(lp) != 2 || lp[1].Token != " world" || len(lp[0].TopLogprobs) != 1 {
			t.Fatalf("top_logprobs %v: the SDK read %+v", top, lp)
		}
		sent := bodies()
		if up := sent[len(sent)-1]; gjson.Get(up, "logprobs").Raw != "true" || top != gjson.Get(up, "top_logprobs").Exists() {
			t.Fatalf("top_logprobs %v: upstream asked %s", top, up)
		}
		// Streamed.
		final, _ := h.streamResponse(params)
		raw, _ = h.lastRaw()
		if got := final.Output[0].Content[0].RawJSON(); gjson.Get(got, "logprobs").Raw != want {
			t.Fatalf("top_logprobs %v: response.completed logprobs %s\n%s", top, got, raw)
		}
		var deltas []string
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && gjson.Get(d, "type").Str == "response.output_text.delta" {
				deltas = append(deltas, gjson.Get(d, "logprobs.#.token").Raw)
			}
		}
		if strings.Join(deltas, " ") != `["Hello"] [" world"]` {
			t.Fatalf("top_logprobs %v: delta logprobs %v\n%s", top, deltas, raw)
		}
	}

	// Not included: empty, streamed or not.
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	h.respond(params, false)
	raw, _ := h.lastRaw()
	if got := gjson.GetBytes(raw, "output.0.content.0.logprobs").Raw; got != "[]" {
		t.Fatalf("logprobs not asked for: %s", raw)
	}
	h.streamResponse(params)
	if raw, _ := h.lastRaw(); strings.Contains(string(raw), `"logprobs":[{`) {
		t.Fatalf("logprobs not asked for, streamed:\n%s", raw)
	}
}
