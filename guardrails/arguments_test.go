package guardrails

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// drainStream reads s to its end: the chunks, and the error that ended it
// (nil at EOF).
func drainStream(s *stream) ([][]byte, error) {
	var out [][]byte
	for {
		c, err := s.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, append([]byte(nil), c...))
	}
}

// mustDrain is drainStream for a stream that must end well: it fails t on
// an error or on a chunk that is not valid JSON.
func mustDrain(t testing.TB, s *stream) [][]byte {
	t.Helper()
	chunks, err := drainStream(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if !jsonvalid.Bytes(c) {
			t.Fatalf("invalid chunk %s", c)
		}
	}
	return chunks
}

// isContentBlocked reports whether err is the 400 content_blocked envelope.
func isContentBlocked(err error) bool {
	var pe *pipeline.Error
	return errors.As(err, &pe) && pe.Code == pipeline.CodeContentBlocked
}

const (
	chunkHead = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	chunkTail = `,"logprobs":null,"finish_reason":null}]}`
)

// A JSON text's escapes do not hide a value from the pattern guards: the
// decoded text of an escaped string is judged too, at the request stage
// (a history's tool call arguments, chat and pass-through), the response stage (the answer's,
// JSON and stream alike) and the tool_input stage. A redaction rewrites
// the string in place and leaves valid JSON; a block blocks.
func TestArgumentsDecodedStrings(t *testing.T) {
	t.Parallel()
	pii := config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16}
	word := config.Guardrail{Name: "word", Kind: "regex", Action: "block", Patterns: []string{`block phrase`}}
	cases := []struct {
		name string
		g    config.Guardrail
		args string // the arguments' JSON text
		want string // the arguments after the guard, "" for a block
	}{
		{"escaped at sign redacted", pii, `{"to":"bob\u0040example.com","n":1}`, `{"to":"[REDACTED]","n":1}`},
		{"escaped member name redacted", pii, `{"bob\u0040example.com":true}`, `{"[REDACTED]":true}`},
		{"escaped letter blocks", word, `{"q":"\u0062lock phrase"}`, ""},
		{"escaped space blocks", word, `["block\u0020phrase"]`, ""},
		{"not JSON: its text only", word, `{"q":"\u0062lock phrase"`, `{"q":"\u0062lock phrase"`},
		{"plain escapes pass", word, `{"q":"a \"quoted\" \\ line\n"}`, `{"q":"a \"quoted\" \\ line\n"}`},
		// A pattern over the JSON text that matches a number would leave
		// {"card":[REDACTED]}: the values are judged one by one instead,
		// and a redacted number becomes a string.
		{"card number as a JSON number", pii, `{"card":4111111111111111,"n":1}`, `{"card":"[REDACTED]","n":1}`},
		{"phone number in an array", pii, `[4791234567, "call +4791234567", 12]`, `["[REDACTED]", "call [REDACTED]", 12]`},
		{"unescaped string and number", pii, `{"to":"bob@example.com","card":4111111111111111}`, `{"to":"[REDACTED]","card":"[REDACTED]"}`},
		// A match across a value's quote cannot be redacted value by value:
		// the call is withheld, as before.
		{"match across a quote", config.Guardrail{Name: "q", Kind: "regex", Action: "redact", Patterns: []string{`secret"`}},
			`{"name":"secret"}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := mustGuard(t, tc.g)
			ctx := context.Background()
			check := func(stage string, got string, err error) {
				t.Helper()
				switch {
				case tc.want == "" && !isContentBlocked(err):
					t.Errorf("%s: %q, %v; want content_blocked", stage, got, err)
				case tc.want != "" && err != nil:
					t.Errorf("%s: %v", stage, err)
				case tc.want != "" && got != tc.want:
					t.Errorf("%s: %s, want %s", stage, got, tc.want)
				}
			}
			lit := string(mustJSON(tc.args))

			// Request stage: an assistant message's tool call in the history.
			req := `{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":` + lit + `}}]}]}`
			out, err := checkRequest(ctx, newChecker(ctx, []*guard{g}, nil), []byte(req))
			if out == nil {
				out = []byte(req)
			}
			check("request", gjson.GetBytes(out, "messages.0.tool_calls.0.function.arguments").Str, err)

			// Response stage, JSON.
			ans := `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":` + lit + `}}]},"finish_reason":"tool_calls"}]}`
			out, err = checkAnswer(newChecker(ctx, []*guard{g}, nil), []byte(ans), nil)
			if out == nil {
				out = []byte(ans)
			}
			check("answer", gjson.GetBytes(out, "choices.0.message.tool_calls.0.function.arguments").Str, err)

			// Response stage, stream: the arguments in two fragments.
			mid := len(tc.args) / 2
			chunks := [][]byte{
				[]byte(chunkHead + `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":""}}]}` + chunkTail),
				[]byte(chunkHead + `{"tool_calls":[{"index":0,"function":{"arguments":` + string(mustJSON(tc.args[:mid])) + `}}]}` + chunkTail),
				[]byte(chunkHead + `{"tool_calls":[{"index":0,"function":{"arguments":` + string(mustJSON(tc.args[mid:])) + `}}]}` + chunkTail),
				[]byte(chunkHead + `{},"logprobs":null,"finish_reason":"tool_calls"}]}`),
			}
			got, err := drainStream(newStream(ctx, &sliceStream{chunks: chunks}, []*guard{g}, nil))
			var args string
			for _, c := range got {
				args += gjson.GetBytes(c, "choices.0.delta.tool_calls.0.function.arguments").Str
			}
			check("stream", args, err)

			// Request stage of a pass-through call: a native /v1/responses
			// input's function_call item.
			pr := &pipeline.Request{Body: []byte(`{"model":"m","input":[{"type":"function_call","call_id":"a","name":"f","arguments":` + lit + `}]}`)}
			err = (&Engine{def: stages{StageRequest: {g}}}).CheckBody(nil, pr)
			check("pass-through", gjson.GetBytes(pr.Body, "input.0.arguments").Str, err)

			// Tool stage: the arguments a server tool gets.
			eng := &Engine{def: stages{StageToolInput: {g}}}
			g.stage = StageToolInput
			tool, err := eng.checkJSON(ctx, &pipeline.ToolCall{Name: "f"}, StageToolInput, []byte(tc.args))
			if tc.want == "" {
				if err == nil { // a block is the tool's content_blocked error result
					t.Errorf("tool_input: %q, no block", tool)
				}
				return
			}
			if tool == nil {
				tool = []byte(tc.args)
			}
			check("tool_input", string(tool), err)
		})
	}
}

// The tool calls an answer hands the client are held on a stream until
// their choice ends; past maxHeldArgs (all calls together) the answer
// cannot be judged whole: the stream ends with the content_blocked error
// (no finish, so no [DONE] after it) and the JSON answer is the same 400.
func TestToolCallArgumentsBound(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	ctx := context.Background()
	frag := strings.Repeat("x", 32<<10)
	for _, tc := range []struct {
		name    string
		n       int // fragments of 32 KiB, spread over two calls
		blocked bool
	}{
		{"under the bound", maxHeldArgs/len(frag) - 1, false},
		{"over the bound", maxHeldArgs/len(frag) + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chunks := [][]byte{
				[]byte(chunkHead + `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"\""}}]}` + chunkTail),
				[]byte(chunkHead + `{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"f","arguments":"\""}}]}` + chunkTail),
			}
			whole := [2]string{`"`, `"`}
			for k := range tc.n {
				chunks = append(chunks, []byte(chunkHead+fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":"%s"}}]}`, k%2, frag)+chunkTail))
				whole[k%2] += frag
			}
			for k := range whole {
				chunks = append(chunks, []byte(chunkHead+fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":"\""}}]}`, k)+chunkTail))
				whole[k] += `"`
			}
			chunks = append(chunks, []byte(chunkHead+`{},"logprobs":null,"finish_reason":"tool_calls"}]}`))
			got, err := drainStream(newStream(ctx, &sliceStream{chunks: chunks}, []*guard{g}, nil))
			if tc.blocked != isContentBlocked(err) || !tc.blocked && err != nil {
				t.Fatalf("stream: error %v, want blocked %v", err, tc.blocked)
			}
			if tc.blocked {
				for _, c := range got {
					if gjson.GetBytes(c, "choices.0.finish_reason").String() != "" {
						t.Fatalf("a finish before the error: %s", c)
					}
				}
			}
			ans := `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
				`{"id":"a","type":"function","function":{"name":"f","arguments":` + string(mustJSON(whole[0])) + `}},` +
				`{"id":"b","type":"function","function":{"name":"f","arguments":` + string(mustJSON(whole[1])) + `}}]},"finish_reason":"tool_calls"}]}`
			_, err = checkAnswer(newChecker(ctx, []*guard{g}, nil), []byte(ans), nil)
			if tc.blocked != isContentBlocked(err) || !tc.blocked && err != nil {
				t.Fatalf("answer: error %v, want blocked %v", err, tc.blocked)
			}
		})
	}
}

// A legacy function_call and a custom tool's input are the model's words
// as much as a tool call's arguments: judged the same, in a JSON answer and
// a stream (held until the choice ends, sent whole before the finish).
func TestLegacyAndCustomCallsJudged(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16})
	ctx := context.Background()
	cases := []struct {
		name   string
		chunks []string // deltas
		ans    string   // the JSON answer's message
		path   string   // where the arguments are, in a chunk's choice and in the message
		want   string
	}{
		{
			name: "function_call",
			chunks: []string{
				`{"role":"assistant","content":null,"function_call":{"name":"mail","arguments":""}}`,
				`{"function_call":{"arguments":"{\"to\":\"bob@exa"}}`,
				`{"function_call":{"arguments":"mple.com\"}"}}`,
			},
			ans:  `{"role":"assistant","content":null,"function_call":{"name":"mail","arguments":"{\"to\":\"bob@example.com\"}"}}`,
			path: "function_call.arguments",
			want: `{"to":"[REDACTED]"}`,
		},
		{
			name: "custom input",
			chunks: []string{
				`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"c","type":"custom","custom":{"name":"sh","input":""}}]}`,
				`{"tool_calls":[{"index":0,"custom":{"input":"mail bob@exa"}}]}`,
				`{"tool_calls":[{"index":0,"custom":{"input":"mple.com now"}}]}`,
			},
			ans:  `{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"custom","custom":{"name":"sh","input":"mail bob@example.com now"}}]}`,
			path: "tool_calls.0.custom.input",
			want: `mail [REDACTED] now`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var chunks [][]byte
			for _, d := range tc.chunks {
				chunks = append(chunks, []byte(chunkHead+d+chunkTail))
			}
			finish := "function_call"
			if strings.Contains(tc.ans, "tool_calls") {
				finish = "tool_calls"
			}
			chunks = append(chunks, []byte(chunkHead+`{},"logprobs":null,"finish_reason":"`+finish+`"}]}`))
			got, err := drainStream(newStream(ctx, &sliceStream{chunks: chunks}, []*guard{g}, nil))
			if err != nil {
				t.Fatal(err)
			}
			var raw strings.Builder
			var args []string
			for _, c := range got {
				raw.WriteString("data: " + string(c) + "\n\n")
				if a := gjson.GetBytes(c, "choices.0.delta."+tc.path); a.Exists() {
					args = append(args, a.Str)
				}
			}
			if len(args) != 1 || args[0] != tc.want {
				t.Errorf("stream arguments %q, want one %q\n%s", args, tc.want, raw.String())
			}
			ans := `{"choices":[{"index":0,"message":` + tc.ans + `,"finish_reason":"` + finish + `"}]}`
			out, err := checkAnswer(newChecker(ctx, []*guard{g}, nil), []byte(ans), nil)
			if err != nil {
				t.Fatal(err)
			}
			if a := gjson.GetBytes(out, "choices.0.message."+tc.path).Str; a != tc.want {
				t.Errorf("answer arguments %q, want %q", a, tc.want)
			}
		})
	}
}

// The number of calls a stream holds is bounded as their arguments are
// (each keeps its first entry and chunk envelope), the JSON answer alike.
func TestToolCallCountBound(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		n       int
		blocked bool
	}{
		{"at the bound", maxHeldCalls, false},
		{"past the bound", maxHeldCalls + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chunks := [][]byte{[]byte(chunkHead + `{"role":"assistant","content":null}` + chunkTail)}
			var entries []string
			for k := range tc.n {
				chunks = append(chunks, []byte(chunkHead+fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":"c%d","type":"function","function":{"name":"f","arguments":"{}"}}]}`, k, k)+chunkTail))
				entries = append(entries, fmt.Sprintf(`{"id":"c%d","type":"function","function":{"name":"f","arguments":"{}"}}`, k))
			}
			chunks = append(chunks, []byte(chunkHead+`{},"logprobs":null,"finish_reason":"tool_calls"}]}`))
			got, err := drainStream(newStream(ctx, &sliceStream{chunks: chunks}, []*guard{g}, nil))
			if tc.blocked != isContentBlocked(err) || !tc.blocked && err != nil {
				t.Fatalf("stream: error %v, want blocked %v", err, tc.blocked)
			}
			if !tc.blocked && len(got) != tc.n+2 {
				t.Fatalf("stream: %d chunks, want %d", len(got), tc.n+2)
			}
			ans := `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` + strings.Join(entries, ",") + `]},"finish_reason":"tool_calls"}]}`
			_, err = checkAnswer(newChecker(ctx, []*guard{g}, nil), []byte(ans), nil)
			if tc.blocked != isContentBlocked(err) || !tc.blocked && err != nil {
				t.Fatalf("answer: error %v, want blocked %v", err, tc.blocked)
			}
		})
	}
}

// The bound is the answer's, all choices together: a stream that released
// one choice's calls before the next choice's came still counts them, as
// the JSON answer of the same calls does.
func TestToolCallArgumentsBoundOverChoices(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	ctx := context.Background()
	args := string(mustJSON(`"` + strings.Repeat("y", maxHeldArgs*3/5) + `"`))
	head := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":%d,"delta":`
	var chunks [][]byte
	for i := range 2 {
		chunks = append(chunks,
			[]byte(fmt.Sprintf(head, i)+`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":`+args+`}}]}`+chunkTail),
			[]byte(fmt.Sprintf(head, i)+`{},"logprobs":null,"finish_reason":"tool_calls"}]}`))
	}
	if _, err := drainStream(newStream(ctx, &sliceStream{chunks: chunks}, []*guard{g}, nil)); !isContentBlocked(err) {
		t.Errorf("stream: error %v, want content_blocked", err)
	}
	choice := `{"index":%d,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":` + args + `}}]},"finish_reason":"tool_calls"}`
	ans := `{"choices":[` + fmt.Sprintf(choice, 0) + `,` + fmt.Sprintf(choice, 1) + `]}`
	if _, err := checkAnswer(newChecker(ctx, []*guard{g}, nil), []byte(ans), nil); !isContentBlocked(err) {
		t.Errorf("answer: error %v, want content_blocked", err)
	}
}

// A max_length redact cuts a JSON text: the value-by-value redaction
// (keepValid) cannot stand in for a cut, so beside a pattern guard, as
// alone, arguments or a tool's result cut invalid are withheld, not sent
// whole; and arguments after a message's cut too.
func TestMaxLengthCutIsNotUndone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := `{"q":"` + strings.Repeat("a", 44) + `"}`
	afterCut := `{"messages":[{"role":"assistant","content":"` + strings.Repeat("a", 24) +
		`","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"q\":\"secret plan details here\"}"}}]}]}`
	args := `{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":` +
		string(mustJSON(long)) + `}}]}]}`
	for _, withPII := range []bool{false, true} {
		gs := []*guard{mustGuard(t, config.Guardrail{Name: "len", Kind: "max_length", Action: "redact", MaxLength: 10})}
		if withPII {
			gs = append(gs, mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"}))
		}
		for name, req := range map[string]string{"arguments": args, "arguments after a cut": afterCut} {
			out, err := checkRequest(ctx, newChecker(ctx, gs, nil), []byte(req))
			if !isContentBlocked(err) {
				t.Errorf("pii %v, %s: %s, %v; want content_blocked", withPII, name, out, err)
			}
		}
		for _, g := range gs {
			g.stage = StageToolOutput
		}
		eng := &Engine{def: stages{StageToolOutput: gs}}
		res, err := eng.checkJSON(ctx, &pipeline.ToolCall{Name: "f"}, StageToolOutput, []byte(long))
		if err == nil {
			t.Errorf("pii %v, tool_output: %q passed", withPII, res)
		}
	}
}

// Request shapes whose text an upstream reads, each judged at the request
// stage: a custom tool call's input in the history, arguments sent as a
// JSON value (Ollama's form), content as one part object rather than a
// list, and a tool result that is JSON with an escaped value.
func TestRequestShapesJudged(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16})
	word := mustGuard(t, config.Guardrail{Name: "word", Kind: "regex", Action: "block", Patterns: []string{`(?i)project falcon`}})
	ctx := context.Background()
	call := func(c string) string {
		return `{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[` + c + `]}]}`
	}
	for _, tc := range []struct {
		name, body string
		g          *guard
		path, want string // after redaction; want "" for a block
	}{
		{"custom input blocks", call(`{"id":"a","type":"custom","custom":{"name":"f","input":"project falcon"}}`), word, "", ""},
		{"custom input redacted", call(`{"id":"a","type":"custom","custom":{"name":"f","input":"mail bob@example.com"}}`), pii,
			"messages.1.tool_calls.0.custom.input", "mail [REDACTED]"},
		{"object arguments block", call(`{"id":"a","type":"function","function":{"name":"f","arguments":{"q":"Project Falcon"}}}`), word, "", ""},
		{"object arguments redacted", call(`{"id":"a","type":"function","function":{"name":"f","arguments":{"to":"bob@example.com","n":1}}}`), pii,
			"messages.1.tool_calls.0.function.arguments", `{"to":"[REDACTED]","n":1}`},
		// A short text after them: its judging reuses the checker's buffer,
		// which the arguments' edit must not still hold.
		{"object arguments, then a short text", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function",` +
			`"function":{"name":"f","arguments":{"to":"bob@example.com","n":1}}}]},{"role":"user","content":"ZZZZZ"}]}`, pii,
			"messages.0.tool_calls.0.function.arguments", `{"to":"[REDACTED]","n":1}`},
		{"one part object blocks", `{"messages":[{"role":"user","content":{"type":"text","text":"project falcon"}}]}`, word, "", ""},
		{"one part object redacted", `{"messages":[{"role":"user","content":{"type":"text","text":"bob@example.com"}}]}`, pii,
			"messages.0.content.text", "[REDACTED]"},
		{"escaped tool result redacted", `{"messages":[{"role":"tool","tool_call_id":"a","content":"{\"a\":\"bob\\u0040example.com\"}"}]}`, pii,
			"messages.0.content", `{"a":"[REDACTED]"}`},
		{"plain tool result redacted", `{"messages":[{"role":"tool","tool_call_id":"a","content":"write to bob@example.com"}]}`, pii,
			"messages.0.content", `write to [REDACTED]`},
	} {
		out, err := checkRequest(ctx, newChecker(ctx, []*guard{tc.g}, nil), []byte(tc.body))
		switch {
		case tc.want == "":
			if !isContentBlocked(err) {
				t.Errorf("%s: %s, %v; want content_blocked", tc.name, out, err)
			}
		case err != nil || out == nil:
			t.Errorf("%s: %s, %v", tc.name, out, err)
		default:
			got := gjson.GetBytes(out, tc.path)
			s := got.Str
			if got.Type != gjson.String {
				s = got.Raw
			}
			if s != tc.want || !jsonvalid.Bytes(out) {
				t.Errorf("%s: %s", tc.name, out)
			}
		}
	}
}

// A tool result that is JSON is text to the model: a max_length cut or a
// redaction that leaves it invalid JSON is sent as such, not refused as
// broken arguments would be.
func TestJSONToolResultNeedNotStayJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := `{"rows":"` + strings.Repeat("x", 200) + `"}`
	for _, tc := range []struct {
		g    config.Guardrail
		body string
		want func(string) bool
	}{
		{config.Guardrail{Name: "len", Kind: "max_length", Action: "redact", MaxLength: 50},
			`{"messages":[{"role":"tool","tool_call_id":"a","content":` + string(mustJSON(long)) + `}]}`,
			func(s string) bool { return len(s) < len(long) }},
		{config.Guardrail{Name: "pw", Kind: "regex", Action: "redact", Patterns: []string{`"password":\s*"[^"]*"`}},
			`{"messages":[{"role":"tool","tool_call_id":"a","content":"{\"user\":\"a\",\"password\":\"hunter2\"}"}]}`,
			func(s string) bool { return !strings.Contains(s, "hunter2") }},
	} {
		out, err := checkRequest(ctx, newChecker(ctx, []*guard{mustGuard(t, tc.g)}, nil), []byte(tc.body))
		if err != nil || out == nil || !tc.want(gjson.GetBytes(out, "messages.0.content").Str) {
			t.Errorf("%s: %v %s", tc.g.Name, err, out)
		}
	}
}

// A match split across content parts is found when a part before it was
// redacted too: the judged texts kept for the joint look were the
// checker's reused buffer, so a later part's judging overwrote an earlier
// one's, and the split e-mail went out.
func TestAcrossPartsAfterARedaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gs := []*guard{
		mustGuard(t, config.Guardrail{Name: "word", Kind: "regex", Action: "redact", Patterns: []string{`secret-[0-9]+`}}),
		mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16}),
	}
	body := `{"messages":[{"role":"user","content":[{"type":"text","text":"secret-1 ` + strings.Repeat("a", 40) + `"},` +
		`{"type":"text","text":"secret-2 zzbob@"},{"type":"text","text":"example.com"}]}]}`
	out, err := checkRequest(ctx, newChecker(ctx, gs, nil), []byte(body))
	if !isContentBlocked(err) {
		t.Fatalf("%v %s: want the split e-mail blocked", err, out)
	}
}
