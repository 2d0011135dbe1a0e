package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wire"
	"github.com/llmgw/gateway/wiretest"
)

// replay feeds the published example stream in testdata/name to a decoder
// and returns the chat stream it produced, framed as the sink frames it
// ([DONE] only when the stream completed), and the decoder's error.
func replay(t *testing.T, name string, usage bool) ([]byte, error) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := NewStreamDecoder("anthropic", wire.Header{Created: 1, Model: "claude", IncludeUsage: usage})
	rd := sse.NewReader(f, 1<<20)
	var out []byte
	for !d.Done() {
		ev, err := rd.Next()
		if err != nil {
			return out, err
		}
		if err := d.Feed(ev.Data); err != nil {
			return out, err
		}
		for c, ok := d.Pop(); ok; c, ok = d.Pop() {
			out = sse.AppendData(out, c)
		}
	}
	return sse.AppendData(out, []byte("[DONE]")), nil
}

// accumulate runs the openai-go accumulator over a framed chat stream.
func accumulate(t *testing.T, raw []byte) openai.ChatCompletion {
	t.Helper()
	var acc openai.ChatCompletionAccumulator
	for _, line := range bytes.Split(raw, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || string(data) == "[DONE]" {
			continue
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		if !acc.AddChunk(c) {
			t.Fatalf("accumulator refused %s", data)
		}
	}
	return acc.ChatCompletion
}

func TestStreamDecoderPublishedExamples(t *testing.T) {
	t.Parallel()
	schema := wiretest.LoadSchema(t)
	tests := []struct {
		name, file  string
		usage       bool
		content     string
		reasoning   string
		calls       [][2]string // name, arguments
		finish      string
		promptToks  int64
		cachedToks  int64
		outputToks  int64
		cacheWrites int64
	}{
		{name: "text", file: "text.sse", usage: true, content: "Hello!", finish: "stop", promptToks: 25, outputToks: 15},
		{name: "text without usage", file: "text.sse", content: "Hello!", finish: "stop"},
		{name: "tool use", file: "tool_use.sse", usage: true, content: "Okay, let's check the weather for San Francisco, CA:",
			calls: [][2]string{
				{"get_weather", `{"location": "San Francisco, CA", "unit": "fahrenheit"}`},
				{"get_time", `{"city": "Z\u00fcrich 🌍 Köln"}`},
			},
			finish: "tool_calls", promptToks: 472 + 100 + 2000, cachedToks: 2000, cacheWrites: 100, outputToks: 89},
		{name: "thinking", file: "thinking.sse", usage: true, content: "27 * 453 = 12,231",
			reasoning: "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3", finish: "stop", promptToks: 10, outputToks: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := replay(t, tc.file, tc.usage)
			if err != nil {
				t.Fatal(err)
			}
			sum := wiretest.CheckStreamAll(t, raw, wiretest.Options{WantUsage: tc.usage}, schema)
			if sum.Model != "claude" || sum.ID == "" || sum.ID[:4] != "msg_" {
				t.Errorf("id %q model %q", sum.ID, sum.Model)
			}
			cc := accumulate(t, raw)
			msg := cc.Choices[0].Message
			if msg.Content != tc.content || cc.Choices[0].FinishReason != tc.finish {
				t.Errorf("content %q finish %q", msg.Content, cc.Choices[0].FinishReason)
			}
			if len(msg.ToolCalls) != len(tc.calls) {
				t.Fatalf("calls %+v", msg.ToolCalls)
			}
			for i, c := range tc.calls {
				got := msg.ToolCalls[i]
				if got.Function.Name != c[0] || got.Function.Arguments != c[1] || got.ID == "" {
					t.Errorf("call %d: %s %s %q", i, got.ID, got.Function.Name, got.Function.Arguments)
				}
				if !json.Valid([]byte(got.Function.Arguments)) {
					t.Errorf("call %d arguments are not JSON", i)
				}
			}
			var reasoning string
			for _, ch := range sum.Chunks {
				reasoning += gjson.GetBytes(ch, "choices.0.delta.reasoning_content").Str
			}
			if reasoning != tc.reasoning {
				t.Errorf("reasoning %q", reasoning)
			}
			u := gjson.ParseBytes(sum.Usage)
			if !tc.usage {
				if sum.Usage != nil {
					t.Errorf("usage not asked for: %s", sum.Usage)
				}
				return
			}
			if u.Get("prompt_tokens").Int() != tc.promptToks || u.Get("completion_tokens").Int() != tc.outputToks ||
				u.Get("total_tokens").Int() != tc.promptToks+tc.outputToks ||
				u.Get("prompt_tokens_details.cached_tokens").Int() != tc.cachedToks ||
				u.Get("prompt_tokens_details.cache_write_tokens").Int() != tc.cacheWrites {
				t.Errorf("usage %s", sum.Usage)
			}
		})
	}
}

func TestStreamDecoderErrorEvent(t *testing.T) {
	t.Parallel()
	raw, err := replay(t, "error.sse", true)
	var ue *pipeline.UpstreamError
	if !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamStatus || ue.Status != 503 {
		t.Fatalf("err %v", err)
	}
	if got := gjson.GetBytes(ue.Body, "error.type").Str; got != "server_error" || gjson.GetBytes(ue.Body, "error.code").Str != "overloaded" {
		t.Errorf("body %s", ue.Body)
	}
	// The text before the error was decoded: a stream that already showed
	// content ends with the error event, one that did not is retried.
	if !bytes.Contains(raw, []byte(`"content":"Hel"`)) {
		t.Errorf("chunks before the error: %s", raw)
	}
}

func TestStreamDecoderRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events []string
		kind   pipeline.UpstreamKind
	}{
		{"not JSON", []string{`{"type":"message_start"`}, pipeline.UpstreamMalformed},
		{"array", []string{`[1]`}, pipeline.UpstreamMalformed},
		{"content before message_start", []string{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`}, pipeline.UpstreamMalformed},
		{"error before anything", []string{`{"type":"ping"}`, `{"type":"error","error":{"type":"api_error","message":"Internal"}}`}, pipeline.UpstreamStatus},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := NewStreamDecoder("a", wire.Header{Model: "m"})
			var err error
			for _, e := range tc.events {
				if err = d.Feed([]byte(e)); err != nil {
					break
				}
			}
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) || ue.Kind != tc.kind {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// Blocks and events the chat form has no place for (a server tool's
// block, an event type not known) are left out; a call without input gets
// {}. (Blocks it cannot follow fail the stream: TestStreamBlocksItCannotFollow.)
func TestStreamDecoderIgnoresUnknownBlocks(t *testing.T) {
	t.Parallel()
	d := NewStreamDecoder("a", wire.Header{Model: "m"})
	events := []string{
		`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`,
		`{"type":"brand_new_event"}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"noargs","input":{}}}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"message_stop"}`,
	}
	var out []byte
	for _, e := range events {
		if err := d.Feed([]byte(e)); err != nil {
			t.Fatal(err)
		}
		for c, ok := d.Pop(); ok; c, ok = d.Pop() {
			out = sse.AppendData(out, c)
		}
	}
	if !d.Done() || bytes.Contains(out, []byte("web_search")) {
		t.Fatalf("done %v, out %s", d.Done(), out)
	}
	cc := accumulate(t, sse.AppendData(out, []byte("[DONE]")))
	if tc := cc.Choices[0].Message.ToolCalls; len(tc) != 1 || tc[0].Function.Arguments != "{}" {
		t.Errorf("a call without input gets {}: %+v", tc)
	}
}

func TestStatusErrorMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		body      string
		wantCode  string
		wantState int
		context   bool
	}{
		{"prompt too long", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}`, pipeline.CodeContextLengthExceeded, 400, true},
		// Since Claude 3.7 a prompt that fits, but not with max_tokens, is
		// refused with this message (OpenAI's context_length_exceeded too).
		{"prompt plus max_tokens too long", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 178959 + 64000 > 200000, decrease input length or ` + "`max_tokens`" + ` and try again"}}`, pipeline.CodeContextLengthExceeded, 400, true},
		{"other 400", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}`, "", 400, false},
		{"overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "overloaded", 503, false},
		{"rate limited", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, pipeline.CodeRateLimitExceeded, 429, false},
		{"not JSON", 502, `<html>bad gateway</html>`, "", 502, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ue := StatusError("a", tc.status, []byte(tc.body), 0)
			if ue.Status != tc.wantState || gjson.GetBytes(ue.Body, "error.code").Str != tc.wantCode {
				t.Errorf("status %d body %s", ue.Status, ue.Body)
			}
			if fallback.ContextLengthExceeded(ue.Body) != tc.context {
				t.Errorf("context length %v for %s", !tc.context, ue.Body)
			}
		})
	}
}

func TestDecodeMessage(t *testing.T) {
	t.Parallel()
	body := `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[` +
		`{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"Let me look."},` +
		`{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Köln"}},` +
		`{"type":"tool_use","id":"toolu_2","name":"now"}],` +
		`"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":20,"cache_read_input_tokens":30,"cache_creation_input_tokens":5}}`
	out, err := DecodeMessage("a", []byte(body), wire.Header{Created: 7, Model: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	if err := wiretest.LoadSchema(t).Completion(out); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	var cc openai.ChatCompletion
	if err := json.Unmarshal(out, &cc); err != nil {
		t.Fatal(err)
	}
	m := cc.Choices[0].Message
	if cc.ID != "msg_01" || cc.Model != "claude" || m.Content != "Let me look." || cc.Choices[0].FinishReason != "tool_calls" ||
		len(m.ToolCalls) != 2 || m.ToolCalls[0].Function.Arguments != `{"city":"Köln"}` || m.ToolCalls[1].Function.Arguments != "{}" {
		t.Errorf("%s", out)
	}
	if cc.Usage.PromptTokens != 45 || cc.Usage.CompletionTokens != 20 || cc.Usage.TotalTokens != 65 || cc.Usage.PromptTokensDetails.CachedTokens != 30 {
		t.Errorf("usage %s", out)
	}
	for _, bad := range []string{`nope`, `{"type":"message"}`, `[]`} {
		var ue *pipeline.UpstreamError
		if _, err := DecodeMessage("a", []byte(bad), wire.Header{}); !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamMalformed {
			t.Errorf("%s: %v", bad, err)
		}
	}
	_, err = DecodeMessage("a", []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), wire.Header{})
	var ue *pipeline.UpstreamError
	if !errors.As(err, &ue) || ue.Status != 503 {
		t.Errorf("error body: %v", err)
	}
}

// message_delta's counts are running totals: Anthropic repeats the input
// side there, and servers that speak its API (as base_url allows) send
// zeros or leave counts out. A total never goes down, so a zero after
// message_start's count keeps the count: the stream's usage is the JSON
// answer's.
func TestStreamDecoderUsageTotalsOnlyGrow(t *testing.T) {
	t.Parallel()
	start := `{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":7,"output_tokens":1}}}`
	text := []string{`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`, `{"type":"content_block_stop","index":0}`}
	const want = `{"prompt_tokens":20,"completion_tokens":42,"total_tokens":62,"prompt_tokens_details":{"cached_tokens":7,"cache_write_tokens":3}}`
	for _, delta := range []string{
		`{"output_tokens":42}`,
		`{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":7,"output_tokens":42}`,
		`{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":42}`,
	} {
		evs := append(append([]string{start}, text...),
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":`+delta+`}`, `{"type":"message_stop"}`)
		d := NewStreamDecoder("a", wire.Header{Model: "m", IncludeUsage: true})
		var out []byte
		for _, e := range evs {
			if err := d.Feed([]byte(e)); err != nil {
				t.Fatal(err)
			}
			for c, ok := d.Pop(); ok; c, ok = d.Pop() {
				out = sse.AppendData(out, c)
			}
		}
		sum := wiretest.CheckStreamAll(t, sse.AppendData(out, []byte("[DONE]")), wiretest.Options{WantUsage: true}, nil)
		if string(sum.Usage) != want {
			t.Errorf("delta usage %s: stream usage %s, want %s", delta, sum.Usage, want)
		}
	}
}

// A stream whose content block the decoder cannot follow (an index out of
// range, a delta before its block's start, a tool_use without a name) is
// malformed, as a JSON message with such a call is: ignored, the block's
// text or call was lost and the stream ended as a whole answer (a
// tool_use stop with no call became "stop").
func TestStreamBlocksItCannotFollow(t *testing.T) {
	t.Parallel()
	start := `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}`
	for name, evs := range map[string][]string{
		"index past the bound":  {`{"type":"content_block_start","index":4294967296,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}`},
		"negative index":        {`{"type":"content_block_start","index":-1,"content_block":{"type":"text","text":""}}`},
		"fractional index":      {`{"type":"content_block_start","index":0.5,"content_block":{"type":"text","text":""}}`},
		"text before its start": {`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lost"}}`},
		"input before its start": {`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}`},
		"tool_use without a name": {`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":null,"input":{}}}`},
	} {
		d := NewStreamDecoder("anthropic", wire.Header{Created: 1, Model: "claude"})
		var err error
		for _, ev := range append([]string{start}, evs...) {
			if err = d.Feed([]byte(ev)); err != nil {
				break
			}
		}
		var ue *pipeline.UpstreamError
		if !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamMalformed {
			t.Errorf("%s: %v, want a malformed upstream", name, err)
		}
	}
	// Deltas of a block the decoder does not show (a server tool's) and
	// delta kinds it does not know stay ignored.
	d := NewStreamDecoder("anthropic", wire.Header{Created: 1, Model: "claude"})
	for _, ev := range []string{start,
		`{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"s","name":"web_search","input":{}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"q\":1}"}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"citations_delta","citation":{}}}`} {
		if err := d.Feed([]byte(ev)); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
	}
	if _, err := DecodeMessage("anthropic", []byte(`{"type":"message","id":"m","content":[{"type":"tool_use","id":5,"input":{}}],"stop_reason":"tool_use"}`),
		wire.Header{Created: 1, Model: "claude"}); err == nil {
		t.Error("a JSON message's tool_use without a name was taken")
	}
}

// An answer of many blocks (a long web-search answer, each cited passage a
// text block of its own) streams as it decodes as JSON, and a block event
// without an index (a server that speaks the API loosely) is block 0.
func TestStreamManyBlocksAndNoIndex(t *testing.T) {
	t.Parallel()
	d := NewStreamDecoder("anthropic", wire.Header{Created: 1, Model: "claude"})
	evs := []string{`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}`}
	for i := range 2000 {
		evs = append(evs, fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, i),
			fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":"p "}}`, i))
	}
	for _, ev := range evs {
		if err := d.Feed([]byte(ev)); err != nil {
			t.Fatalf("%v at %s", err, ev)
		}
		for _, ok := d.Pop(); ok; _, ok = d.Pop() {
		}
	}
	d = NewStreamDecoder("anthropic", wire.Header{Created: 1, Model: "claude"})
	var out []byte
	for _, ev := range []string{evs[0], `{"type":"content_block_start","content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":"loose"}}`} {
		if err := d.Feed([]byte(ev)); err != nil {
			t.Fatalf("%v at %s", err, ev)
		}
		for c, ok := d.Pop(); ok; c, ok = d.Pop() {
			out = append(out, c...)
		}
	}
	if !bytes.Contains(out, []byte("loose")) {
		t.Fatalf("the text of a block without an index: %s", out)
	}
}

// A server that cuts its text by UTF-16 units may split a surrogate pair
// between two deltas of a block: the pair is joined again (text, thinking
// and tool input alike), and a lone half is dropped.
func TestStreamDecoderJoinsSplitPairs(t *testing.T) {
	t.Parallel()
	events := []string{
		`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"t\ud83d"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"\ude00"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a\ud83d"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\ude00b\\ud83d"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\ud83d"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\ude01\ud83d"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"c"}}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"c\":\"\ud83d"}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\ude00\"}"}}`,
		`{"type":"content_block_stop","index":2}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`,
		`{"type":"message_stop"}`,
	}
	d := NewStreamDecoder("a", wire.Header{Created: 1, Model: "claude"})
	var content, reasoning, args strings.Builder
	for _, ev := range events {
		if err := d.Feed([]byte(ev)); err != nil {
			t.Fatal(err)
		}
		for c, ok := d.Pop(); ok; c, ok = d.Pop() {
			data := bytes.TrimPrefix(bytes.TrimSpace(c), []byte("data: "))
			delta := gjson.GetBytes(data, "choices.0.delta")
			content.WriteString(delta.Get("content").Str)
			reasoning.WriteString(delta.Get("reasoning_content").Str)
			args.WriteString(delta.Get("tool_calls.0.function.arguments").Str)
		}
	}
	if content.String() != `a😀b\ud83d😁c` || reasoning.String() != "t😀" || args.String() != `{"c":"😀"}` {
		t.Errorf("content %q, reasoning %q, arguments %q", content.String(), reasoning.String(), args.String())
	}
}
