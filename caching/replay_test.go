package caching

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wiretest"
)

// checkCompletion validates a chat.completion against docs/wire.md rule 20
// and returns its content, finish_reason and tool calls ("id name args").
func checkCompletion(t *testing.T, body []byte) (content, finish string, calls []string, usage string) {
	t.Helper()
	if !gjson.ValidBytes(body) {
		t.Fatalf("not JSON: %s", body)
	}
	c := gjson.ParseBytes(body)
	for _, p := range []string{"id", "object", "created", "model", "choices", "choices.0.index", "choices.0.message",
		"choices.0.finish_reason", "choices.0.logprobs", "choices.0.message.role", "choices.0.message.content", "choices.0.message.refusal"} {
		if !c.Get(p).Exists() {
			t.Fatalf("completion lacks %s: %s", p, body)
		}
	}
	if c.Get("object").String() != "chat.completion" || c.Get("choices.0.message.role").String() != "assistant" {
		t.Fatalf("bad completion: %s", body)
	}
	for _, tc := range c.Get("choices.0.message.tool_calls").Array() {
		if tc.Get("type").String() != "function" {
			t.Fatalf("tool call type: %s", tc.Raw)
		}
		calls = append(calls, tc.Get("id").String()+" "+tc.Get("function.name").String()+" "+tc.Get("function.arguments").String())
	}
	if u := c.Get("usage"); u.Exists() {
		usage = u.Raw
	}
	return c.Get("choices.0.message.content").String(), c.Get("choices.0.finish_reason").String(), calls, usage
}

func TestCrossReplay(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("héllo wörld 😀 ", 20) + "end"
	tests := []struct {
		name          string
		content       string
		tools         []string
		fillStream    bool // the entry is produced by a stream request
		fillUsage     bool // ... that asked for usage
		readStream    bool
		readUsage     bool
		wantUsageKept bool
	}{
		{name: "json → json", content: "Hello there", wantUsageKept: true},
		{name: "json → stream with usage", content: long, readStream: true, readUsage: true, wantUsageKept: true},
		{name: "json → stream without usage", content: long, readStream: true},
		{name: "stream → json", content: long, fillStream: true, fillUsage: true, wantUsageKept: true},
		// (stream without usage → json is a miss: TestResponseCacheDecisions)
		{name: "stream without usage → stream without usage", content: "Hello there", fillStream: true, readStream: true},
		{name: "stream → stream", content: long, fillStream: true, fillUsage: true, readStream: true, readUsage: true, wantUsageKept: true},
		{name: "tool calls json → stream", tools: []string{`lookup_city:{"name":"Oslo"}`, `local_time:{"tz":"CET","note":"` + strings.Repeat("ü", 80) + `"}`}, readStream: true, readUsage: true, wantUsageKept: true},
		{name: "tool calls stream → json", tools: []string{`lookup_city:{"name":"Oslo"}`, `local_time:{"tz":"CET"}`}, fillStream: true, fillUsage: true, wantUsageKept: true},
		{name: "tool calls stream → stream", tools: []string{`lookup_city:{"name":"Oslo"}`}, fillStream: true, readStream: true},
		{name: "text and tool calls json → stream", content: "Let me look that up.", tools: []string{`lookup_city:{"name":"Oslo"}`}, readStream: true, readUsage: true, wantUsageKept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := &upstream{content: tt.content, tools: tt.tools}
			h, _ := newCache(up, newClock(), func(o *Options) { o.Config.ToolCalls = true })
			body := func(stream, usage bool) string {
				b := det
				if tt.tools != nil {
					b = detTools
				}
				if stream {
					b = strings.Replace(b, `"temperature":0`, `"temperature":0,"stream":true`, 1)
				}
				if usage {
					b = strings.Replace(b, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
				}
				return b
			}

			// Fill.
			fill := newReq(body(tt.fillStream, tt.fillUsage), "acme")
			resp, err := h.Chat(context.Background(), fill)
			if err != nil {
				t.Fatal(err)
			}
			var want checkedAnswer
			if tt.fillStream {
				chunks, err := drain(t, resp.Stream)
				if err != nil {
					t.Fatal(err)
				}
				want = checkStream(t, chunks, tt.fillUsage)
			} else {
				want.Content, want.Finish, want.Calls, want.Usage = checkCompletion(t, resp.Body)
			}
			if fill.Meta.Get(HeaderCache) != "miss" {
				t.Fatalf("fill: %q", fill.Meta.Get(HeaderCache))
			}

			// Read back from the cache.
			read := newReq(body(tt.readStream, tt.readUsage), "acme")
			resp, err = h.Chat(context.Background(), read)
			if err != nil {
				t.Fatal(err)
			}
			if read.Meta.Get(HeaderCache) != "hit" || up.calls.Load() != 1 {
				t.Fatalf("read: header %q, upstream calls %d", read.Meta.Get(HeaderCache), up.calls.Load())
			}
			var got checkedAnswer
			if tt.readStream {
				if resp.Body != nil {
					t.Fatal("stream request answered with a body")
				}
				chunks, err := drain(t, resp.Stream)
				if err != nil {
					t.Fatal(err)
				}
				got = checkStream(t, chunks, tt.readUsage)
				sum := wiretest.CheckStreamAll(t, sseBytes(chunks), wiretest.Options{WantUsage: tt.readUsage}, chatSchema(t))
				if sum.Content != got.Content || sum.FinishReason != got.Finish || len(sum.ToolCalls) != len(got.Calls) {
					t.Errorf("wiretest summary %+v disagrees with %+v", sum, got)
				}
				if got.Model != "demo" {
					t.Errorf("model %q", got.Model)
				}
				for _, c := range chunks {
					if d := gjson.Get(c, "choices.0.delta.content").String(); len(d) > replayPiece || !utf8.ValidString(d) {
						t.Errorf("content fragment %q: too long or split inside a rune", d)
					}
				}
			} else {
				if resp.Stream != nil {
					t.Fatal("JSON request answered with a stream")
				}
				got.Content, got.Finish, got.Calls, got.Usage = checkCompletion(t, resp.Body)
				if schema := chatSchema(t); schema != nil {
					if err := schema.Completion(resp.Body); err != nil {
						t.Errorf("replayed completion does not match the schema: %v\n%s", err, resp.Body)
					}
				}
			}
			if got.Content != want.Content || got.Finish != want.Finish || strings.Join(got.Calls, "|") != strings.Join(want.Calls, "|") {
				t.Errorf("replayed answer differs:\n got %+v\nwant %+v", got, want)
			}
			if tt.wantUsageKept && gjson.Get(got.Usage, "total_tokens").Int() != 15 {
				t.Errorf("usage %q, want the stored usage unchanged", got.Usage)
			}
		})
	}
}

// sseBytes frames chunks as the SSE body a client receives.
func sseBytes(chunks []string) []byte {
	var b []byte
	for _, c := range chunks {
		if strings.HasPrefix(c, ":") {
			b = append(b, c...)
		} else {
			b = append(append(b, "data: "...), c...)
		}
		b = append(b, "\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// chatSchema returns the normalized OpenAPI chat schemas (embedded in
// wiretest, or the file GATEWAY_OPENAPI_SCHEMAS names).
func chatSchema(t *testing.T) *wiretest.Schema { return wiretest.LoadSchema(t) }

func TestSplitRunes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		max  int
	}{
		{name: "empty", in: "", max: 4},
		{name: "ascii", in: "abcdefghij", max: 3},
		{name: "multibyte", in: "ééééé😀😀ü", max: 5},
		{name: "max below a rune", in: "😀😀", max: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parts := splitRunes(tt.in, tt.max)
			if strings.Join(parts, "") != tt.in {
				t.Fatalf("pieces %q do not rebuild %q", parts, tt.in)
			}
			for _, p := range parts {
				if p == "" || !utf8.ValidString(p) {
					t.Errorf("bad piece %q", p)
				}
			}
		})
	}
}

// FuzzRecorder feeds arbitrary chunks to the stream recorder: it must never
// panic, and what it assembles must be a valid completion.
func FuzzRecorder(f *testing.F) {
	for _, c := range (&upstream{content: "a b"}).chunks("stop", true) {
		f.Add([]byte(c), []byte(`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}`))
	}
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{\""}}]}}]}`),
		[]byte(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var r recorder
		r.add(a)
		r.add(b)
		if c := r.completion(); c != nil {
			if !gjson.ValidBytes(c) {
				t.Fatalf("assembled %q", c)
			}
			if storable(c, true) {
				s := newReplayStream(c, "id", 1, "m", true, nil)
				chunks, err := drain(t, s)
				if err != nil {
					t.Fatal(err)
				}
				_ = checkStream(t, chunks, true)
			}
		}
	})
}

var _ pipeline.Stream = (*replayStream)(nil)

// A hit shows the reasoning and the service_tier of the answer it replays,
// in either form, whichever form filled the entry: the live answer had
// them, and a replay differs from it only in id and created.
func TestReplayKeepsReasoningAndServiceTier(t *testing.T) {
	t.Parallel()
	// citations: a provider's own top-level member (Perplexity's, on every
	// chunk), which a hit carries in either form as the live answer did.
	const head = `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1767225600,"model":"up-model","service_tier":"flex","citations":["u"],"choices":[{"index":0,"delta":`
	chunks := []string{
		head + `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		head + `{"reasoning_content":"Think "},"logprobs":null,"finish_reason":null}]}`,
		head + `{"reasoning_content":"first."},"logprobs":null,"finish_reason":null}]}`,
		head + `{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`,
		head + `{},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1767225600,"model":"up-model","service_tier":"flex","choices":[],"usage":` + upstreamUsage + `}`,
	}
	body := `{"id":"chatcmpl-up","object":"chat.completion","created":1767225600,"model":"up-model","service_tier":"flex","citations":["u"],"choices":[{"index":0,"message":{"role":"assistant","content":"Hello","refusal":null,"reasoning_content":"Think first."},"logprobs":null,"finish_reason":"stop"}],"usage":` + upstreamUsage + `}`
	up := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if r.Stream {
			return &pipeline.Response{Stream: sliceStream(chunks)}, nil
		}
		return &pipeline.Response{Body: []byte(body)}, nil
	})
	crossHits(t, up, func(fillStream, readStream bool, r *pipeline.Request, body []byte, chunks []string) {
		var reasoning, tier, citations string
		if readStream {
			for _, c := range chunks {
				citations += gjson.Get(c, "citations").Raw
				reasoning += gjson.Get(c, "choices.0.delta.reasoning_content").String()
				if tier = gjson.Get(c, "service_tier").String(); tier != "flex" {
					t.Errorf("fill stream %v: chunk without the service_tier: %s", fillStream, c)
				}
			}
		} else {
			reasoning = gjson.GetBytes(body, "choices.0.message.reasoning_content").String()
			tier = gjson.GetBytes(body, "service_tier").String()
			citations = gjson.GetBytes(body, "citations").Raw
		}
		if r.Meta.Get(HeaderCache) != "hit" || reasoning != "Think first." || tier != "flex" || citations != `["u"]` {
			t.Errorf("fill stream %v, read stream %v: %q, reasoning %q, service_tier %q, citations %s", fillStream, readStream, r.Meta.Get(HeaderCache), reasoning, tier, citations)
		}
	})
}

// An answer carrying a message member a replay would lose (a search model's
// annotations, a provider's own reasoning_details) is never stored, from a
// JSON answer or a stream: a hit in the other form would show it without
// them. Null members and empty arrays (OpenAI's "annotations": []) are
// stored as the answer without them is.
func TestAnswersWithOtherMembersAreNotStored(t *testing.T) {
	t.Parallel()
	const head = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"See example.com."`
	const chunkHead = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	for _, tc := range []struct {
		member string
		stored bool
	}{
		{`"annotations":[{"type":"url_citation","url_citation":{"start_index":4,"end_index":15,"url":"https://example.com","title":"E"}}]`, false},
		{`"reasoning_details":[{"type":"reasoning.text","text":"r"}]`, false},
		{`"annotations":[]`, true},
		{`"audio":null`, true},
		{`"token_id":2`, true}, // Together's, on every delta: no message member
		{`"extra":{}`, true},
		{`"flag":false`, true},
	} {
		if got := storable([]byte(head+`,`+tc.member+`},"finish_reason":"stop"}]}`), true); got != tc.stored {
			t.Errorf("JSON answer with %s: storable %v", tc.member, got)
		}
		var r recorder
		r.add([]byte(chunkHead + `{"role":"assistant","content":"See example.com."},"finish_reason":null}]}`))
		r.add([]byte(chunkHead + `{` + tc.member + `},"finish_reason":null}]}`))
		r.add([]byte(chunkHead + `{},"finish_reason":"stop"}]}`))
		if got := r.completion() != nil; got != tc.stored {
			t.Errorf("stream with %s: recorded %v", tc.member, got)
		}
	}
}

// An answer whose message says "tool_calls": null (SGLang, LiteLLM) is a
// text answer: stored, from JSON or a stream, and replayed without a call.
func TestNullToolCallsAreCached(t *testing.T) {
	t.Parallel()
	body := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":null},"finish_reason":"stop"}]}`
	if !storable([]byte(body), true) {
		t.Fatal("a text answer with tool_calls null is not stored")
	}
	if storable([]byte(strings.Replace(body, `"tool_calls":null`, `"tool_calls":{}`, 1)), true) {
		t.Fatal("a text answer with tool_calls an object is stored")
	}
	const head = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	var r recorder
	r.add([]byte(head + `{"role":"assistant","content":"hi","tool_calls":null},"finish_reason":null}]}`))
	r.add([]byte(head + `{"tool_calls":null},"finish_reason":"stop"}]}`))
	c := r.completion()
	if c == nil || !storable(c, true) {
		t.Fatalf("a streamed text answer with tool_calls null is not stored: %s", c)
	}
	chunks, err := drain(t, newReplayStream([]byte(body), "id", 1, "m", false, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chunks {
		if gjson.Get(ch, "choices.0.delta.tool_calls").Exists() {
			t.Fatalf("the replay has a call: %s", ch)
		}
	}
}

// A hit shows the refusal of the answer it replays, in either form,
// whichever form filled the entry: a stream replay left it out, and a
// streamed answer with one was never stored.
func TestReplayKeepsRefusal(t *testing.T) {
	t.Parallel()
	const head = `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1767225600,"model":"up-model","choices":[{"index":0,"delta":`
	chunks := []string{
		head + `{"role":"assistant","content":"Let me see. "},"logprobs":null,"finish_reason":null}]}`,
		head + `{"refusal":"I can't "},"logprobs":null,"finish_reason":null}]}`,
		head + `{"refusal":"help with that."},"logprobs":null,"finish_reason":null}]}`,
		head + `{},"logprobs":null,"finish_reason":"stop"}]}`,
		`{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1767225600,"model":"up-model","choices":[],"usage":` + upstreamUsage + `}`,
	}
	body := `{"id":"chatcmpl-up","object":"chat.completion","created":1767225600,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"Let me see. ","refusal":"I can't help with that."},"logprobs":null,"finish_reason":"stop"}],"usage":` + upstreamUsage + `}`
	up := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if r.Stream {
			return &pipeline.Response{Stream: sliceStream(chunks)}, nil
		}
		return &pipeline.Response{Body: []byte(body)}, nil
	})
	crossHits(t, up, func(fillStream, readStream bool, r *pipeline.Request, body []byte, chunks []string) {
		if r.Meta.Get(HeaderCache) != "hit" {
			t.Fatalf("fill stream %v, read stream %v: not a hit", fillStream, readStream)
		}
		var content, refusal string
		if readStream {
			for _, c := range chunks {
				content += gjson.Get(c, "choices.0.delta.content").String()
				refusal += gjson.Get(c, "choices.0.delta.refusal").String()
			}
		} else {
			content = gjson.GetBytes(body, "choices.0.message.content").String()
			refusal = gjson.GetBytes(body, "choices.0.message.refusal").String()
		}
		if content != "Let me see. " || refusal != "I can't help with that." {
			t.Errorf("fill stream %v, read stream %v: content %q refusal %q", fillStream, readStream, content, refusal)
		}
	})
}

// crossHits fills an entry from up, by a stream and by JSON (a cache of
// its own each), and reads it in both forms; hit is given each read's
// request and answer (a stream's chunks drained into chunks).
func crossHits(t *testing.T, up pipeline.Handler, hit func(fillStream, readStream bool, r *pipeline.Request, body []byte, chunks []string)) {
	t.Helper()
	streamBody := strings.Replace(det, `"temperature":0`, `"temperature":0,"stream":true,"stream_options":{"include_usage":true}`, 1)
	for _, fillStream := range []bool{true, false} {
		h, _ := newCache(up, newClock(), nil)
		fill := det
		if fillStream {
			fill = streamBody
		}
		resp, err := h.Chat(context.Background(), newReq(fill, "acme"))
		if err != nil {
			t.Fatal(err)
		}
		if fillStream {
			if _, err := drain(t, resp.Stream); err != nil {
				t.Fatal(err)
			}
		}
		for _, readStream := range []bool{true, false} {
			read := det
			if readStream {
				read = streamBody
			}
			r := newReq(read, "acme")
			resp, err := h.Chat(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			var chunks []string
			if readStream {
				if chunks, err = drain(t, resp.Stream); err != nil {
					t.Fatal(err)
				}
			}
			hit(fillStream, readStream, r, resp.Body, chunks)
		}
	}
}

// A long cached answer replays in at most maxReplayPieces pieces a text,
// so the replay, built whole before its first byte, holds about twice the
// answer: at 64 bytes a piece it held about 12 times (a resource probe:
// twenty slow readers of one 3 MB answer took 700 MB). Its text arrives
// whole, on rune boundaries.
func TestLongReplayIsSmall(t *testing.T) {
	text := strings.Repeat("ünïcødé text ", 250000) // 3.5 MB
	answer, _ := sjson.SetBytes([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`),
		"choices.0.message.content", text)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	s := newReplayStream(answer, "chatcmpl-r", 2, "m", true, nil)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	// What the replay holds while its client reads (the answer itself was
	// already held).
	if d := int64(m1.HeapAlloc) - int64(m0.HeapAlloc); d > int64(5*len(answer)/2) {
		t.Errorf("the replay of a %d-byte answer holds %d bytes", len(answer), d)
	}
	var got strings.Builder
	n := 0
	for {
		c, err := s.Next()
		if err != nil {
			break
		}
		n++
		d := gjson.GetBytes(bytes.TrimSuffix(bytes.TrimPrefix(c, []byte("data: ")), []byte("\n\n")), "choices.0.delta.content").String()
		if !utf8.ValidString(d) {
			t.Fatal("a piece split inside a character")
		}
		got.WriteString(d)
	}
	if got.String() != text || n > maxReplayPieces+8 {
		t.Fatalf("%d chunks, text intact %v", n, got.String() == text)
	}
	runtime.KeepAlive(answer) // held by the cache: not freed under the measure
}
