package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// Pitfall, from the upstream side: some OpenAI-compatible servers (Ollama,
// SGLang, some Gemini bridges) stream every parallel tool call at index 0,
// each with its own id, or send no index at all. Relayed as they came,
// openai-go's accumulator would merge the calls into one, with the first name
// and the argument objects run together. The stream the client gets numbers
// them apart (the tool loop's accumulator re-encodes every client call).
func TestUpstreamCallIndexesRepaired(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish string) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return "data: " + head + delta + `,"finish_reason":` + f + "}]}\n\n"
	}
	for _, tc := range []struct{ name, body string }{
		{"all at index 0", ev(`{"role":"assistant","content":null}`, "") +
			ev(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"lookup_city","arguments":"{\"city\":"}}]}`, "") +
			ev(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}`, "") +
			ev(`{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"local_time","arguments":"{\"tz\":"}}]}`, "") +
			ev(`{"tool_calls":[{"index":0,"function":{"arguments":"\"CET\"}"}}]}`, "") +
			ev(`{}`, "tool_calls") + "data: [DONE]\n\n"},
		{"no index", ev(`{"role":"assistant","content":null}`, "") +
			ev(`{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"lookup_city","arguments":"{\"city\":\"Oslo\"}"}}]}`, "") +
			ev(`{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"local_time","arguments":"{\"tz\":"}}]}`, "") +
			ev(`{"tool_calls":[{"function":{"arguments":"\"CET\"}"}}]}`, "") +
			ev(`{}`, "tool_calls") + "data: [DONE]\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(up.Close)
			h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
			acc, err := sdkStream(h, toolParams())
			if err != nil {
				t.Fatal(err)
			}
			calls := acc.Choices[0].Message.ToolCalls
			if len(calls) != 2 || calls[0].ID != "call_a" || calls[0].Function.Name != "lookup_city" || calls[0].Function.Arguments != `{"city":"Oslo"}` ||
				calls[1].ID != "call_b" || calls[1].Function.Name != "local_time" || calls[1].Function.Arguments != `{"tz":"CET"}` {
				t.Fatalf("openai-go accumulated %+v", calls)
			}
			raw, _ := h.lastRaw()
			if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
		})
	}
}

// Some servers (vLLM with continuous usage stats, among others) put the
// running usage on every chunk. Relayed as it came to a client that asked
// for usage, openai-go's accumulator added the totals up: 6+7+8 = 21 tokens
// for an answer of 8. The client gets the last total once, in a usage-only
// chunk at the end as OpenAI sends it; a client that did not ask gets none.
func TestUpstreamRunningUsageSentOnce(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish string, completion int) string {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		return "data: " + head + delta + `,"finish_reason":` + f + `}],"usage":{"prompt_tokens":5,"completion_tokens":` +
			strconv.Itoa(completion) + `,"total_tokens":` + strconv.Itoa(5+completion) + "}}\n\n"
	}
	body := ev(`{"role":"assistant","content":"Hel"}`, "", 1) + ev(`{"content":"lo"}`, "", 2) + ev(`{}`, "stop", 3) + "data: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	for _, asked := range []bool{true, false} {
		p := userMsg("hi")
		if asked {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		acc, err := sdkStream(h, p)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := h.lastRaw()
		want := int64(0)
		if asked {
			want = 8
		}
		if acc.Usage.TotalTokens != want || acc.Choices[0].Message.Content != "Hello" {
			t.Fatalf("asked %v: openai-go accumulated %d tokens (want %d), content %q\n%s", asked, acc.Usage.TotalTokens, want, acc.Choices[0].Message.Content, raw)
		}
		// With usage asked for: one usage chunk, last, with no choices;
		// without: none.
		if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: asked}); err != nil {
			t.Fatalf("asked %v: %v\n%s", asked, err, raw)
		}
	}
}

// An upstream that refuses stream_options (older Azure API versions), which
// the gateway adds to ask for a stream's usage on a client's behalf: every
// stream of a client that asked for no usage failed with its 400. The
// provider is asked once more without them, and never with them again; a
// client that asked for usage itself gets the refusal.
func TestUpstreamRefusingStreamOptions(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []bool // whether each call carried stream_options
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		has := gjson.GetBytes(b, "stream_options").Exists()
		mu.Lock()
		calls = append(calls, has)
		mu.Unlock()
		if has {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error":{"message":"Unrecognized request argument supplied: stream_options","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`+
			"\n\n"+`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	// stream_options of the client's own: its refusal is the client's, and
	// marks nothing (a client must not turn metering off for everyone).
	own := userMsg("hi")
	own.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeObfuscation: openai.Bool(false)}
	if _, err := sdkStream(h, own); err == nil {
		t.Fatal("a client's own stream_options were taken out")
	}
	for i := range 2 {
		acc, err := sdkStream(h, userMsg("hi"))
		if err != nil || acc.Choices[0].Message.Content != "hi" {
			t.Fatalf("stream %d: %v, %+v", i, err, acc.Choices)
		}
	}
	mu.Lock()
	if want := "[true true false false]"; fmt.Sprint(calls) != want {
		t.Fatalf("upstream calls with stream_options: %v, want %s", calls, want)
	}
	mu.Unlock()
	p := userMsg("hi")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	_, err := sdkStream(h, p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "stream_options") {
		t.Fatalf("a client that asked for usage got %v, want the upstream's 400", err)
	}
}

// An upstream that ignores "stream": true and answers JSON: the client's
// SDK gets the stream of that answer (its annotations too), its usage when
// it asked for it, and none when it did not.
func TestUpstreamThatDoesNotStream(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,`+
			`"message":{"role":"assistant","content":"Hello there","annotations":[{"type":"url_citation","url_citation":{"start_index":0,"end_index":5,"title":"T","url":"https://example.com/"}}]},`+
			`"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	for _, asked := range []bool{true, false} {
		p := userMsg("hi")
		if asked {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		acc, err := sdkStream(h, p)
		raw, _ := h.lastRaw()
		if err != nil || acc.Choices[0].Message.Content != "Hello there" || acc.Choices[0].FinishReason != "stop" || (acc.Usage.TotalTokens == 7) != asked {
			t.Fatalf("asked %v: %v, %+v, usage %d\n%s", asked, err, acc.Choices, acc.Usage.TotalTokens, raw)
		}
		if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: asked}); err != nil {
			t.Fatalf("asked %v: %v\n%s", asked, err, raw)
		}
		// The message's annotations too, in a delta of their own.
		if !bytes.Contains(raw, []byte(`"delta":{"annotations":[{"type":"url_citation","url_citation":{"start_index":0,"end_index":5,"title":"T","url":"https://example.com/"}}]}`)) {
			t.Fatalf("asked %v: no annotations delta\n%s", asked, raw)
		}
	}
}

// Some servers (Ollama, SGLang) send "finish_reason":"" on every chunk
// before the last, and may in a JSON answer's choice. The gateway reads ""
// as no finish, but relayed as it came the client got a value the OpenAI
// schema does not allow (a reason or null in a chunk, a reason in an
// answer): a chunk's becomes null, and openai-go still accumulates the
// answer and its real reason; an answer's becomes "stop", the reason a
// finished answer without one gets when the gateway streams it.
func TestUpstreamEmptyFinishReasonRelayedAsNull(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish string) string {
		return "data: " + head + delta + `,"finish_reason":` + finish + "}]}\n\n"
	}
	stream := ev(`{"role":"assistant","content":""}`, `""`) + ev(`{"content":"Hel"}`, `""`) + ev(`{"content":"lo"}`, `""`) +
		ev(`{}`, `"stop"`) + "data: [DONE]\n\n"
	answer := `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":"Hello"}, "finish_reason": ""}]}`
	h := fixedUpstreamHarness(t, stream, answer)

	acc, err := sdkStream(h, userMsg("hi"))
	raw, _ := h.lastRaw()
	if err != nil || acc.Choices[0].Message.Content != "Hello" || acc.Choices[0].FinishReason != "stop" {
		t.Fatalf("stream: %v, %+v\n%s", err, acc.Choices, raw)
	}
	if bytes.Contains(raw, []byte(`"finish_reason":""`)) || bytes.Count(raw, []byte(`"finish_reason":null`)) != 3 {
		t.Fatalf("stream: want null on every chunk but the last\n%s", raw)
	}
	if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil {
		t.Fatalf("stream: %v\n%s", err, raw)
	}

	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("hi"))
	raw, _ = h.lastRaw()
	if err != nil || resp.Choices[0].Message.Content != "Hello" || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("JSON: %v, %+v\n%s", err, resp, raw)
	}
	if fr := gjson.GetBytes(raw, "choices.0.finish_reason"); fr.Str != "stop" {
		t.Fatalf("JSON: finish_reason %s, want \"stop\" (an answer's reason is never null)\n%s", fr.Raw, raw)
	}
}

// An upstream's "tool_calls": null and "function_call": null on a delta or
// a message without calls (SGLang, LiteLLM, Mistral) are left out, in the
// stream and in the JSON answer: the chat schema allows no null there.
func TestUpstreamNullCallsLeftOut(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish string) string {
		return "data: " + head + delta + `,"finish_reason":` + finish + "}]}\n\n"
	}
	stream := ev(`{"role":"assistant","content":"","tool_calls":null}`, `null`) + ev(`{"content":"Hel","tool_calls" : null,"function_call":null}`, `null`) +
		ev(`{"content":"lo","tool_calls":null}`, `null`) + ev(`{"tool_calls":null}`, `"stop"`) + "data: [DONE]\n\n"
	answer := `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":"Hello","tool_calls" : null,"function_call":null},"finish_reason":"stop"}]}`
	h := fixedUpstreamHarness(t, stream, answer)

	acc, err := sdkStream(h, userMsg("hi"))
	raw, _ := h.lastRaw()
	if err != nil || acc.Choices[0].Message.Content != "Hello" || bytes.Contains(raw, []byte("_call")) {
		t.Fatalf("stream: %v, %+v\n%s", err, acc.Choices, raw)
	}
	if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil {
		t.Fatalf("stream: %v\n%s", err, raw)
	}
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("hi"))
	raw, _ = h.lastRaw()
	if err != nil || resp.Choices[0].Message.Content != "Hello" || bytes.Contains(raw, []byte("_call")) {
		t.Fatalf("JSON: %v, %+v\n%s", err, resp, raw)
	}
}

// A relayed stream's data events without a choices array are evened out:
// a keep-alive {"type":"ping"} is dropped, a usage chunk that leaves
// choices out (or sends null) gets [] (the npm SDK's stream helper throws
// on either), and an {"object":"error"} (an older vLLM form) ends the
// stream as the error it is, never as a finished answer.
func TestUpstreamChunksWithoutChoices(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish string) string {
		return "data: " + head + delta + `,"finish_reason":` + finish + "}]}\n\n"
	}
	usage := `"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`
	for _, tc := range []struct {
		name, stream string
		failed       bool
	}{
		{"ping and usage without choices", "data: {\"type\":\"ping\"}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n" +
			ev(`{"role":"assistant","content":"Hel"}`, `null`) + ev(`{"content":"lo"}`, `"stop"`) +
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model",` + usage + "}\n\ndata: [DONE]\n\n", false},
		{"usage with null choices", ev(`{"role":"assistant","content":"Hello"}`, `"stop"`) +
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":null,` + usage + "}\n\ndata: [DONE]\n\n", false},
		{"error object", ev(`{"role":"assistant","content":"Hel"}`, `null`) +
			"data: {\"object\":\"error\",\"message\":\"boom\",\"type\":\"BadRequestError\",\"code\":400}\n\ndata: [DONE]\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := fixedUpstreamHarness(t, tc.stream, "{}")
			status, _, raw := h.post("/chat/completions", `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, nil)
			if status != 200 || bytes.Contains(raw, []byte("ping")) {
				t.Fatalf("%d\n%s", status, raw)
			}
			e, _ := streamError(raw)
			if tc.failed {
				if !e.Exists() || bytes.Contains(raw, []byte(`"finish_reason":"stop"`)) || e.Get("message").Str != "boom" {
					t.Fatalf("an error object ended as an answer\n%s", raw)
				}
				// The same object as a JSON answer is the same error.
				h := fixedUpstreamHarness(t, "", `{"object":"error","message":"boom","type":"BadRequestError","code":400}`)
				status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil)
				if status != 502 || gjson.GetBytes(body, "error.message").Str != "boom" {
					t.Fatalf("JSON: %d %s", status, body)
				}
				return
			}
			last := ""
			for _, line := range strings.Split(string(raw), "\n") {
				if strings.HasPrefix(line, "data: {") {
					if last = line[len("data: "):]; !gjson.Get(last, "choices").IsArray() {
						t.Fatalf("a chunk without a choices array: %s\n%s", last, raw)
					}
				}
			}
			if e.Exists() || !gjson.Get(last, "usage").IsObject() || gjson.Get(last, "choices").Raw != "[]" {
				t.Fatalf("want the usage chunk with choices [] last\n%s", raw)
			}
		})
	}
}

// One upstream event over the gateway's per-event bound (8 MiB) ends the
// stream with upstream_response_too_large, as a JSON answer over its bound
// does, not as a malformed answer.
func TestUpstreamEventTooLarge(t *testing.T) {
	t.Parallel()
	big := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"` +
		strings.Repeat("a", 9<<20) + "\"},\"finish_reason\":null}]}\n\ndata: [DONE]\n\n"
	h := fixedUpstreamHarness(t, big, "{}")
	status, _, raw := h.post("/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if status == 200 {
		e, _ := streamError(raw)
		raw = []byte(`{"error":` + e.Raw + `}`)
	}
	if code := gjson.GetBytes(raw, "error.code").Str; code != "upstream_response_too_large" {
		t.Fatalf("%d: %.300s", status, raw)
	}
}

// An upstream that never names a choice's finish (Ollama-like "" on every
// chunk, or null) streams a finish chunk of the gateway's for it before the
// usage chunk or [DONE]: "stop", or "tool_calls" after calls, the reasons
// the JSON answer of the same request gives.
func TestUpstreamNeverFinishingGetsAFinish(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","system_fingerprint":"fp_1","choices":[`
	ev := func(choices string) string { return "data: " + head + choices + "]}\n\n" }
	text := func(i int, delta, finish string) string {
		return fmt.Sprintf(`{"index":%d,"delta":%s,"finish_reason":%s}`, i, delta, finish)
	}
	usage := "data: " + head + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n"
	call := `{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}`
	mid := "data: " + head + `]}` + "\n\n"
	for _, tc := range []struct {
		name, stream string
		usage        bool
		want         []string // each choice's accumulated finish
		text         string   // choice 0's text, when checked
		loose        bool     // the upstream breaks a wire rule the relay passes on: no check
	}{
		// A chunk without choices mid-stream (empty, or a running usage)
		// is not the end: the finish goes before the last usage chunk.
		{name: "empty chunk mid-stream", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + mid + ev(text(0, `{"content":"lo"}`, `null`)) + "data: [DONE]\n\n",
			want: []string{"stop"}, text: "Hello"},
		{name: "usage mid-stream", usage: true, stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + usage + ev(text(0, `{"content":"lo"}`, `null`)) + usage + usage + "data: [DONE]\n\n",
			want: []string{"stop"}, text: "Hello", loose: true},
		// An Azure-style first chunk (no id, a prompt filter's) is not
		// relayed, and gives the made chunk nothing: its id, created,
		// fingerprint and service tier are the answer's.
		{name: "prompt filter first", stream: "data: {\"id\":\"\",\"object\":\"\",\"created\":0,\"model\":\"\",\"choices\":[],\"prompt_filter_results\":[]}\n\n" +
			"data: " + strings.Replace(head, `"system_fingerprint"`, `"service_tier":"default","system_fingerprint"`, 1) + text(0, `{"role":"assistant","content":"Hello"}`, `""`) + "]}\n\n" + "data: [DONE]\n\n",
			want: []string{"stop"}, text: "Hello"},
		// Two choices in one chunk: choice 0 without the key, choice 1
		// ending; choice 0 still gets its own finish.
		{name: "two choices in a chunk", stream: ev(text(0, `{"role":"assistant","content":"a"}`, `null`)+","+text(1, `{"role":"assistant","content":"b"}`, `null`)) +
			ev(`{"index":0,"delta":{"content":"c"}},`+text(1, `{}`, `"length"`)) + "data: [DONE]\n\n", want: []string{"stop", "length"}, text: "ac", loose: true},
		// A choice that came with no content still ends when another had some.
		{name: "one choice without content", stream: ev(text(0, `{"role":"assistant","content":"a"}`, `null`)) + ev(text(1, `{"role":"assistant","content":""}`, `null`)) + "data: [DONE]\n\n",
			want: []string{"stop", "stop"}, text: "a"},
		{name: "empty", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `""`)) + ev(text(0, `{"content":"lo"}`, `""`)) + "data: [DONE]\n\n", want: []string{"stop"}},
		{name: "null", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + "data: [DONE]\n\n", want: []string{"stop"}},
		{name: "before usage", usage: true, stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `""`)) + usage + "data: [DONE]\n\n", want: []string{"stop"}},
		{name: "calls", stream: ev(text(0, call, `""`)) + "data: [DONE]\n\n", want: []string{"tool_calls"}},
		{name: "two choices, one ended", stream: ev(text(0, `{"role":"assistant","content":"a"}`, `null`)) + ev(text(1, `{"role":"assistant","content":"b"}`, `null`)) +
			ev(text(1, `{}`, `"length"`)) + "data: [DONE]\n\n", want: []string{"stop", "length"}},
		{name: "ended", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + ev(text(0, `{}`, `"length"`)) + "data: [DONE]\n\n", want: []string{"length"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acc, raw, err := streamFrom(t, tc.stream, tc.usage)
			if err != nil || len(acc.Choices) != len(tc.want) {
				t.Fatalf("%v, %+v\n%s", err, acc.Choices, raw)
			}
			for i, want := range tc.want {
				if got := string(acc.Choices[i].FinishReason); got != want {
					t.Errorf("choice %d finished %q, want %q\n%s", i, got, want, raw)
				}
			}
			if tc.text != "" && acc.Choices[0].Message.Content != tc.text {
				t.Errorf("choice 0 says %q, want %q\n%s", acc.Choices[0].Message.Content, tc.text, raw)
			}
			// The made finish follows the last content and precedes the
			// last usage chunk, whatever came between.
			events := strings.Split(strings.TrimSpace(string(raw)), "\n\n")
			last := len(events) - 2 // before [DONE]
			if tc.usage {
				if !strings.Contains(events[last], `"usage":{`) || !strings.Contains(events[last-1], `"finish_reason":"stop"`) {
					t.Errorf("the finish is not right before the last usage chunk\n%s", raw)
				}
			}
			// The made chunk carries no usage member: a null would clear, in
			// npm openai's accumulator, a usage that came before it.
			if bytes.Contains(raw, []byte(`"logprobs":null,"finish_reason":"stop"}],"usage":null`)) {
				t.Errorf("the made finish chunk says usage null\n%s", raw)
			}
			if strings.Contains(tc.stream, `"service_tier"`) && acc.ServiceTier != "default" {
				t.Errorf("service tier %q: the made chunk lost it\n%s", acc.ServiceTier, raw)
			}
			if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: tc.usage}); err != nil && !tc.loose {
				t.Fatalf("%v\n%s", err, raw)
			}
			if tc.usage && !tc.loose && acc.Usage.TotalTokens != 5 {
				t.Errorf("usage %+v", acc.Usage)
			}
			//lint:ignore SA1019 the SDK deprecates the field; the member is still on the wire, and its accumulator keeps the last chunk's
			if acc.SystemFingerprint != "fp_1" || bytes.Count(raw, []byte(`"id":"c1","object":"chat.completion.chunk","created":7,`)) != bytes.Count(raw, []byte("data: {")) {
				t.Errorf("a made chunk lacks the stream's id or created, or the fingerprint is lost\n%s", raw)
			}
		})
	}
}

// An upstream whose body ends without [DONE] after the whole answer (every
// choice finished) answered in full: the stream ends as a complete one, as
// the JSON answer does. Without a finish, the end is a cut: an error event.
func TestUpstreamCompleteWithoutDone(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choices string) string { return "data: " + head + choices + "]}\n\n" }
	text := ev(`{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}`)
	finish := ev(`{"index":0,"delta":{},"finish_reason":"stop"}`)
	usage := "data: " + head + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n"
	for _, tc := range []struct {
		name, stream string
		usage, whole bool
	}{
		{name: "finished", stream: text + finish, whole: true},
		{name: "finished with usage", stream: text + finish + usage, usage: true, whole: true},
		{name: "no finish", stream: text},
		{name: "usage missing", stream: text + finish, usage: true, whole: true},
		// A usage chunk does not end an answer (some upstreams send one after
		// every piece): without a finish the end is a cut, the usage before it.
		{name: "usage, no finish", stream: text + usage, usage: true},
		// A failure after a usage chunk: the usage goes out before the error.
		{name: "usage, then garbage", stream: text + usage + "data: not json\n\n", usage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acc, raw, err := streamFrom(t, tc.stream, tc.usage)
			if tc.whole {
				if err != nil || acc.Choices[0].Message.Content != "Hello" || acc.Choices[0].FinishReason != "stop" {
					t.Fatalf("%v, %+v\n%s", err, acc.Choices, raw)
				}
				// An upstream that sends no usage chunk gets none relayed, as
				// after [DONE] (the JSON answer then has no usage either).
				want := tc.usage && strings.Contains(tc.stream, `"usage"`)
				if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: want}); err != nil {
					t.Fatalf("%v\n%s", err, raw)
				}
				return
			}
			if err == nil {
				t.Fatalf("a cut stream ended without an error\n%s", raw)
			}
			if u := bytes.Index(raw, []byte(`"usage":{`)); strings.Contains(tc.stream, `"usage"`) && (u < 0 || u > bytes.Index(raw, []byte("event: error"))) {
				t.Fatalf("the upstream's usage did not go out before the error\n%s", raw)
			}
			if _, err := wiretest.CheckStream(raw, wiretest.Options{WantError: true, WantUsage: tc.usage}); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
		})
	}
}

// streamFrom streams a chat request (asking for usage when usage) through a
// gateway whose upstream answers every stream with stream, and returns what
// openai-go accumulates and the raw stream.
func streamFrom(t *testing.T, stream string, usage bool) (openai.ChatCompletion, []byte, error) {
	t.Helper()
	h := fixedUpstreamHarness(t, stream, `{}`)
	p := userMsg("hi")
	if usage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	acc, err := sdkStream(h, p)
	raw, _ := h.lastRaw()
	return acc, raw, err
}

// An upstream that leaves the role out of a choice's first delta: the
// relay gives that delta "role":"assistant", once per choice, as every SDK
// expects (npm openai's finalChatCompletion threw "missing role for choice
// 0", found by a probe; the same request's JSON answer had the role).
func TestUpstreamWithoutRoleGetsOne(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choices string) string { return "data: " + head + choices + "]}\n\n" }
	for _, tc := range []struct {
		name, stream string
		choices      int
	}{
		{"one choice", ev(`{"index":0,"delta":{"content":"abc"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{"content":" def"},"finish_reason":null}`) + ev(`{"index":0,"delta":{},"finish_reason":"stop"}`) + "data: [DONE]\n\n", 1},
		{"null delta first", ev(`{"index":0,"delta":null,"finish_reason":null}`) + ev(`{"index":0,"delta":{"content":"abc"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{},"finish_reason":"stop"}`) + "data: [DONE]\n\n", 1},
		{"null role", ev(`{"index":0,"delta":{"role":null,"content":"abc"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{"role":null},"finish_reason":"stop"}`) + "data: [DONE]\n\n", 1},
		{"no delta first", ev(`{"index":0,"finish_reason":null}`) + ev(`{"index":0,"delta":{"content":"abc"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{},"finish_reason":"stop"}`) + "data: [DONE]\n\n", 1},
		{"second choice later", ev(`{"index":0,"delta":{"role":"assistant","content":"abc"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{"content":"xyz"},"finish_reason":null}`) +
			ev(`{"index":1,"delta":{},"finish_reason":"stop"}`) + "data: [DONE]\n\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acc, raw, err := streamFrom(t, tc.stream, false)
			if err != nil || len(acc.Choices) != tc.choices {
				t.Fatalf("%v, %+v\n%s", err, acc.Choices, raw)
			}
			if n := bytes.Count(raw, []byte(`"role":"assistant"`)); n != tc.choices {
				t.Fatalf("%d roles, want one per choice\n%s", n, raw)
			}
			for i, c := range acc.Choices {
				if c.Message.Role != "assistant" {
					t.Fatalf("choice %d accumulated role %q\n%s", i, c.Message.Role, raw)
				}
			}
			if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil && !strings.Contains(tc.stream, "null") && !strings.Contains(tc.name, "no delta") {
				t.Fatalf("%v\n%s", err, raw) // a null delta or role, or a choice without a delta, breaks other rules the relay passes on
			}
		})
	}
}

// A relayed stream (a request without tools) keeps the stream's rules
// whatever the upstream breaks of them, so that openai-go's accumulator
// gets what the JSON answer of the same request says (a wire probe found
// each of these relayed as it came): the role once, each choice's finish
// in a chunk of its own with an empty delta, after the choice's last
// content, and no chunk of a choice after its finish (openai-go wipes the
// finish_reason on any later chunk of the choice).
func TestRelayedStreamKeepsTheRules(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choices string) string { return "data: " + head + choices + "]}\n\n" }
	text := func(i int, delta, finish string) string {
		return fmt.Sprintf(`{"index":%d,"delta":%s,"finish_reason":%s}`, i, delta, finish)
	}
	usage := "data: " + head + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n"
	call := `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}`
	for _, tc := range []struct {
		name, stream string
		usage        bool
		finish, text string
		call, loose  bool   // loose: the upstream breaks a rule the relay passes on, no wiretest check
		raw          string // a part of the stream that must go out as it came
	}{
		{name: "role on every delta", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + ev(text(0, `{"role":"assistant","content":"lo"}`, `null`)) +
			ev(text(0, `{"role":"assistant"}`, `"stop"`)) + "data: [DONE]\n\n", finish: "stop", text: "Hello"},
		{name: "content after the finish", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + ev(text(0, `{}`, `"length"`)) +
			ev(text(0, `{"content":"lo"}`, `null`)) + "data: [DONE]\n\n", finish: "length", text: "Hello"},
		// Its "index" last, as Azure orders a choice's keys, and past the
		// first 1,024 bytes after the finish (a review: it was past the
		// look-ahead, and the finish went out twice).
		{name: "long content after the finish", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + ev(text(0, `{}`, `"length"`)) +
			ev(`{"delta":{"content":"lo`+strings.Repeat("o", 1500)+`"},"finish_reason":null,"index":0}`) + "data: [DONE]\n\n",
			finish: "length", text: "Hello" + strings.Repeat("o", 1500)},
		{name: "content after the finish, then usage", usage: true, stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + ev(text(0, `{}`, `"length"`)) +
			ev(text(0, `{"content":"lo"}`, `null`)) + usage + "data: [DONE]\n\n", finish: "length", text: "Hello"},
		{name: "finish with the last content", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + ev(text(0, `{"content":"lo"}`, `"stop"`)) +
			"data: [DONE]\n\n", finish: "stop", text: "Hello"},
		{name: "finish with the last content, then usage", usage: true, stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) +
			ev(text(0, `{"content":"lo"}`, `"stop"`)) + usage + "data: [DONE]\n\n", finish: "stop", text: "Hello"},
		{name: "whole call with the finish", stream: ev(text(0, `{"role":"assistant","content":null}`, `null`)) + ev(text(0, call, `"tool_calls"`)) +
			"data: [DONE]\n\n", finish: "tool_calls", call: true},
		{name: "usage chunk repeating the choice", usage: true, stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + ev(text(0, `{}`, `"stop"`)) +
			"data: " + head + text(0, `{}`, `null`) + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n" + "data: [DONE]\n\n", finish: "stop", text: "Hello"},
		{name: "finish twice", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + ev(text(0, `{}`, `"stop"`)) + ev(text(0, `{}`, `"stop"`)) +
			"data: [DONE]\n\n", finish: "stop", text: "Hello"},
		{name: "prompt filter first", stream: "data: {\"id\":\"\",\"object\":\"\",\"created\":0,\"model\":\"\",\"choices\":[],\"prompt_filter_results\":[]}\n\n" +
			ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + ev(text(0, `{}`, `"stop"`)) + "data: [DONE]\n\n", finish: "stop", text: "Hello"},
		// The upstream's last word is the finish (two probes: a second
		// finish, or late content with one of its own, lost to the first).
		{name: "a second finish with another reason", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + ev(text(0, `{}`, `"stop"`)) +
			ev(text(0, `{}`, `"content_filter"`)) + "data: [DONE]\n\n", finish: "content_filter", text: "Hello"},
		{name: "late content with its own finish", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + ev(text(0, `{}`, `"stop"`)) +
			ev(text(0, `{"content":"lo"}`, `"length"`)) + "data: [DONE]\n\n", finish: "length", text: "Hello"},
		// A running usage before the end goes out as it came (the upstream
		// sends two): loose.
		{name: "usage before the finish, then late content", usage: true, loose: true, stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + usage +
			ev(text(0, `{}`, `"length"`)) + ev(text(0, `{"content":"lo"}`, `null`)) + usage + "data: [DONE]\n\n", finish: "length", text: "Hello"},
		{name: "late content, then no [DONE]", stream: ev(text(0, `{"role":"assistant","content":"Hel"}`, `null`)) + ev(text(0, `{}`, `"length"`)) +
			ev(text(0, `{"content":"lo"}`, `null`)), finish: "length", text: "Hello"},
		// A review: a one-letter reason went out twice; a provider's own
		// member named finish_reason was nulled; of a key a choice repeats,
		// the SDKs take the last, which went out as "stop".
		{name: "one-letter reason", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + ev(text(0, `{}`, `"x"`)) + "data: [DONE]\n\n",
			finish: "x", text: "Hello"},
		{name: "a provider's own finish_reason", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) +
			ev(`{"index":0,"delta":{},"finish_reason":"stop","provider_meta":{"finish_reason":"STOP"}}`) + "data: [DONE]\n\n",
			finish: "stop", text: "Hello", raw: `"provider_meta":{"finish_reason":"STOP"}`},
		{name: "a repeated finish_reason key", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) +
			ev(`{"index":0,"delta":{},"finish_reason":null,"finish_reason":"length"}`) + "data: [DONE]\n\n", finish: "length", text: "Hello", loose: true},
		{name: "running usage and the role on every delta", usage: true, stream: "data: " + head + text(0, `{"role":"assistant","content":"Hel"}`, `null`) + `],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}` + "\n\n" +
			"data: " + head + text(0, `{"role":"assistant","content":""}`, `null`) + `],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}` + "\n\n" +
			"data: " + head + text(0, `{"role":"assistant","content":"lo"}`, `null`) + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n" +
			"data: " + head + text(0, `{}`, `"stop"`) + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n" + "data: [DONE]\n\n",
			finish: "stop", text: "Hello"},
		{name: "keep-alive after content", stream: ev(text(0, `{"role":"assistant","content":"Hello"}`, `null`)) + "data: " + head + "]}\n\n" +
			ev(text(0, `{}`, `"stop"`)) + "data: [DONE]\n\n", finish: "stop", text: "Hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := fixedUpstreamHarness(t, tc.stream, `{}`)
			p := userMsg("hi")
			if tc.usage {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			stream := h.client.Chat.Completions.NewStreaming(context.Background(), p)
			var acc openai.ChatCompletionAccumulator
			var finished []string
			for stream.Next() {
				acc.AddChunk(stream.Current())
				if c, ok := acc.JustFinishedToolCall(); ok {
					finished = append(finished, c.Name+" "+c.Arguments)
				}
			}
			raw, _ := h.lastRaw()
			if err := stream.Err(); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
			if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: tc.usage}); err != nil && !tc.loose {
				t.Fatalf("%v\n%s", err, raw)
			}
			if len(acc.Choices) != 1 || string(acc.Choices[0].FinishReason) != tc.finish || acc.Choices[0].Message.Content != tc.text {
				t.Fatalf("accumulated %+v, want %q finished %q\n%s", acc.Choices, tc.text, tc.finish, raw)
			}
			if tc.call && (len(finished) != 1 || finished[0] != `get_weather {"city":"Oslo"}`) {
				t.Errorf("openai-go reported the finished calls %q\n%s", finished, raw)
			}
			if tc.usage && !tc.loose && acc.Usage.TotalTokens != 5 {
				t.Errorf("usage %+v\n%s", acc.Usage, raw)
			}
			if tc.raw != "" && !strings.Contains(string(raw), tc.raw) {
				t.Errorf("%s did not go out as it came\n%s", tc.raw, raw)
			}
			if ids := chunkIDs(h); len(ids) != 1 || !ids["c1"] {
				t.Errorf("chunk ids %v\n%s", ids, raw)
			}
		})
	}
}

// Content the upstream sends after a finish, a moment later (once the
// client has the content before it): the finish went out as it came (a
// finish is not held back for what may follow it), so it goes out again
// after the content, with the upstream's reason, and the SDKs end with it
// (openai-go's accumulator wiped the first on the late chunk). And a
// keep-alive chunk (no choice) after content does not hold that content
// back until the upstream's next event (a review: the relay skipped such a
// chunk while the client's writer held its flush for it).
func TestRelayedStreamContentAfterTheFinishLater(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choice string) string { return "data: " + head + choice + "]}\n\n" }
	gate := make(chan struct{})
	var once sync.Once
	guarded := make(chan bool, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ev(`{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}`)+
			ev(`{"index":0,"delta":{},"finish_reason":"length"}`)+"data: "+head+"]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-gate:
			guarded <- false
		case <-time.After(10 * time.Second): // a deadlock guard, not a timing check
			guarded <- true
		}
		_, _ = io.WriteString(w, ev(`{"index":0,"delta":{"content":"lo"},"finish_reason":null}`)+"data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), userMsg("hi"))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if acc.Choices[0].Message.Content == "Hel" {
			once.Do(func() { close(gate) })
		}
	}
	raw, _ := h.lastRaw()
	if err := stream.Err(); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if <-guarded {
		t.Errorf("the client had not seen the content before the upstream's pause ended\n%s", raw)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "length" || acc.Choices[0].Message.Content != "Hello" {
		t.Fatalf("accumulated %+v\n%s", acc.Choices, raw)
	}
	events := strings.Split(strings.TrimSpace(string(raw)), "\n\n")
	if len(events) < 2 || !strings.Contains(events[len(events)-2], `"finish_reason":"length"`) {
		t.Fatalf("the last chunk is not the finish\n%s", raw)
	}
}

// Several choices, each ended by the upstream in its own way: every one
// keeps its own reason, and its finish goes out once, after all of its
// content (a review: two finish chunks in a row, then content for the
// first choice, gave that choice "stop" and a choice after its finish).
func TestRelayedStreamChoicesKeepTheirReasons(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choices ...string) string { return "data: " + head + strings.Join(choices, ",") + "]}\n\n" }
	text := func(i int, delta, finish string) string {
		return fmt.Sprintf(`{"index":%d,"delta":%s,"finish_reason":%s}`, i, delta, finish)
	}
	stream := ev(text(0, `{"role":"assistant","content":"a"}`, `null`), text(1, `{"role":"assistant","content":"b"}`, `null`)) +
		ev(text(0, `{}`, `"length"`)) + ev(text(1, `{"content":"c"}`, `"stop"`)) + ev(text(0, `{"content":"d"}`, `null`)) +
		ev(text(2, `{"role":"assistant","content":"e"}`, `"content_filter"`)) + "data: [DONE]\n\n"
	acc, raw, err := streamFrom(t, stream, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if _, err := wiretest.CheckStream(raw, wiretest.Options{}); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	want := []struct{ text, finish string }{{"ad", "length"}, {"bc", "stop"}, {"e", "content_filter"}}
	if len(acc.Choices) != len(want) {
		t.Fatalf("accumulated %+v\n%s", acc.Choices, raw)
	}
	for i, w := range want {
		if c := acc.Choices[i]; c.Message.Content != w.text || string(c.FinishReason) != w.finish {
			t.Errorf("choice %d: %q finished %q, want %q finished %q\n%s", i, c.Message.Content, c.FinishReason, w.text, w.finish, raw)
		}
	}

	// A running usage on every chunk, a client that asked for usage: one
	// usage chunk, last, with the last total (a review: a chunk whose
	// choices held nothing became a usage chunk mid-stream, and openai-go
	// added the two up).
	u := func(c, t int) string {
		return fmt.Sprintf(`,"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}`, c, t)
	}
	withUsage := func(usage string, choices ...string) string {
		return "data: " + head + strings.Join(choices, ",") + "]" + usage + "}\n\n"
	}
	stream = withUsage(u(1, 4), text(0, `{"role":"assistant","content":"a"}`, `null`)) + withUsage(u(2, 5), text(1, `{"role":"assistant","content":"b"}`, `null`)) +
		withUsage(u(2, 5), text(0, `{}`, `"stop"`)) + withUsage(u(3, 6), text(1, `{"content":"c"}`, `null`)) + withUsage(u(3, 6), text(1, `{}`, `"stop"`)) + "data: [DONE]\n\n"
	acc, raw, err = streamFrom(t, stream, true)
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: true}); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if len(acc.Choices) != 2 || acc.Choices[0].Message.Content != "a" || acc.Choices[1].Message.Content != "bc" || acc.Usage.TotalTokens != 6 {
		t.Fatalf("accumulated %+v, usage %+v\n%s", acc.Choices, acc.Usage, raw)
	}
}

// A finish the upstream sent goes out before a failure that follows it
// (an error event, a cut), as it did when it went out as it came; a choice
// the upstream left open gets none (a probe: the finish that came in the
// same delta as the last content was lost to the error).
func TestRelayedStreamFinishBeforeAFailure(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choice string) string { return "data: " + head + choice + "]}\n\n" }
	for _, tc := range []struct{ name, tail, finish string }{
		{"error event", ev(`{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}`) + "event: error\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n", "length"},
		{"cut", ev(`{"index":0,"delta":{},"finish_reason":"stop"}`) + "data: {\"id\":", "stop"},
		{"cut before the finish", ev(`{"index":0,"delta":{"content":"lo"},"finish_reason":null}`) + "data: {\"id\":", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := fixedUpstreamHarness(t, ev(`{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}`)+tc.tail, `{}`)
			_, err := sdkStream(h, userMsg("hi"))
			raw, _ := h.lastRaw()
			if err == nil || !bytes.Contains(raw, []byte("event: error")) {
				t.Fatalf("no failure: %v\n%s", err, raw)
			}
			sum, verr := wiretest.CheckStream(raw, wiretest.Options{WantError: true})
			if verr != nil {
				t.Fatalf("%v\n%s", verr, raw)
			}
			if sum.FinishReason != tc.finish {
				t.Errorf("finish %q before the failure, want %q\n%s", sum.FinishReason, tc.finish, raw)
			}
		})
	}
}

// A usage chunk that lists the choice again, with nothing in it, a moment
// after a finish that went out as it came: the choice is taken out of it,
// so the finish stays the choice's last word, once (a review: the finish
// went out again after it).
func TestRelayedStreamStaleChoiceAfterASentFinish(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choice string) string { return "data: " + head + choice + "]}\n\n" }
	gate := make(chan struct{})
	var once sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ev(`{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}`)+
			ev(`{"index":0,"delta":{},"finish_reason":"stop"}`))
		w.(http.Flusher).Flush()
		select {
		case <-gate:
		case <-time.After(10 * time.Second): // a deadlock guard, not a timing check
		}
		_, _ = io.WriteString(w, "data: "+head+`{"index":0,"delta":{},"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`+"\n\n"+"data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	for _, usage := range []bool{false, true} {
		p := userMsg("hi")
		if usage {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		stream := h.client.Chat.Completions.NewStreaming(context.Background(), p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
			if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].FinishReason != "" {
				once.Do(func() { close(gate) })
			}
		}
		raw, _ := h.lastRaw()
		if err := stream.Err(); err != nil {
			t.Fatalf("%v\n%s", err, raw)
		}
		if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: usage}); err != nil {
			t.Fatalf("usage %v: %v\n%s", usage, err, raw)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "stop" || acc.Choices[0].Message.Content != "Hello" || usage && acc.Usage.TotalTokens != 5 {
			t.Fatalf("usage %v: accumulated %+v %+v\n%s", usage, acc.Choices, acc.Usage, raw)
		}
	}
}

// OpenAI's JSON answer always has each choice's logprobs and its
// message's content and refusal, null when there is none; some servers
// (vLLM, Ollama, llama.cpp) leave them out, a message of tool calls its
// content too. The gateway's answer has them, as the schema requires and
// as the same request streamed through the gateway is answered.
func TestUpstreamAnswerGetsItsNullMembers(t *testing.T) {
	t.Parallel()
	schema := wiretest.LoadSchema(t)
	for name, answer := range map[string]string{
		"calls without content": `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,` +
			`"message":{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`,
		"text without refusal or logprobs": `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`,
		"logprobs of content, message without content": `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,` +
			`"logprobs":{"content":[],"refusal":null},"message":{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`"finish_reason":"tool_calls"}]}`,
		"arguments as an object with a content key": `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,` +
			`"message":{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":{"path":"a","content":"x"}}}],"refusal":null},` +
			`"logprobs":null,"finish_reason":"tool_calls"}]}`,
		"two choices": `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,` +
			`"message":{"role":"assistant","content":"Hi","refusal":null},"logprobs":null,"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"Ho"},"finish_reason":"stop"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := fixedUpstreamHarness(t, "", answer)
			status, _, raw := send(t, http.MethodPost, h.base+"/chat/completions", "",
				`{"model":"gpt-x","n":2,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`)
			if status != http.StatusOK {
				t.Fatalf("%d %s", status, raw)
			}
			if err := schema.Completion(raw); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
			gjson.GetBytes(raw, "choices").ForEach(func(_, c gjson.Result) bool {
				m := c.Get("message")
				for _, v := range []gjson.Result{c.Get("logprobs"), m.Get("content"), m.Get("refusal")} {
					if !v.Exists() {
						t.Fatalf("choice %s lacks a member\n%s", c.Get("index").Raw, raw)
					}
				}
				return true
			})
			if want := gjson.Get(answer, "choices.0.message.content").Str; gjson.GetBytes(raw, "choices.0.message.content").Str != want {
				t.Fatalf("content changed\n%s", raw)
			}
		})
	}
}

// DeepSeek's and vLLM-style servers' last chunk carries "content":"" (and a
// usage) beside the finish: relayed as it came, the finish was not in a
// chunk of its own (delta {}), as the SDKs' rules want it. It goes in one
// after the choice's last delta, with or without usage asked.
func TestUpstreamFinishBesideEmptyContent(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish, tail string) string {
		return "data: " + head + delta + `,"finish_reason":` + finish + "}]" + tail + "}\n\n"
	}
	stream := ev(`{"role":"assistant","content":""}`, `null`, "") + ev(`{"content":"Hi"}`, `null`, "") +
		ev(`{"content":""}`, `"stop"`, `,"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}`) + "data: [DONE]\n\n"
	h := fixedUpstreamHarness(t, stream, `{}`)
	for _, asked := range []bool{false, true} {
		p := userMsg("hi")
		if asked {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		acc, err := sdkStream(h, p)
		raw, _ := h.lastRaw()
		if err != nil || acc.Choices[0].Message.Content != "Hi" || acc.Choices[0].FinishReason != "stop" || (acc.Usage.TotalTokens == 6) != asked {
			t.Fatalf("asked %v: %v %+v\n%s", asked, err, acc.Choices, raw)
		}
		if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: asked}); err != nil {
			t.Fatalf("asked %v: %v\n%s", asked, err, raw)
		}
		if !bytes.Contains(raw, []byte(`"delta":{},"logprobs":null,"finish_reason":"stop"`)) && !bytes.Contains(raw, []byte(`"delta":{},"finish_reason":"stop"`)) {
			t.Fatalf("asked %v: no finish chunk of its own\n%s", asked, raw)
		}
	}
}

// An upstream that stamps each chunk with its own time (llama.cpp, Ollama),
// or sends a usage chunk with "created":0 and no id or model, or a chunk
// without created: the client gets one created on every chunk, the
// stream's first, as OpenAI sends it (the SDKs keep the last chunk's);
// also where created comes after the model (the relay's cached head) and
// where the stream's first chunk has no id (the gateway gives it one).
func TestUpstreamCreatedKeptOnEveryChunk(t *testing.T) {
	t.Parallel()
	usage := `data: {"id":"","object":"chat.completion.chunk","created":0,"model":"","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}` + "\n\n"
	for name, stream := range map[string]string{
		"stamped": `data: {"id":"c1","object":"chat.completion.chunk","created":100,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","created":101,"model":"up-model","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"created":102,"id":"c1","model":"up-model","object":"chat.completion.chunk"}` + "\n\n" +
			usage + "data: [DONE]\n\n",
		"created after the model": `data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","created":100,"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","created":101,"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","created":102,"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","created":103,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
			usage + "data: [DONE]\n\n",
		"first chunk without an id": `data: {"object":"chat.completion.chunk","created":100,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}` + "\n\n" +
			`data: {"object":"chat.completion.chunk","created":100,"model":"up-model","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","created":101,"model":"up-model","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"c1","object":"chat.completion.chunk","created":101,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
			usage + "data: [DONE]\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := fixedUpstreamHarness(t, stream, `{}`)
			p := userMsg("hi")
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			acc, err := sdkStream(h, p)
			raw, _ := h.lastRaw()
			if err != nil || acc.Choices[0].Message.Content != "Hello!" || acc.Created != 100 || acc.Usage.TotalTokens != 8 {
				t.Fatalf("%v: created %d, %+v\n%s", err, acc.Created, acc.Choices, raw)
			}
			if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: true}); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
			n := 0
			for _, line := range bytes.Split(raw, []byte("\n")) {
				if c, ok := bytes.CutPrefix(line, []byte("data: {")); ok {
					n++
					if gjson.GetBytes(append([]byte("{"), c...), "created").Int() != 100 {
						t.Fatalf("a chunk with another created: %s\n%s", line, raw)
					}
				}
			}
			if n < 5 {
				t.Fatalf("%d chunks\n%s", n, raw)
			}
		})
	}
}

// An upstream that sends its usage chunk before its last content (the
// prompt's count first, or a usage chunk between a choice's content and
// its finish): relayed in place, the usage was not the last chunk, and the
// clients that keep the last chunk's usage (Python's and Node's helpers)
// ended with none. The usage chunk goes out last, after the content and
// the finish, once.
func TestUpstreamUsageBeforeContentGoesLast(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	ev := func(delta, finish string) string {
		return "data: " + head + delta + `,"finish_reason":` + finish + "}]}\n\n"
	}
	usage := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n"
	for name, stream := range map[string]string{
		"before the content": ev(`{"role":"assistant","content":""}`, `null`) + usage + ev(`{"content":"Hel"}`, `null`) +
			ev(`{"content":"lo"}`, `null`) + ev(`{}`, `"stop"`) + "data: [DONE]\n\n",
		"before the finish": ev(`{"role":"assistant","content":"Hel"}`, `null`) + ev(`{"content":"lo"}`, `null`) + usage +
			ev(`{}`, `"stop"`) + "data: [DONE]\n\n",
		"no finish": ev(`{"role":"assistant","content":"Hel"}`, `null`) + usage + ev(`{"content":"lo"}`, `null`) + "data: [DONE]\n\n",
		"before any choice": usage + ev(`{"role":"assistant","content":"Hel"}`, `null`) + ev(`{"content":"lo"}`, `null`) +
			ev(`{}`, `"stop"`) + "data: [DONE]\n\n",
		// The prompt's count first, the running total at the end: the
		// client gets the last total once (openai-go adds up every usage
		// chunk it gets: 5+7).
		"twice": strings.Replace(usage, `"completion_tokens":2,"total_tokens":7`, `"completion_tokens":0,"total_tokens":5`, 1) +
			ev(`{"role":"assistant","content":"Hel"}`, `null`) + ev(`{"content":"lo"}`, `null`) + ev(`{}`, `"stop"`) + usage + "data: [DONE]\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, asked := range []bool{true, false} {
				acc, raw, err := streamFrom(t, stream, asked)
				if err != nil || acc.Choices[0].Message.Content != "Hello" || (acc.Usage.TotalTokens == 7) != asked {
					t.Fatalf("asked %v: %v %+v usage %d\n%s", asked, err, acc.Choices, acc.Usage.TotalTokens, raw)
				}
				if _, err := wiretest.CheckStream(raw, wiretest.Options{WantUsage: asked}); err != nil {
					t.Fatalf("asked %v: %v\n%s", asked, err, raw)
				}
				// The last chunk before [DONE] is the usage chunk.
				events := bytes.Split(bytes.TrimSpace(raw), []byte("\n\n"))
				if len(events) < 2 {
					t.Fatalf("stream %s", raw)
				}
				last := gjson.GetBytes(bytes.TrimPrefix(events[len(events)-2], []byte("data: ")), "usage.total_tokens")
				if asked && last.Int() != 7 {
					t.Fatalf("the last chunk is not the usage chunk\n%s", raw)
				}
			}
		})
	}
}

// With usage asked for, OpenAI puts "usage": null on every chunk but the
// usage chunk; the finish chunks the relay makes (a choice the upstream
// never finished, finishes moved after the content) say it too, and a
// client that did not ask gets no usage member at all.
func TestUpstreamMadeFinishSaysUsageNull(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":7,"model":"up-model","choices":[`
	ev := func(choices string) string { return "data: " + head + choices + `],"usage":null}` + "\n\n" }
	usage := "data: " + head + `],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}` + "\n\n"
	for name, stream := range map[string]string{
		"never finished": ev(`{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{"content":"lo"},"finish_reason":null}`) + usage + "data: [DONE]\n\n",
		"finish beside content": ev(`{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}`) + usage + "data: [DONE]\n\n",
		"two choices, finishes back to back": ev(`{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{"content":"lo"},"finish_reason":null},{"index":1,"delta":{"content":"lo"},"finish_reason":null}`) +
			ev(`{"index":0,"delta":{},"finish_reason":"stop"}`) + ev(`{"index":1,"delta":{},"finish_reason":"stop"}`) + usage + "data: [DONE]\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, asked := range []bool{true, false} {
				acc, raw, err := streamFrom(t, stream, asked)
				if err != nil || acc.Choices[0].Message.Content != "Hello" || acc.Choices[0].FinishReason != "stop" {
					t.Fatalf("asked %v: %v %+v\n%s", asked, err, acc.Choices, raw)
				}
				for _, e := range bytes.Split(bytes.TrimSpace(raw), []byte("\n\n")) {
					data := bytes.TrimPrefix(e, []byte("data: "))
					if string(data) == "[DONE]" {
						continue
					}
					u := gjson.GetBytes(data, "usage")
					switch {
					case !asked && u.Exists():
						t.Fatalf("not asked: a chunk with usage: %s\n%s", data, raw)
					case asked && len(gjson.GetBytes(data, "choices").Array()) > 0 && u.Type != gjson.Null:
						t.Fatalf("asked: a chunk without \"usage\": null: %s\n%s", data, raw)
					case asked && !u.Exists():
						t.Fatalf("asked: a chunk without usage: %s\n%s", data, raw)
					}
				}
			}
		})
	}
}
