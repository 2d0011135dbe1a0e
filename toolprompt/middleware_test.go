package toolprompt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/internal/teststream"
	"github.com/llmgw/gateway/pipeline"
)

const toolsBody = `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}]`

// The JSON answer of a prompted model carries the reasoning and refusal
// its stream forwards, from every attempt: a malformed block re-asks, and
// both attempts' side texts are shown either way.
func TestSideTextsSameBothWays(t *testing.T) {
	t.Parallel()
	replies := []struct{ content, reasoning, refusal string }{
		{"```tool_calls\n{oops}\n```", "first ", "No. "},
		{"Fine.", "second", "Still no."},
	}
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	n := 0
	next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		rp := replies[min(n, len(replies)-1)]
		n++
		if r.Stream {
			return &pipeline.Response{Stream: teststream.Chunks(
				head+`{"role":"assistant","reasoning_content":`+q(rp.reasoning)+`},"finish_reason":null}]}`,
				head+`{"refusal":`+q(rp.refusal)+`},"finish_reason":null}]}`,
				head+`{"content":`+q(rp.content)+`},"finish_reason":null}]}`,
				head+`{},"finish_reason":"stop"}]}`,
			)}, nil
		}
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
			q(rp.content) + `,"refusal":` + q(rp.refusal) + `,"reasoning_content":` + q(rp.reasoning) + `},"logprobs":null,"finish_reason":"stop"}]}`)}, nil
	})
	h := New(Options{MaxErrors: 2})(next)

	n = 0
	resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `}`)})
	if err != nil {
		t.Fatal(err)
	}
	msg := gjson.GetBytes(resp.Body, "choices.0.message")

	n = 0
	resp, err = h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"stream":true}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	var reasoning, refusal, content string
	for _, c := range drainChunks(t, resp.Stream) {
		d := gjson.GetBytes(c, "choices.0.delta")
		reasoning += d.Get("reasoning_content").Str
		refusal += d.Get("refusal").Str
		content += d.Get("content").Str
	}
	if reasoning != "first second" || refusal != "No. Still no." || content != "Fine." {
		t.Fatalf("stream: reasoning %q refusal %q content %q", reasoning, refusal, content)
	}
	if msg.Get("reasoning_content").Str != reasoning || msg.Get("refusal").Str != refusal || msg.Get("content").Str != content {
		t.Fatalf("JSON message %s, stream reasoning %q refusal %q content %q", msg.Raw, reasoning, refusal, content)
	}
}

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

// drainChunks reads s to its end and returns its chunks (copied).
func drainChunks(t *testing.T, s pipeline.Stream) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		c, err := s.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]byte(nil), c...))
	}
}

// An upstream that sends its running usage totals on every chunk is
// counted once per attempt, as its JSON answer is: the stream's usage is
// the JSON answer's, summed over the attempts.
func TestRunningUsageCountedOnce(t *testing.T) {
	t.Parallel()
	const usage = `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`
	replies := []string{"```tool_calls\n{oops}\n```", "Fine."}
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	n := 0
	next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		content := replies[min(n, len(replies)-1)]
		n++
		if r.Stream {
			return &pipeline.Response{Stream: teststream.Chunks(
				head+`{"role":"assistant","content":""},"finish_reason":null}],"usage":`+usage+`}`,
				head+`{"content":`+q(content)+`},"finish_reason":null}],"usage":`+usage+`}`,
				head+`{},"finish_reason":"stop"}],"usage":`+usage+`}`,
			)}, nil
		}
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
			q(content) + `},"logprobs":null,"finish_reason":"stop"}],"usage":` + usage + `}`)}, nil
	})
	h := New(Options{MaxErrors: 2})(next)

	n = 0
	resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := gjson.GetBytes(resp.Body, "usage.total_tokens").Int()

	n = 0
	resp, err = h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"stream":true,"stream_options":{"include_usage":true}}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	for _, c := range drainChunks(t, resp.Stream) {
		got += gjson.GetBytes(c, "usage.total_tokens").Int()
	}
	if want != 30 || got != want {
		t.Fatalf("total_tokens: JSON %d, stream %d, want 30", want, got)
	}
}

// The upstream's service_tier (the tier that served the request, which a
// client may be billed by) reaches the client in both forms of a prompted
// answer, as it does on a native one.
func TestServiceTierKept(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","service_tier":"flex","choices":[{"index":0,"delta":`
	next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if r.Stream {
			return &pipeline.Response{Stream: teststream.Chunks(
				head+`{"role":"assistant","content":"Fine."},"finish_reason":null}]}`,
				head+`{},"finish_reason":"stop"}]}`,
			)}, nil
		}
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","service_tier":"flex","choices":[{"index":0,"message":{"role":"assistant","content":"Fine."},"logprobs":null,"finish_reason":"stop"}]}`)}, nil
	})
	h := New(Options{MaxErrors: 2})(next)

	resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(resp.Body, "service_tier").Str; got != "flex" {
		t.Fatalf("JSON answer's service_tier %q, want flex: %s", got, resp.Body)
	}
	resp, err = h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"stream":true}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for {
		c, err := resp.Stream.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks++
		if got := gjson.GetBytes(c, "service_tier").Str; got != "flex" {
			t.Fatalf("chunk's service_tier %q, want flex: %s", got, c)
		}
	}
	if chunks == 0 {
		t.Fatal("no chunks")
	}
}

// Tools with n > 1 are refused: the calls are read from one reply, and
// the other choices would be billed upstream and dropped (they were,
// silently). Without tools, n passes as it is.
func TestSeveralChoicesWithToolsRefused(t *testing.T) {
	t.Parallel()
	calls := 0
	next := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		calls++
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"b"},"finish_reason":"stop"}]}`)}, nil
	})
	h := New(Options{MaxErrors: 2})(next)
	for _, stream := range []bool{false, true} {
		body := toolsBody + `,"n":2}`
		if stream {
			body = toolsBody + `,"n":2,"stream":true}`
		}
		_, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(body), Stream: stream})
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "n" {
			t.Fatalf("stream %v: %v, want a 400 on n", stream, err)
		}
	}
	if calls != 0 {
		t.Fatalf("the upstream was called %d times", calls)
	}
	resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(`{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil || gjson.GetBytes(resp.Body, "choices.#").Int() != 2 {
		t.Fatalf("without tools: %v %s", err, resp.Body)
	}
}

// Under tool_choice "none" the model is shown no tools and never asked
// again, and the upstream request carries neither tools nor a response
// format. A client's own "none" gets the reply as text, a block in it
// included, as a native model's under "none" is text. In the tool loop's
// forced final round (FinalRound) a well-formed block arrives as calls
// (the loop drops them and ends with "length"); a malformed one, or one
// naming no offered tool, is the answer's text.
func TestChoiceNoneReadsWithoutReasking(t *testing.T) {
	t.Parallel()
	for _, final := range []bool{false, true} {
		for _, schemaFormat := range []bool{false, true} {
			for _, tc := range []struct {
				reply string
				calls int
			}{
				{"Done.\n```tool_calls\n{oops}\n```", 0},
				{"Done.\n```tool_calls\n{\"name\":\"lookup\",\"arguments\":{}}\n```", 1},
				{"Done.\n```tool_calls\n{\"name\":\"elsewhere\",\"arguments\":{}}\n```", 0},
			} {
				reply := tc.reply
				if schemaFormat {
					reply = `{"thought":"t","calls":[{"name":"lookup","arguments":{}}]}`
					if tc.calls == 0 {
						reply = `{"thought":"t","calls":[{"name":"elsewhere","arguments":{}}]}`
					}
				}
				want := tc.calls
				if !final {
					want = 0
				}
				var ups []*pipeline.Request
				next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
					ups = append(ups, r)
					return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
						q(reply) + `},"logprobs":null,"finish_reason":"stop"}]}`)}, nil
				})
				format := ""
				if schemaFormat {
					format = "json_schema"
				}
				h := New(Options{MaxErrors: 2, Format: format})(next)
				resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"tool_choice":"none"}`), FinalRound: final})
				if err != nil {
					t.Fatal(err)
				}
				if len(ups) != 1 {
					t.Fatalf("final %v schema %v reply %q: %d upstream calls, want 1 (no re-ask)", final, schemaFormat, reply, len(ups))
				}
				up := gjson.GetManyBytes(ups[0].Body, "tools", "tool_choice", "response_format", "messages.0.role")
				if up[0].Exists() || up[1].Exists() || up[2].Exists() || up[3].Str == "system" {
					t.Fatalf("final %v schema %v: upstream body %s", final, schemaFormat, ups[0].Body)
				}
				msg := gjson.GetBytes(resp.Body, "choices.0")
				if n := len(msg.Get("message.tool_calls").Array()); n != want {
					t.Fatalf("final %v schema %v reply %q: %d calls, want %d: %s", final, schemaFormat, reply, n, want, resp.Body)
				}
				if want == 0 && msg.Get("message.content").Str != reply {
					t.Fatalf("final %v schema %v reply %q: content %q, want the reply as text", final, schemaFormat, reply, msg.Get("message.content").Str)
				}
				if w := map[bool]string{true: "tool_calls", false: "stop"}[want > 0]; msg.Get("finish_reason").Str != w {
					t.Fatalf("final %v schema %v reply %q: finish %s, want %s", final, schemaFormat, reply, msg.Get("finish_reason").Str, w)
				}
			}
		}
	}
}

// A json_schema-format model that declines answers with a refusal and no
// content: that is the answer, in one upstream call, JSON and stream alike,
// not a malformed reply asked again (each attempt's refusal would be shown).
// An empty reply without a refusal is malformed: asked again.
func TestStructuredRefusalIsTheAnswer(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	for _, c := range []struct {
		stream  bool
		refusal string
		calls   int
	}{{false, "I can't help with that.", 1}, {true, "I can't help with that.", 1}, {false, "", 3}, {true, "", 3}} {
		stream, refusal := c.stream, c.refusal
		calls := 0
		next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			calls++
			if r.Stream {
				return &pipeline.Response{Stream: teststream.Chunks(
					head+`{"role":"assistant","content":null,"refusal":""},"finish_reason":null}]}`,
					head+`{"refusal":`+q(refusal)+`},"finish_reason":null}]}`,
					head+`{},"finish_reason":"stop"}]}`,
				)}, nil
			}
			return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":` +
				q(refusal) + `},"logprobs":null,"finish_reason":"stop"}]}`)}, nil
		})
		h := New(Options{MaxErrors: 2, Format: "json_schema"})(next)
		body := toolsBody + `}`
		if stream {
			body = toolsBody + `,"stream":true}`
		}
		resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(body), Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		got := gjson.GetBytes(resp.Body, "choices.0.message.refusal").Str
		if stream {
			got = ""
			for _, c := range drainChunks(t, resp.Stream) {
				got += gjson.GetBytes(c, "choices.0.delta.refusal").Str
			}
		}
		if calls != c.calls || c.calls == 1 && got != refusal {
			t.Errorf("stream %v, refusal %q: %d upstream calls, refusal %q", stream, refusal, calls, got)
		}
	}
}

// A model that calls natively after all answers as it wrote, in both
// forms: the stream shows the text its scanner held back (a block, a
// fence's start) as the JSON answer's content carries it.
func TestNativeCallsKeepTheTextBothWays(t *testing.T) {
	t.Parallel()
	const text = "Let me check.\n```tool_calls\n[{\"name\":\"lookup\",\"arguments\":{}}]\n```\nEnds with ```tool_ca"
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	call := `{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{}"}}`
	next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if r.Stream {
			return &pipeline.Response{Stream: teststream.Chunks(
				head+`{"role":"assistant","content":`+q(text[:20])+`},"finish_reason":null}]}`,
				head+`{"content":`+q(text[20:])+`},"finish_reason":null}]}`,
				head+`{"tool_calls":[`+call+`]},"finish_reason":null}]}`,
				head+`{},"finish_reason":"tool_calls"}]}`,
			)}, nil
		}
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
			q(text) + `,"tool_calls":[` + call + `]},"logprobs":null,"finish_reason":"tool_calls"}]}`)}, nil
	})
	h := New(Options{MaxErrors: 2})(next)
	resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `}`)})
	if err != nil {
		t.Fatal(err)
	}
	jsonContent := gjson.GetBytes(resp.Body, "choices.0.message.content").Str
	resp, err = h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"stream":true}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	var content string
	for _, c := range drainChunks(t, resp.Stream) {
		content += gjson.GetBytes(c, "choices.0.delta.content").Str
	}
	if content != jsonContent || content != text {
		t.Fatalf("stream %q, JSON %q", content, jsonContent)
	}
}

// With prompted_format json_schema the tool protocol is a response format
// of the gateway's: a client's own structured output is what its "answer"
// holds, so the client gets its JSON, never free text in its place.
func TestSchemaFormatKeepsClientResponseFormat(t *testing.T) {
	t.Parallel()
	var sent []byte
	next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		sent = r.Body
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
			q(`{"thought":"t","answer":{"x":7}}`) + `},"logprobs":null,"finish_reason":"stop"}]}`)}, nil
	})
	h := New(Options{Format: "json_schema", MaxErrors: 2})(next)
	resp, err := h.Chat(context.Background(), &pipeline.Request{Meta: &pipeline.Meta{}, Body: []byte(toolsBody +
		`,"response_format":{"type":"json_schema","json_schema":{"name":"client","schema":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(sent, "response_format.json_schema.schema.properties.answer").Raw; got != `{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}` {
		t.Fatalf("the protocol's answer schema %s", got)
	}
	if c := gjson.GetBytes(resp.Body, "choices.0.message.content").Str; c != `{"x":7}` {
		t.Fatalf("content %q", c)
	}
}

// allowed_tools narrows the tools the model is shown and may call, as on a
// native model: a call of another is asked again like an unknown tool's;
// parallel_tool_calls false asks for one call and keeps the first.
func TestAllowedToolsAndSingleCall(t *testing.T) {
	t.Parallel()
	const body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[` +
		`{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}},` +
		`{"type":"function","function":{"name":"write_file","parameters":{"type":"object"}}}]`
	reply := func(content string) *pipeline.Response {
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
			q(content) + `},"logprobs":null,"finish_reason":"stop"}]}`)}
	}
	var prompts []string
	replies := []string{
		"```tool_calls\n[{\"name\":\"lookup\",\"arguments\":{}}]\n```",
		"```tool_calls\n[{\"name\":\"write_file\",\"arguments\":{}}]\n```",
	}
	next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		prompts = append(prompts, gjson.GetBytes(r.Body, "messages.0.content").Str)
		return reply(replies[min(len(prompts)-1, len(replies)-1)]), nil
	})
	h := New(Options{MaxErrors: 2})(next)
	resp, err := h.Chat(context.Background(), &pipeline.Request{Meta: &pipeline.Meta{}, Body: []byte(body +
		`,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"write_file"}}]}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(prompts[0], `"lookup"`) || !strings.Contains(prompts[0], `"write_file"`) {
		t.Fatalf("the prompt shows tools outside allowed_tools:\n%s", prompts[0])
	}
	if len(prompts) != 2 || gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.#.function.name").Raw != `["write_file"]` {
		t.Fatalf("%d model calls, answer %s", len(prompts), resp.Body)
	}

	// An allowed list that names none of the tools is the client's mistake.
	_, err = h.Chat(context.Background(), &pipeline.Request{Meta: &pipeline.Meta{}, Body: []byte(body +
		`,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"nope"}}]}}}`)})
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Param != "tool_choice" {
		t.Fatalf("allowed_tools naming no tool: %v", err)
	}

	two := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return reply("```tool_calls\n[{\"name\":\"lookup\",\"arguments\":{}},{\"name\":\"write_file\",\"arguments\":{}}]\n```"), nil
	})
	resp, err = New(Options{MaxErrors: 2})(two).Chat(context.Background(), &pipeline.Request{Meta: &pipeline.Meta{}, Body: []byte(body + `,"parallel_tool_calls":false}`)})
	if err != nil || gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.#").Int() != 1 {
		t.Fatalf("parallel_tool_calls false: %v %s", err, resp.Body)
	}
	// A named tool_choice keeps the calls of that tool only, as a native
	// model under it calls no other (a probe saw the others handed out).
	resp, err = New(Options{MaxErrors: 2})(two).Chat(context.Background(), &pipeline.Request{Meta: &pipeline.Meta{}, Body: []byte(body +
		`,"tool_choice":{"type":"function","function":{"name":"write_file"}}}`)})
	if err != nil || gjson.GetBytes(resp.Body, "choices.0.message.tool_calls.#.function.name").Raw != `["write_file"]` {
		t.Fatalf("named tool_choice: %v %s", err, resp.Body)
	}
}

// A native call after a re-ask: the JSON answer carries what the stream
// showed, the re-asked attempt's text first, and the usage of both,
// every count summed.
func TestNativeCallAfterReaskSameBothWays(t *testing.T) {
	t.Parallel()
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	call := `{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{}"}}`
	bad := "Let me check.\n```tool_calls\nnot json\n```"
	// The reply's annotations point into its own text ("Second."), not
	// the answer's, which starts with the earlier attempt's: left out.
	note := `[{"type":"url_citation","url_citation":{"start_index":0,"end_index":6,"title":"T","url":"https://e.example"}}]`
	n := 0
	next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		n++
		first := n%2 == 1
		if r.Stream {
			if first {
				return &pipeline.Response{Stream: teststream.Chunks(
					head+`{"role":"assistant","content":`+q(bad)+`},"finish_reason":null}]}`,
					head+`{},"finish_reason":"stop"}]}`,
					`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":7,"cache_write_tokens":3}}}`,
				)}, nil
			}
			return &pipeline.Response{Stream: teststream.Chunks(
				head+`{"role":"assistant","content":"Second."},"finish_reason":null}]}`,
				head+`{"annotations":`+note+`},"finish_reason":null}]}`,
				head+`{"tool_calls":[`+call+`]},"finish_reason":null}]}`,
				head+`{},"finish_reason":"tool_calls"}]}`,
				`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":6,"total_tokens":26,"prompt_tokens_details":{"cached_tokens":4}}}`,
			)}, nil
		}
		if first {
			return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` + q(bad) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":7,"cache_write_tokens":3}}}`)}, nil
		}
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Second.","annotations":` + note + `,"tool_calls":[` + call + `]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":6,"total_tokens":26,"prompt_tokens_details":{"cached_tokens":4}}}`)}, nil
	})
	h := New(Options{MaxErrors: 2})(next)
	resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `}`)})
	if err != nil {
		t.Fatal(err)
	}
	jc := gjson.GetBytes(resp.Body, "choices.0.message.content").Str
	ju := gjson.GetBytes(resp.Body, "usage.total_tokens").Int()
	jd := gjson.GetBytes(resp.Body, "usage.prompt_tokens_details").Raw
	resp0 := resp.Body
	n = 0
	resp, err = h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"stream":true,"stream_options":{"include_usage":true}}`), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	var sc string
	var su int64
	var sd string
	if bytes.Contains(resp0, []byte("url_citation")) {
		t.Fatalf("JSON answer kept the reply's annotations: %s", resp0)
	}
	for _, c := range drainChunks(t, resp.Stream) {
		if bytes.Contains(c, []byte("url_citation")) {
			t.Fatalf("the stream kept the reply's annotations: %s", c)
		}
		sc += gjson.GetBytes(c, "choices.0.delta.content").Str
		if u := gjson.GetBytes(c, "usage.total_tokens"); u.Exists() {
			su = u.Int()
			sd = gjson.GetBytes(c, "usage.prompt_tokens_details").Raw
		}
	}
	if jc != sc || ju != su || jc != "Let me check.\nSecond." || ju != 41 {
		t.Fatalf("JSON content %q usage %d; stream content %q usage %d", jc, ju, sc, su)
	}
	// The cache counts are summed as the prompt's are (a probe saw those
	// of one attempt only).
	if want := `{"cached_tokens":11,"cache_write_tokens":3}`; jd != want || sd != want {
		t.Fatalf("prompt_tokens_details: JSON %s, stream %s; want %s", jd, sd, want)
	}
}

// A client schema's definitions go to the protocol schema's root, where its
// local $refs ("#/$defs/X") look for them; a schema that refers to its own
// root is asked for as any object.
func TestProtocolFormatKeepsDefinitions(t *testing.T) {
	t.Parallel()
	rf := gjson.Parse(`{"type":"json_schema","json_schema":{"name":"c","schema":{"type":"object","properties":{"p":{"$ref":"#/$defs/P"},"q":{"$ref":"#/definitions/Q"}},"$defs":{"P":{"type":"integer"}},"definitions":{"Q":{"type":"string"}}}}}`)
	out := protocolFormat(rf)
	if gjson.GetBytes(out, `json_schema.schema.\$defs.P.type`).Str != "integer" || gjson.GetBytes(out, "json_schema.schema.definitions.Q.type").Str != "string" ||
		gjson.GetBytes(out, "json_schema.schema.properties.answer.properties.p.\\$ref").Str != "#/$defs/P" {
		t.Fatalf("%s", out)
	}
	self := protocolFormat(gjson.Parse(`{"type":"json_schema","json_schema":{"name":"c","schema":{"type":"object","properties":{"next":{"$ref":"#"}}}}}`))
	if a := gjson.GetBytes(self, "json_schema.schema.properties.answer").Raw; a != `{"type":"object"}` {
		t.Fatalf("self-referring schema: answer %s", a)
	}
}

// A reply that asks for nothing more than its text: an empty block ([]),
// and a block the upstream cut at its token limit (finish_reason
// "length"). Neither is asked again (a probe saw a cut reply asked three
// times, each cut again, and then its fragment shown); the answer is the
// text before the block, the block's bytes never shown, JSON and stream
// alike, with the upstream's finish.
func TestNoReaskForEmptyOrCutBlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reply, finish string
	}{
		{"empty list", "Done.\n```tool_calls\n[]\n```", "stop"},
		{"cut at the limit", "Going.\n```tool_calls\n[{\"name\":\"lookup\",\"argu", "length"},
		{"cut by a filter", "Going.\n```tool_calls\n[{\"name\":\"lookup\",\"argu", "content_filter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			h := New(Options{MaxErrors: 3})(replyUpstream(tc.reply, tc.finish, 9, &calls))
			resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `}`)})
			if err != nil {
				t.Fatal(err)
			}
			jc := gjson.GetBytes(resp.Body, "choices.0.message.content").Str
			jf := gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str
			resp, err = h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"stream":true}`), Stream: true})
			if err != nil {
				t.Fatal(err)
			}
			var sc, sf string
			for _, c := range drainChunks(t, resp.Stream) {
				sc += gjson.GetBytes(c, "choices.0.delta.content").Str
				if f := gjson.GetBytes(c, "choices.0.finish_reason"); f.Str != "" {
					sf = f.Str
				}
			}
			want := tc.reply[:strings.Index(tc.reply, "\n")+1]
			if n := calls.Load(); n != 2 || jc != want || sc != want || jf != tc.finish || sf != tc.finish {
				t.Fatalf("%d upstream calls (want 2, one each way); JSON %q %s, stream %q %s; want %q %s", n, jc, jf, sc, sf, want, tc.finish)
			}
		})
	}
}

// The request's output cap bounds the answer, not each attempt: a re-ask
// is given what the attempts before left of it, and once they spent it the
// model is not asked again (the text before the block is the answer).
// JSON and stream alike.
func TestReaskGetsWhatTheCapLeaves(t *testing.T) {
	t.Parallel()
	bad := "Let me see.\n```tool_calls\nnot json\n```"
	for _, stream := range []bool{false, true} {
		var caps []int64
		next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			caps = append(caps, gjson.GetBytes(r.Body, "max_completion_tokens").Int())
			usage := `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`
			if r.Stream {
				head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
				return &pipeline.Response{Stream: teststream.Chunks(
					head+`{"role":"assistant","content":`+q(bad)+`},"finish_reason":null}]}`,
					head+`{},"finish_reason":"stop"}]}`,
					`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":`+usage+`}`,
				)}, nil
			}
			return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` + q(bad) + `},"finish_reason":"stop"}],"usage":` + usage + `}`)}, nil
		})
		h := New(Options{MaxErrors: 3})(next)
		body := toolsBody + `,"max_completion_tokens":8}`
		if stream {
			body = toolsBody + `,"max_completion_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`
		}
		resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(body), Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		var content, finish string
		if stream {
			for _, c := range drainChunks(t, resp.Stream) {
				content += gjson.GetBytes(c, "choices.0.delta.content").Str
				if f := gjson.GetBytes(c, "choices.0.finish_reason").Str; f != "" {
					finish = f
				}
			}
		} else {
			content = gjson.GetBytes(resp.Body, "choices.0.message.content").Str
			finish = gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str
		}
		if fmt.Sprint(caps) != "[8 3]" || content != "Let me see.\nLet me see.\n" || finish != "length" {
			t.Fatalf("stream %v: caps %v (want [8 3]: the re-ask gets 8 less 5, and none follows the cap spent), content %q, finish %q (want length: the cap ended it)", stream, caps, content, finish)
		}
	}
}

// A reply cut at the token limit (or after which the output cap is spent)
// without the call tool_choice requires is the answer, with "length", as a
// native model's cut reply is: not asked again, and not a 502 (the review
// found a spent cap failed the first such reply with tool_choice_unmet).
func TestRequiredCallCutIsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, finish, extra string }{
		{"cut", "length", ""},
		{"cap spent", "stop", `,"max_completion_tokens":5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			next := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				calls++
				return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"I think"},"finish_reason":"` + tc.finish + `"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`)}, nil
			})
			resp, err := New(Options{MaxErrors: 2})(next).Chat(context.Background(), &pipeline.Request{Meta: &pipeline.Meta{},
				Body: []byte(toolsBody + `,"tool_choice":"required"` + tc.extra + `}`)})
			if err != nil || calls != 1 {
				t.Fatalf("%d model calls, err %v", calls, err)
			}
			if c, f := gjson.GetBytes(resp.Body, "choices.0.message.content").Str, gjson.GetBytes(resp.Body, "choices.0.finish_reason").Str; c != "I think" || f != "length" {
				t.Fatalf("content %q finish %q; want the reply, length", c, f)
			}
		})
	}
}

// A json_schema reply cut while it wrote its answer shows the answer's
// text so far, as a native model's cut reply does; a cut call shows
// nothing of the protocol.
func TestPartialAnswer(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"thought":"t","answer":"Par`:            "Par",
		`{"thought":"t","answer":"a \"q`:          `a "q`,
		`{"thought":"t","answer":"a \`:            "a ",
		`{"thought":"t","answer":"Caf\u00`:        "Caf",
		`{"thought":"t","answer":"a\\`:            `a\`,
		`{"thought":"t","answer":"ok","calls":[]`: "ok",
		`{"thought":"t","answer":"done"`:          "done",
		`{"thought":"t","calls":[{"name":"x"`:     "",
		`{"thought":"half`:                        "",
		`{"thought":"t","answer":{"k":"partial`:   "",
	} {
		if got := string(partialAnswer([]byte(in))); got != want {
			t.Errorf("partialAnswer(%s) = %q, want %q", in, got, want)
		}
	}
}

// FuzzPartialAnswer: a cut reply of any bytes never panics, and what it
// shows is no longer than the reply.
func FuzzPartialAnswer(f *testing.F) {
	for _, s := range []string{`{"thought":"t","answer":"Par`, `{"answer":"a \`, `{"answer":"\u00`, `{`, `"`, `\\\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := partialAnswer([]byte(s)); len(got) > len(s) {
			t.Fatalf("%q shows %q", s, got)
		}
	})
}

// answersText is an upstream that answers every call with the text "a"
// and counts the calls in calls.
func answersText(calls *int) pipeline.Handler {
	return pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		*calls++
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"}]}`)}, nil
	})
}

// What a prompted model cannot be offered is refused, not dropped (the
// client would believe it offered it): a tool of another type than
// function, and the legacy functions and function_call. Unsupported, so that a fallback
// model with native tool calling may take the request.
func TestUndescribableToolsRefused(t *testing.T) {
	t.Parallel()
	calls := 0
	h := New(Options{MaxErrors: 2})(answersText(&calls))
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"custom","custom":{"name":"get_weather"}}]}`, "tools[0].type"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"custom","custom":{"name":"g"}}]}`, "tools[1].type"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"functions":[{"name":"get_weather","parameters":{"type":"object"}}]}`, "functions"},
		// The tool loop reads any other functions value, and any
		// function_call, as legacy and runs no session, where re-asks
		// would not be admitted against budgets.
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"functions":{}}`, "functions"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"function_call":"auto"}`, "function_call"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"function_call":{"name":"f"}}`, "function_call"},
	} {
		for _, stream := range []bool{false, true} {
			_, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(tc.body), Stream: stream})
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != tc.param || pe.Code != pipeline.CodeUnsupportedParameter {
				t.Fatalf("%s (stream %v): %v, want a 400 unsupported_parameter on %s", tc.body, stream, err, tc.param)
			}
		}
	}
	if calls != 0 {
		t.Fatalf("the upstream was called %d times", calls)
	}
	// An empty or null functions list offers nothing: it passes, as before.
	for _, fn := range []string{`null`, `[]`} {
		if _, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"functions":` + fn + `}`)}); err != nil {
			t.Fatalf("functions %s: %v", fn, err)
		}
	}
}

// A parallel_tool_calls that is not a boolean is refused, as OpenAI refuses
// it: the prompted layer deletes the field before the upstream call, so no
// provider would, and "false" as a string let the model make several calls
// (review). A boolean or null passes.
func TestParallelToolCallsNotABoolean(t *testing.T) {
	t.Parallel()
	calls := 0
	h := New(Options{MaxErrors: 2})(answersText(&calls))
	body := func(p string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":` + p + `}`)
	}
	for _, p := range []string{`"false"`, `0`, `{}`} {
		_, err := h.Chat(context.Background(), &pipeline.Request{Body: body(p)})
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "parallel_tool_calls" {
			t.Fatalf("parallel_tool_calls %s: %v, want a 400 naming it", p, err)
		}
	}
	if calls != 0 {
		t.Fatalf("the upstream was called %d times", calls)
	}
	for _, p := range []string{`false`, `true`, `null`} {
		if _, err := h.Chat(context.Background(), &pipeline.Request{Body: body(p)}); err != nil {
			t.Fatalf("parallel_tool_calls %s: %v", p, err)
		}
	}
}

// A json_schema reply never shows the client the protocol: "calls": []
// without an answer is an empty answer at once (it was asked again, then
// given as the protocol object, thought and all); a reply still malformed
// after the re-asks shows the answer it holds, nothing when it holds none,
// or its prose when it is no protocol at all. JSON and stream alike.
func TestStructuredGiveUpShowsNoProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reply, want string
		calls             int32 // upstream calls per form
	}{
		{"empty calls", `{"thought":"secret plan","calls":[]}`, "", 1},
		{"prose around", `Sure! {"thought":"secret plan","answer":"hi"}`, "hi", 3},
		{"thought alone", `{"thought":"secret plan"}`, "", 3},
		{"prose only", `The answer is 4.`, `The answer is 4.`, 3},
		{"braces in the prose", `Using {x} here: {"thought":"secret plan","answer":"hi"}`, "hi", 3},
		{"a number as the answer", `So: {"answer":42}`, "42", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			h := New(Options{MaxErrors: 2, Format: "json_schema"})(replyUpstream(tc.reply, "stop", 5, &calls))
			resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `}`)})
			if err != nil {
				t.Fatal(err)
			}
			jc := gjson.GetBytes(resp.Body, "choices.0.message.content").Str
			jn := calls.Swap(0)
			resp, err = h.Chat(context.Background(), &pipeline.Request{Body: []byte(toolsBody + `,"stream":true}`), Stream: true})
			if err != nil {
				t.Fatal(err)
			}
			var sc string
			for _, c := range drainChunks(t, resp.Stream) {
				sc += gjson.GetBytes(c, "choices.0.delta.content").Str
			}
			if jc != tc.want || sc != tc.want || jn != tc.calls || calls.Load() != tc.calls {
				t.Fatalf("JSON %q (%d upstream calls), stream %q (%d); want %q (%d each)", jc, jn, sc, calls.Load(), tc.want, tc.calls)
			}
		})
	}
}

// replyUpstream answers every call with reply and finish, JSON or streamed
// (the text cut in two at split), counting the calls.
func replyUpstream(reply, finish string, split int, calls *atomic.Int32) pipeline.Handler {
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	return pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		calls.Add(1)
		if r.Stream {
			return &pipeline.Response{Stream: teststream.Chunks(
				head+`{"role":"assistant","content":`+q(reply[:split])+`},"finish_reason":null}]}`,
				head+`{"content":`+q(reply[split:])+`},"finish_reason":null}]}`,
				head+`{},"finish_reason":"`+finish+`"}]}`,
			)}, nil
		}
		return &pipeline.Response{Body: []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` + q(reply) + `},"finish_reason":"` + finish + `"}]}`)}, nil
	})
}
