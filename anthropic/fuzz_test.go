package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
	"github.com/llmgw/gateway/wire"
)

// FuzzStreamDecoder feeds arbitrary SSE bodies: the decoder never panics,
// every chunk it yields is a JSON object, and every failure is an
// UpstreamError.
func FuzzStreamDecoder(f *testing.F) {
	for _, name := range []string{"text.sse", "tool_use.sse", "thinking.sse", "error.sse"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":{}}\n\ndata: {\"type\":\"content_block_start\",\"index\":1023,\"content_block\":{\"type\":\"tool_use\",\"input\":{\"a\":1}}}\n\n"))
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":{}}\n\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\"}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\\ud83d\"}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\ude00\\ud83d\"}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		d := NewStreamDecoder("a", wire.Header{Model: "m", IncludeUsage: true})
		var th pipeline.Thinking
		d.NoteThinking(&th)
		defer func() {
			if th.Blocks != nil && (!gjson.ValidBytes(th.Blocks) || th.Blocks[0] != '[') {
				t.Fatalf("thinking blocks %q", th.Blocks)
			}
		}()
		rd := sse.NewReader(bytes.NewReader(body), 1<<16)
		for !d.Done() {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			if err := d.Feed(ev.Data); err != nil {
				var ue *pipeline.UpstreamError
				if !errors.As(err, &ue) {
					t.Fatalf("error %T %v", err, err)
				}
				if ue.Body != nil && !gjson.ValidBytes(ue.Body) {
					t.Fatalf("error body %q", ue.Body)
				}
				return
			}
			for c, ok := d.Pop(); ok; c, ok = d.Pop() {
				if !gjson.ValidBytes(c) || c[0] != '{' {
					t.Fatalf("chunk %q", c)
				}
			}
		}
	})
}

// FuzzDecodeMessage: any body gives a valid chat.completion or an
// UpstreamError, never a panic.
func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{"a":"\u00fc"}}],"stop_reason":"tool_use","usage":{"input_tokens":1}}`))
	f.Add([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	f.Add([]byte(`{"content":[{"type":"thinking","thinking":"Let me think.","signature":"c2ln"},{"type":"redacted_thinking","data":"x"},{"type":"thinking","thinking":7},{"type":"text","text":"4"}]}`))
	f.Add([]byte(`{"content":[1,"x",null,{"type":"tool_use","input":[]}],"usage":{"input_tokens":-5}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := DecodeMessage("a", body, wire.Header{Model: "m"})
		if err != nil {
			var ue *pipeline.UpstreamError
			if !errors.As(err, &ue) {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		if !gjson.ValidBytes(out) || !gjson.GetBytes(out, "choices.0.message").IsObject() {
			t.Fatalf("completion %q", out)
		}
		if th := MessageThinking(body); th != nil && (!gjson.ValidBytes(th) || th[0] != '[') {
			t.Fatalf("thinking blocks %q", th)
		}
	})
}

// FuzzTranslateRequest: any JSON body gives a valid Messages request or a
// 400 pipeline.Error, never a panic.
func FuzzTranslateRequest(f *testing.F) {
	f.Add([]byte(fullChat))
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"x","content":[{"type":"text","text":"{\"status\":\"error\"}","cache_control":{}}]}]}`))
	f.Add([]byte(`{"thinking":{"type":"enabled","budget_tokens":500},"max_tokens":1030,"messages":[{"role":"user","content":"x"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:;base64,"}}]}],"stop":[1,null],"thinking":{"budget_tokens":"x"}}`))
	f.Add([]byte(`{"reasoning_effort":"low","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y","tool_calls":[{"id":"c","function":{"name":"f"}}],"x_gateway_thinking":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"redacted_thinking","data":"d"},{"type":"thinking"}]},{"role":"tool","tool_call_id":"c","content":"1"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) {
			return // the pipeline validated its body at ingress
		}
		out, err := TranslateRequest(body, RequestOptions{Model: "m"})
		if err != nil {
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != 400 {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		var sent messagesRequest // decoded again: the markers as Anthropic reads them
		if err := json.Unmarshal(out, &sent); err != nil || len(markers(&sent)) > MaxBreakpoints {
			t.Fatalf("request %q: %v", out, err)
		}
		on := sent.Thinking != nil && gjson.GetBytes(sent.Thinking, "type").Str != "disabled"
		if b := gjson.GetBytes(sent.Thinking, "budget_tokens"); gjson.GetBytes(sent.Thinking, "type").Str == "enabled" &&
			(b.Type != gjson.Number || b.Int() < minBudget || b.Int() >= sent.MaxTokens) {
			t.Fatalf("budget_tokens %s with max_tokens %d: %q", b.Raw, sent.MaxTokens, out)
		}
		for _, m := range sent.Messages {
			for i, b := range m.Content {
				if b.isThinking() && (!on || m.Role != "assistant" || i > 0 && !m.Content[i-1].isThinking()) {
					t.Fatalf("thinking block out of place: %q", out)
				}
			}
		}
	})
}
