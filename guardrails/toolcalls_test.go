package guardrails

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/wiretest"
)

// A stream's client tool calls are held until their choice ends and go
// out judged, each whole in a chunk of its own, before the finish on a
// chunk of its own: an address split across interleaved fragments is
// redacted, and the stream keeps the wire's framing.
func TestStreamHoldsToolCalls(t *testing.T) {
	t.Parallel()
	head := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	tail := `,"logprobs":null,"finish_reason":null}]}`
	chunks := [][]byte{
		[]byte(head + `{"role":"assistant","content":"Hi "}` + tail),
		[]byte(head + `{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"mail","arguments":""}}]}` + tail),
		[]byte(head + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"to\":\"bob@ex"}}]}` + tail),
		[]byte(head + `{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"time","arguments":"{}"}}]}` + tail),
		[]byte(head + `{"tool_calls":[{"index":0,"function":{"arguments":"ample.com\"}"}}]}` + tail),
		[]byte(head + `{},"logprobs":null,"finish_reason":"tool_calls"}]}`),
	}
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16})
	s := newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{g}, nil)
	var raw strings.Builder
	var calls []string
	for _, c := range mustDrain(t, s) {
		raw.WriteString("data: " + string(c) + "\n\n")
		if tc := gjson.GetBytes(c, "choices.0.delta.tool_calls"); tc.Exists() {
			calls = append(calls, tc.Raw)
		}
	}
	raw.WriteString("data: [DONE]\n\n")
	if _, err := wiretest.CheckStream([]byte(raw.String()), wiretest.Options{}); err != nil {
		t.Fatalf("%v\n%s", err, raw.String())
	}
	want := []string{
		`[{"index":0,"id":"call_a","type":"function","function":{"name":"mail","arguments":"{\"to\":\"[REDACTED]\"}"}}]`,
		`[{"index":1,"id":"call_b","type":"function","function":{"name":"time","arguments":"{}"}}]`,
	}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls\n%s\nwant\n%s\nstream\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"), raw.String())
	}
}

// FuzzStreamToolCalls: for any arguments cut into any fragments of two
// interleaved calls, a stream sends each call once, whole, judged as the
// JSON answer judges it, in valid framing.
func FuzzStreamToolCalls(f *testing.F) {
	f.Add(`{"to":"bob@example.com"}`, `{"tz":"CET"}`, []byte{3, 1, 4})
	f.Add(`{"a":"secret"}`, ``, []byte{1})
	f.Add("\"é\\u0040\"", `[`, []byte{})
	guards := []*guard{
		mustGuard(f, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16}),
		mustGuard(f, config.Guardrail{Name: "q", Kind: "regex", Action: "redact", Patterns: []string{`secret"`}}),
	}
	head := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	tail := `,"logprobs":null,"finish_reason":null}]}`
	f.Fuzz(func(t *testing.T, a, b string, cuts []byte) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		args := []string{a, b}
		chunks := [][]byte{[]byte(head + `{"role":"assistant","content":null}` + tail)}
		for k := range args {
			chunks = append(chunks, []byte(head+fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":"f","arguments":""}}]}`, k, k)+tail))
		}
		rest := []string{a, b}
		for n := 0; rest[0] != "" || rest[1] != ""; n++ {
			k := n % 2
			if rest[k] == "" {
				k = 1 - k
			}
			m := len(rest[k])
			if n < len(cuts) {
				m = min(int(cuts[n]%8)+1, m)
			}
			for m < len(rest[k]) && !utf8.RuneStart(rest[k][m]) {
				m++
			}
			chunks = append(chunks, []byte(head+fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, k, mustJSON(rest[k][:m]))+tail))
			rest[k] = rest[k][m:]
		}
		chunks = append(chunks, []byte(head+`{},"logprobs":null,"finish_reason":"tool_calls"}]}`))
		var want []string
		var wantErr bool
		for _, x := range args {
			out, err := judgeArgs(newChecker(context.Background(), guards, nil), []byte(x))
			wantErr = wantErr || err != nil
			want = append(want, string(out))
		}
		s := newStream(context.Background(), &sliceStream{chunks: chunks}, guards, nil)
		var raw strings.Builder
		var got []string
		for {
			c, err := s.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if !wantErr {
					t.Fatalf("error %v; want arguments %q", err, want)
				}
				return
			}
			raw.WriteString("data: " + string(c) + "\n\n")
			if tc := gjson.GetBytes(c, "choices.0.delta.tool_calls"); tc.Exists() {
				got = append(got, tc.Get("0.function.arguments").Str)
			}
		}
		if wantErr {
			t.Fatalf("no error; arguments %q", got)
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("arguments %q, want %q", got, want)
		}
		if _, err := wiretest.CheckStream([]byte(raw.String()+"data: [DONE]\n\n"), wiretest.Options{}); err != nil {
			t.Fatalf("%v\n%s", err, raw.String())
		}
	})
}

// Text on both sides of a held tool call is one text, as the JSON answer's
// content is: judged in two pieces (the call ended the text), an address
// split by the call went out unredacted on the stream only.
func TestStreamTextAcrossHeldCall(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16})
	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","content":"Mail bob@"}` + chunkTail),
		[]byte(chunkHead + `{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}` + chunkTail),
		[]byte(chunkHead + `{"content":"example.com now"}` + chunkTail),
		[]byte(chunkHead + `{},"logprobs":null,"finish_reason":"tool_calls"}]}`),
	}
	got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{g}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var raw strings.Builder
	content := ""
	for _, c := range got {
		raw.WriteString("data: " + string(c) + "\n\n")
		content += gjson.GetBytes(c, "choices.0.delta.content").Str
	}
	ans := `{"choices":[{"index":0,"message":{"role":"assistant","content":"Mail bob@example.com now","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`
	out, err := checkAnswer(newChecker(context.Background(), []*guard{g}, nil), []byte(ans), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := gjson.GetBytes(out, "choices.0.message.content").Str; content != want || want != "Mail [REDACTED] now" {
		t.Fatalf("stream content %q, JSON %q\n%s", content, want, raw.String())
	}
	if _, err := wiretest.CheckStream([]byte(raw.String()+"data: [DONE]\n\n"), wiretest.Options{}); err != nil {
		t.Fatalf("%v\n%s", err, raw.String())
	}
}

// Some upstreams send every parallel call at index 0, each whole with its
// own id (wire's decoder keeps them apart). Held by index alone, the calls
// became one: the first id and name, both argument objects concatenated.
// A new id at an index in use is a new call, and the calls go out numbered
// densely in the order they are sent.
func TestStreamHeldCallsAtOneIndex(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16})
	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","content":null}` + chunkTail),
		[]byte(chunkHead + `{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"mail","arguments":"{\"to\":\"bob@example.com\"}"}}]}` + chunkTail),
		[]byte(chunkHead + `{"tool_calls":[{"index":0,"id":"b","type":"function","function":{"name":"time","arguments":"{}"}}]}` + chunkTail),
		[]byte(chunkHead + `{},"logprobs":null,"finish_reason":"tool_calls"}]}`),
	}
	got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{g}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var raw strings.Builder
	var calls []string
	for _, c := range got {
		raw.WriteString("data: " + string(c) + "\n\n")
		if tc := gjson.GetBytes(c, "choices.0.delta.tool_calls"); tc.Exists() {
			calls = append(calls, tc.Raw)
		}
	}
	want := []string{
		`[{"index":0,"id":"a","type":"function","function":{"name":"mail","arguments":"{\"to\":\"[REDACTED]\"}"}}]`,
		`[{"index":1,"id":"b","type":"function","function":{"name":"time","arguments":"{}"}}]`,
	}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls\n%s\nwant\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	if _, err := wiretest.CheckStream([]byte(raw.String()+"data: [DONE]\n\n"), wiretest.Options{}); err != nil {
		t.Fatalf("%v\n%s", err, raw.String())
	}
}

// "tool_calls":null, "function_call":null or "tool_calls":[] on every
// delta, as some OpenAI-compatible servers send, are no calls: the text
// around them is one text (an address split across chunks is redacted),
// and no bogus call goes out before the finish.
func TestStreamNullToolCallsAreNoCalls(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	for _, f := range []string{`"tool_calls":null`, `"function_call":null`, `"tool_calls":[]`, `"tool_calls":[null]`} {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			chunks := [][]byte{
				[]byte(chunkHead + `{"role":"assistant","content":"mail bob@",` + f + `}` + chunkTail),
				[]byte(chunkHead + `{"content":"example.com now",` + f + `}` + chunkTail),
				[]byte(chunkHead + `{},"finish_reason":"stop"}]}`),
			}
			got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil))
			if err != nil {
				t.Fatal(err)
			}
			var text string
			for _, c := range got {
				text += gjson.GetBytes(c, "choices.0.delta.content").Str
				if gjson.GetBytes(c, "choices.0.delta.tool_calls.0").IsObject() {
					t.Errorf("a call went out: %s", c)
				}
			}
			if text != "mail [REDACTED] now" {
				t.Errorf("text %q, want the address redacted", text)
			}
		})
	}
}

// The logprobs of a chunk of tool-call deltas are the arguments' tokens:
// they never go out as the content's, where they would carry what a
// redaction took out of the arguments.
func TestStreamToolCallLogprobsDropped(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	item := func(s string) string {
		return `{"token":"` + strings.ReplaceAll(s, `"`, `\"`) + `","logprob":-1,"top_logprobs":[]}`
	}
	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","content":"ok "},"logprobs":{"content":[` + item("ok ") + `]},"finish_reason":null}]}`),
		[]byte(chunkHead + `{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{\"e\":\"bob@example.com\"}"}}]},"logprobs":{"content":[` + item(`{"e":"bob@example.com"}`) + `]},"finish_reason":null}]}`),
		[]byte(chunkHead + `{},"logprobs":null,"finish_reason":"tool_calls"}]}`),
	}
	got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var toks []string
	for _, c := range got {
		if strings.Contains(string(c), "bob@example.com") {
			t.Errorf("the address went out: %s", c)
		}
		gjson.GetBytes(c, "choices.0.logprobs.content.#.token").ForEach(func(_, v gjson.Result) bool {
			toks = append(toks, v.Str)
			return true
		})
	}
	if fmt.Sprint(toks) != "[ok ]" {
		t.Errorf("content tokens %q, want the text's only", toks)
	}
}

// Arguments that are not a JSON string (an object, as some servers send)
// are judged as their JSON text and go out as a string of it, in a JSON
// answer and in a stream alike.
func TestNonStringArgumentsJudged(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	const want = `{"e":"[REDACTED]"}`
	body := []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":{"e":"bob@example.com"}}}]},"finish_reason":"tool_calls"}]}`)
	out, err := checkAnswer(newChecker(context.Background(), []*guard{pii}, nil), body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out == nil {
		out = body
	}
	if got := gjson.GetBytes(out, "choices.0.message.tool_calls.0.function.arguments"); got.Type != gjson.String || got.Str != want {
		t.Errorf("JSON answer's arguments %s, want %q", got.Raw, want)
	}
	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","tool_calls":[{"index":0,"id":"x","type":"function","function":{"name":"f","arguments":{"e":"bob@example.com"}}}]}` + chunkTail),
		[]byte(chunkHead + `{},"finish_reason":"tool_calls"}]}`),
	}
	got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var args string
	for _, c := range got {
		if a := gjson.GetBytes(c, "choices.0.delta.tool_calls.0.function.arguments"); a.Exists() {
			args += a.Str
		}
	}
	if args != want {
		t.Errorf("stream's arguments %q, want %q", args, want)
	}
}
