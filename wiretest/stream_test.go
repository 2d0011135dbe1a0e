package wiretest

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

const (
	head     = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[`
	usageCh  = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	doneEv   = "RAW:data: [DONE]\n\n"
	errorEnv = `{"error":{"message":"upstream timed out","type":"server_error","param":null,"code":"upstream_timeout"}}`
)

// ch wraps choice objects in a chunk; d and fin build choice 0 objects.
func ch(choices ...string) string { return head + strings.Join(choices, ",") + `]}` }
func d(delta string) string {
	return `{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":null}`
}
func fin(reason string) string { return `{"index":0,"delta":{},"finish_reason":"` + reason + `"}` }

var (
	role  = ch(d(`{"role":"assistant","content":""}`))
	text  = ch(d(`{"content":"Hi"}`))
	stop  = ch(fin("stop"))
	tc0   = ch(d(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}`))
	tc1   = ch(d(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]}`))
	tcFin = ch(fin("tool_calls"))
)

func frag(i, s string) string {
	return ch(d(`{"tool_calls":[{"index":` + i + `,"function":{"arguments":"` + s + `"}}]}`))
}

// frame frames each element as a data event; elements starting with "RAW:"
// are appended verbatim.
func frame(events ...string) []byte {
	var b []byte
	for _, e := range events {
		if raw, ok := strings.CutPrefix(e, "RAW:"); ok {
			b = append(b, raw...)
			continue
		}
		b = append(b, "data: "+e+"\n\n"...)
	}
	return b
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheckStreamAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  []byte
		file string
		opt  Options
		want Summary // compared field by field where set
	}{
		{name: "text with usage", file: "text_usage.sse", opt: Options{WantUsage: true},
			want: Summary{Content: "Hello", FinishReason: "stop", ID: "chatcmpl-gw1", Model: "gpt-x", Choices: 1}},
		{name: "parallel tool calls", file: "tool_calls_usage.sse", opt: Options{WantUsage: true},
			want: Summary{FinishReason: "tool_calls", ID: "chatcmpl-gw2", Model: "gpt-x", Choices: 1, ToolCalls: []ToolCall{
				{Index: 0, ID: "call_k1", Name: "lookup_city", Arguments: `{"name":"Oslo"}`},
				{Index: 1, ID: "call_k2", Name: "local_time", Arguments: `{"tz":"CET"}`},
			}}},
		{name: "text without usage, keep-alives", raw: frame("RAW:: keep-alive\n\n", role, "RAW:: keep-alive\n\n", text, stop, doneEv),
			want: Summary{Content: "Hi", FinishReason: "stop", ID: "c1", Model: "m", Choices: 1, KeepAlives: 2}},
		{name: "usage null on every chunk", raw: frame(strings.Replace(role, `]}`, `],"usage":null}`, 1), text, stop, doneEv),
			want: Summary{Content: "Hi", FinishReason: "stop"}},
		{name: "whole arguments in first delta", raw: frame(role, ch(d(`{"content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`)), tcFin, doneEv),
			want: Summary{FinishReason: "tool_calls", ToolCalls: []ToolCall{{Index: 0, ID: "call_a", Name: "f", Arguments: `{"x":1}`}}}},
		{name: "two choices", raw: frame(ch(d(`{"role":"assistant"}`), `{"index":1,"delta":{"role":"assistant"},"finish_reason":null}`),
			ch(`{"index":1,"delta":{"content":"b"},"finish_reason":null}`), ch(d(`{"content":"a"}`)),
			ch(fin("stop"), `{"index":1,"delta":{},"finish_reason":"length"}`), doneEv),
			want: Summary{Content: "a", FinishReason: "stop", Choices: 2}},
		{name: "tool call cut by length", raw: frame(role, tc0, frag("0", `{\"ci`), ch(fin("length")), doneEv),
			want: Summary{FinishReason: "length", ToolCalls: []ToolCall{{Index: 0, ID: "call_a", Name: "f", Arguments: `{"ci`}}}},
		{name: "data without space", raw: frame("RAW:data:"+role+"\n\n", stop, doneEv), want: Summary{FinishReason: "stop"}},
		{name: "error mid-stream", raw: frame(role, text, "RAW:: keep-alive\n\nevent: error\ndata: "+errorEnv+"\n\n"), opt: Options{WantError: true},
			want: Summary{Content: "Hi", KeepAlives: 1}},
		{name: "error before any chunk", raw: frame("RAW:event: error\ndata: " + errorEnv + "\n\n"), opt: Options{WantError: true, WantUsage: true}},
		{name: "surrogate pair escape", raw: frame(role, ch(d(`{"content":"\ud83c\udf89 \\ud800"}`)), stop, doneEv), want: Summary{Content: "🎉 \\ud800", FinishReason: "stop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := tt.raw
			if tt.file != "" {
				raw = readFile(t, tt.file)
			}
			sum, err := CheckStream(raw, tt.opt)
			if err != nil {
				t.Fatalf("CheckStream: %v", err)
			}
			if tt.want.Content != sum.Content || tt.want.FinishReason != sum.FinishReason || tt.want.KeepAlives != sum.KeepAlives {
				t.Errorf("content %q finish %q keepalives %d, want %q %q %d", sum.Content, sum.FinishReason, sum.KeepAlives,
					tt.want.Content, tt.want.FinishReason, tt.want.KeepAlives)
			}
			if tt.want.ID != "" && (sum.ID != tt.want.ID || sum.Model != tt.want.Model) {
				t.Errorf("id %q model %q, want %q %q", sum.ID, sum.Model, tt.want.ID, tt.want.Model)
			}
			if tt.want.Choices != 0 && sum.Choices != tt.want.Choices {
				t.Errorf("choices %d, want %d", sum.Choices, tt.want.Choices)
			}
			if !reflect.DeepEqual(sum.ToolCalls, tt.want.ToolCalls) {
				t.Errorf("tool calls %+v, want %+v", sum.ToolCalls, tt.want.ToolCalls)
			}
			if (sum.Usage != nil) != tt.opt.WantUsage && !tt.opt.WantError {
				t.Errorf("usage %s with WantUsage %v", sum.Usage, tt.opt.WantUsage)
			}
			if (sum.Error != nil) != tt.opt.WantError {
				t.Errorf("error %s with WantError %v", sum.Error, tt.opt.WantError)
			}
		})
	}
}

func TestCheckStreamSummaryChunks(t *testing.T) {
	t.Parallel()
	sum, err := CheckStream(readFile(t, "tool_calls_usage.sse"), Options{WantUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Chunks) != 8 {
		t.Fatalf("chunks = %d, want 8", len(sum.Chunks))
	}
	if want := `{"prompt_tokens":80,`; !strings.HasPrefix(string(sum.Usage), want) {
		t.Fatalf("usage = %s", sum.Usage)
	}
}

func TestCheckStreamRejects(t *testing.T) {
	t.Parallel()
	usage := Options{WantUsage: true}
	wantErr := Options{WantError: true}
	tests := []struct {
		name      string
		raw       []byte
		opt       Options
		rule      Rule
		wantChunk int // 0: not checked
	}{
		// framing (docs/wire.md rules 1-4)
		{name: "CRLF line endings", raw: []byte(strings.ReplaceAll(string(frame(role, stop, doneEv)), "\n", "\r\n")), rule: RuleFraming},
		{name: "last event without blank line", raw: frame(role, stop, "RAW:data: [DONE]\n"), rule: RuleFraming},
		{name: "last line without newline", raw: frame(role, stop, "RAW:data: [DONE]"), rule: RuleFraming},
		{name: "two data lines in one event", raw: frame("RAW:data: "+role+"\ndata: "+stop+"\n\n", doneEv), rule: RuleFraming},
		{name: "event ping without data", raw: frame(role, "RAW:event: ping\n\n", stop, doneEv), rule: RuleFraming},
		{name: "id line", raw: frame("RAW:id: 1\n", role, stop, doneEv), rule: RuleFraming},
		{name: "event error without data", raw: frame(role, "RAW:event: error\n\n"), opt: wantErr, rule: RuleFraming},
		{name: "invalid UTF-8", raw: frame(role, ch(d("{\"content\":\"\xff\"}")), stop, doneEv), rule: RuleUTF8},
		{name: "invalid UTF-8 in comment", raw: frame("RAW:: \xc3\n\n", role, stop, doneEv), rule: RuleUTF8},
		{name: "lone surrogate escape", raw: frame(role, ch(d(`{"content":"\ud83c"}`)), stop, doneEv), rule: RuleUTF8, wantChunk: 2},
		{name: "lone low surrogate escape", raw: frame(role, ch(d(`{"content":"a\udf89"}`)), stop, doneEv), rule: RuleUTF8, wantChunk: 2},
		{name: "not JSON", raw: frame(role, `{"id":`, stop, doneEv), rule: RuleJSON, wantChunk: 2},
		// terminator
		{name: "missing DONE", raw: frame(role, stop), rule: RuleDone},
		{name: "DONE with trailing space", raw: frame(role, stop, "RAW:data: [DONE] \n\n"), rule: RuleDone, wantChunk: 3},
		{name: "DONE without space", raw: frame(role, stop, "RAW:data:[DONE]\n\n"), rule: RuleDone},
		{name: "comment after DONE", raw: frame(role, stop, doneEv, "RAW:: x\n\n"), rule: RuleDone},
		{name: "chunk after DONE", raw: frame(role, doneEv, stop, doneEv), rule: RuleDone, wantChunk: 3},
		// top level (rules 5, 6, 9)
		{name: "error null in chunk", raw: frame(role, strings.Replace(text, `{"id"`, `{"error":null,"id"`, 1), stop, doneEv), rule: RuleErrorKey, wantChunk: 2},
		{name: "error data without event line", raw: frame(role, errorEnv), opt: wantErr, rule: RuleErrorKey},
		{name: "wrong object", raw: frame(strings.Replace(role, "chat.completion.chunk", "chat.completion", 1), stop, doneEv), rule: RuleObject, wantChunk: 1},
		{name: "changed id", raw: frame(role, strings.Replace(text, `"c1"`, `"c2"`, 1), stop, doneEv), rule: RuleID, wantChunk: 2},
		{name: "empty id on usage chunk", raw: frame(role, stop, strings.Replace(usageCh, `"c1"`, `""`, 1), doneEv), opt: usage, rule: RuleID, wantChunk: 3},
		{name: "changed created", raw: frame(role, strings.Replace(text, `"created":1`, `"created":2`, 1), stop, doneEv), rule: RuleCreated},
		{name: "float created", raw: frame(strings.Replace(role, `"created":1`, `"created":1.5`, 1), stop, doneEv), rule: RuleCreated},
		{name: "empty model", raw: frame(role, strings.Replace(stop, `"model":"m"`, `"model":""`, 1), doneEv), rule: RuleModel, wantChunk: 2},
		{name: "changed model", raw: frame(role, strings.Replace(stop, `"model":"m"`, `"model":"n"`, 1), doneEv), rule: RuleModel},
		{name: "missing choices", raw: frame(role, strings.Replace(text, `"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]`, `"x":1`, 1), stop, doneEv), rule: RuleChoices},
		{name: "no choices at all", raw: frame(doneEv), rule: RuleChoices},
		// choices
		{name: "missing finish_reason key", raw: frame(role, ch(`{"index":0,"delta":{"content":"x"}}`), stop, doneEv), rule: RuleFinishKey, wantChunk: 2},
		{name: "choice 1 before choice 0", raw: frame(ch(`{"index":1,"delta":{"role":"assistant"},"finish_reason":null}`), doneEv), rule: RuleChoiceIndex},
		{name: "choice twice in a chunk", raw: frame(ch(d(`{"role":"assistant"}`), d(`{"content":"x"}`)), stop, doneEv), rule: RuleChoiceIndex},
		{name: "missing delta", raw: frame(role, ch(`{"index":0,"finish_reason":null}`), stop, doneEv), rule: RuleDelta},
		// role (rule 7)
		{name: "repeated role", raw: frame(role, ch(d(`{"role":"assistant","content":"x"}`)), stop, doneEv), rule: RuleRole, wantChunk: 2},
		{name: "no role in first delta", raw: frame(text, stop, doneEv), rule: RuleRole, wantChunk: 1},
		{name: "role not assistant", raw: frame(ch(d(`{"role":"user"}`)), stop, doneEv), rule: RuleRole},
		{name: "content not a string", raw: frame(role, ch(d(`{"content":5}`)), stop, doneEv), rule: RuleContent},
		// tool calls (rules 8-11)
		{name: "repeated name", raw: frame(role, tc0, ch(d(`{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]}`)), tcFin, doneEv), rule: RuleToolFragment, wantChunk: 3},
		{name: "repeated id", raw: frame(role, tc0, ch(d(`{"tool_calls":[{"index":0,"id":"call_a","function":{"arguments":"{}"}}]}`)), tcFin, doneEv), rule: RuleToolFragment},
		{name: "repeated type", raw: frame(role, tc0, ch(d(`{"tool_calls":[{"index":0,"type":"function","function":{"arguments":"{}"}}]}`)), tcFin, doneEv), rule: RuleToolFragment},
		{name: "fragment without arguments", raw: frame(role, tc0, ch(d(`{"tool_calls":[{"index":0,"function":{}}]}`)), tcFin, doneEv), rule: RuleToolFragment},
		{name: "missing type", raw: frame(role, strings.Replace(tc0, `"type":"function",`, "", 1), tcFin, doneEv), rule: RuleToolFirst, wantChunk: 2},
		{name: "missing id", raw: frame(role, strings.Replace(tc0, `"id":"call_a",`, "", 1), tcFin, doneEv), rule: RuleToolFirst},
		{name: "empty name", raw: frame(role, strings.Replace(tc0, `"name":"f"`, `"name":""`, 1), tcFin, doneEv), rule: RuleToolFirst},
		{name: "missing arguments in first delta", raw: frame(role, strings.Replace(tc0, `,"arguments":""`, "", 1), tcFin, doneEv), rule: RuleToolFirst},
		{name: "sparse index", raw: frame(role, strings.Replace(tc0, `"index":0,"id"`, `"index":1,"id"`, 1), tcFin, doneEv), rule: RuleToolIndex, wantChunk: 2},
		{name: "missing tool index", raw: frame(role, strings.Replace(tc0, `"index":0,"id"`, `"id"`, 1), tcFin, doneEv), rule: RuleToolIndex},
		{name: "negative tool index", raw: frame(role, strings.Replace(tc0, `"index":0,"id"`, `"index":-1,"id"`, 1), tcFin, doneEv), rule: RuleToolIndex},
		{name: "interleaving", raw: frame(role, tc0, tc1, frag("0", "{}"), tcFin, doneEv), rule: RuleToolInterleave, wantChunk: 4},
		{name: "two entries in one chunk", raw: frame(role, ch(d(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]}`)), tcFin, doneEv), rule: RuleToolCalls, wantChunk: 2},
		{name: "empty tool_calls array", raw: frame(role, ch(d(`{"tool_calls":[]}`)), stop, doneEv), rule: RuleToolCalls},
		{name: "content empty string on tool chunk", raw: frame(role, ch(d(`{"content":"","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}`)), tcFin, doneEv), rule: RuleContent, wantChunk: 2},
		// finish (rule 12)
		{name: "finish on a chunk with content", raw: frame(role, ch(`{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}`), doneEv), rule: RuleFinish, wantChunk: 2},
		{name: "finish on a chunk with tool call", raw: frame(role, ch(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}`), doneEv), rule: RuleFinish},
		{name: "second finish", raw: frame(role, stop, stop, doneEv), rule: RuleFinish, wantChunk: 3},
		{name: "choice after its finish", raw: frame(role, stop, text, doneEv), rule: RuleFinish, wantChunk: 3},
		{name: "never finished", raw: frame(role, text, doneEv), rule: RuleFinish},
		{name: "empty finish_reason", raw: frame(role, ch(fin("")), doneEv), rule: RuleFinish},
		{name: "tool calls finished with stop", raw: frame(role, tc0, stop, doneEv), rule: RuleFinish},
		{name: "tool calls finished with an unknown reason", raw: frame(role, tc0, ch(fin("function_call")), doneEv), rule: RuleFinish},
		{name: "tool_calls finish without calls", raw: frame(role, tcFin, doneEv), rule: RuleFinish},
		// usage (rule 13)
		{name: "usage chunk not last", raw: frame(role, usageCh, stop, doneEv), opt: usage, rule: RuleUsage, wantChunk: 3},
		{name: "two usage chunks", raw: frame(role, stop, usageCh, usageCh, doneEv), opt: usage, rule: RuleUsage, wantChunk: 4},
		{name: "usage when not wanted", raw: frame(role, stop, usageCh, doneEv), rule: RuleUsage, wantChunk: 3},
		{name: "usage missing", raw: frame(role, stop, doneEv), opt: usage, rule: RuleUsage},
		{name: "usage chunk with choices", raw: frame(role, strings.Replace(stop, `]}`, `],"usage":{"total_tokens":2}}`, 1), doneEv), opt: usage, rule: RuleUsage},
		// mid-stream errors (rule 17)
		{name: "unexpected error event", raw: frame(role, "RAW:event: error\ndata: "+errorEnv+"\n\n"), rule: RuleErrorEvent, wantChunk: 2},
		{name: "DONE on error stream", raw: frame(role, "RAW:event: error\ndata: "+errorEnv+"\n\n", doneEv), opt: wantErr, rule: RuleErrorEvent},
		{name: "DONE instead of error", raw: frame(role, doneEv), opt: wantErr, rule: RuleDone},
		{name: "no error event", raw: frame(role, text), opt: wantErr, rule: RuleErrorEvent},
		{name: "error without code key", raw: frame(role, `RAW:event: error
data: {"error":{"message":"m","type":"server_error","param":null}}

`), opt: wantErr, rule: RuleErrorEvent},
		{name: "error without wrapper", raw: frame(role, "RAW:event: error\ndata: {\"message\":\"m\"}\n\n"), opt: wantErr, rule: RuleErrorEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sum, err := CheckStream(tt.raw, tt.opt)
			if sum == nil {
				t.Fatal("nil Summary")
			}
			var v *Violation
			if !errors.As(err, &v) {
				t.Fatalf("err = %v, want a *Violation of rule %s\nstream:\n%s", err, tt.rule, tt.raw)
			}
			if v.Rule != tt.rule {
				t.Fatalf("rule %s (%v), want %s", v.Rule, err, tt.rule)
			}
			if tt.wantChunk != 0 && v.Chunk != tt.wantChunk {
				t.Fatalf("chunk %d (%v), want %d", v.Chunk, err, tt.wantChunk)
			}
			if !strings.Contains(err.Error(), string(tt.rule)) {
				t.Fatalf("message %q does not name the rule", err)
			}
		})
	}
}
