package toolloop

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/wire"
	"github.com/llmgw/gateway/wiretest"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// Native fuzz targets for what parses model-produced bytes in the loop: the
// tool-call delta accumulator, the tool-argument path (name resolution,
// empty-argument defaulting, JSON parsing and schema validation, then the
// executor), and the calculator. Each asserts invariants, not only the
// absence of panics. Run one with
//
//	go test -run XXX -fuzz FuzzDeltaRoundTrip -fuzztime 30s ./toolloop/

// deltaSeeds are tool_calls delta sequences, one entry per line, in the
// shapes upstreams really send.
var deltaSeeds = []string{
	// OpenAI: header with id, type and name, then argument fragments.
	`{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}
{"index":0,"function":{"arguments":"{\"ci"}}
{"index":0,"function":{"arguments":"ty\":\"Oslo\"}"}}`,
	// Two calls, fragments interleaved by index.
	`{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":""}}
{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":""}}
{"index":1,"function":{"arguments":"{}"}}
{"index":0,"function":{"arguments":"{\"x\":1}"}}`,
	// No index (some OpenAI-compatible servers): a new id starts a call.
	`{"id":"a","function":{"name":"f","arguments":"{"}}
{"function":{"arguments":"}"}}
{"id":"b","function":{"name":"g","arguments":"{}"}}`,
	// Whole calls, object arguments, a repeated name, a split name.
	`{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":{"x":[1,2]}}}
{"index":1,"id":"b","function":{"name":"get_"}}
{"index":1,"function":{"name":"time","arguments":"{}"}}
{"index":1,"function":{"name":"get_time"}}`,
	// Quirks: negative index, huge index, junk entries, unicode arguments.
	`{"index":-1,"id":"a","function":{"name":"f","arguments":"{\"s\":\"é🎉\\n\"}"}}
{"index":99999999999}
1
"x"
{"function":"f"}
{"index":"zero","id":7}`,
}

// FuzzDeltaRoundTrip feeds a sequence of tool_calls entries (one JSON value
// a line) to the accumulator. Invariants: add reports the call it touched
// and whether that call's arguments grew; no more than maxCalls calls and
// no two with one upstream index; with gateway ids every call gets a fresh
// unguessable id and the same name and arguments; and re-sending the
// accumulated calls in the normalized form the gateway streams (one header
// delta, then fragments cut at rune boundaries) accumulates to the same
// calls.
func FuzzDeltaRoundTrip(f *testing.F) {
	for i, s := range deltaSeeds {
		f.Add([]byte(s), uint8(i+1))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		lines := bytes.Split(data, []byte("\n"))
		var a, g accumulator
		g.gatewayIDs = true
		far := false
		defer func() {
			// A far index always overflows; otherwise only a call past
			// maxCalls does.
			if far && !a.overflow || a.overflow && !far && len(a.calls) < maxCalls {
				t.Fatalf("overflow %v with a far index %v and %d calls", a.overflow, far, len(a.calls))
			}
		}()
		for _, ln := range lines {
			if !gjson.ValidBytes(ln) {
				continue // entries come from chunks checked as JSON
			}
			e := gjson.ParseBytes(ln)
			if i := e.Get("index"); e.IsObject() && i.Type == gjson.Number && i.Int() > maxCallIndex {
				far = true
			}
			before := make(map[*call]int, len(a.calls))
			for _, c := range a.calls {
				before[c] = len(c.args)
			}
			c, frag := a.add(e)
			if c != nil {
				if !containsCall(a.calls, c) {
					t.Fatalf("add returned a call it does not hold (%s)", ln)
				}
				if grew := len(c.args) > before[c]; frag != grew {
					t.Fatalf("fragment %v but arguments grew %v (%s)", frag, grew, ln)
				}
			}
			g.add(e)
		}
		if len(a.calls) > maxCalls {
			t.Fatalf("%d calls", len(a.calls))
		}
		seen := map[int]bool{}
		for _, c := range a.calls {
			if seen[c.upIndex] {
				t.Fatalf("two calls with upstream index %d", c.upIndex)
			}
			seen[c.upIndex] = true
		}
		if len(g.calls) != len(a.calls) {
			t.Fatalf("gateway ids changed the calls: %d vs %d", len(g.calls), len(a.calls))
		}
		ids := map[string]bool{}
		for i, c := range g.calls {
			if c.name != a.calls[i].name || !bytes.Equal(c.args, a.calls[i].args) {
				t.Fatalf("gateway ids changed call %d", i)
			}
			if c.id == "" && a.calls[i].id != "" || c.id != "" && (!strings.HasPrefix(c.id, "call_") || ids[c.id]) {
				t.Fatalf("gateway id %q for upstream id %q", c.id, a.calls[i].id)
			}
			ids[c.id] = true
		}

		// Round trip through the normalized form the re-streamer sends
		// (the re-streamer's encoder, wire.ChatSSE).
		var b accumulator
		enc := wire.NewChatSSE(wire.Header{ID: "id", Model: "m"})
		for _, c := range a.calls {
			if !utf8.ValidString(c.name) || !utf8.ValidString(c.upID) || !utf8.Valid(c.args) {
				return // re-encoding replaces invalid UTF-8: not a round trip
			}
			b.add(gjson.GetBytes(enc.Encode(nil, &wire.Event{Kind: wire.CallHeader, ID: c.upID, Name: c.name}), "choices.0.delta.tool_calls.0"))
			for _, frag := range fragments(c.args, int(cut%16)+1) {
				b.add(gjson.GetBytes(enc.Encode(nil, &wire.Event{Kind: wire.CallArgs, Text: frag}), "choices.0.delta.tool_calls.0"))
			}
		}
		if len(b.calls) != len(a.calls) {
			t.Fatalf("round trip: %d calls, want %d", len(b.calls), len(a.calls))
		}
		for i, c := range b.calls {
			w := a.calls[i]
			if c.upID != w.upID || c.name != w.name || !bytes.Equal(c.args, w.args) {
				t.Fatalf("round trip call %d: %q %q %q, want %q %q %q", i, c.upID, c.name, c.args, w.upID, w.name, w.args)
			}
		}
	})
}

func containsCall(calls []*call, c *call) bool {
	for _, x := range calls {
		if x == c {
			return true
		}
	}
	return false
}

// fragments cuts b into pieces of about n bytes at rune boundaries.
func fragments(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		k := min(n, len(b))
		for k < len(b) && !utf8.RuneStart(b[k]) {
			k++
		}
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

// FuzzCallsFromMessage reads message.tool_calls of a non-streamed turn:
// one call per object entry (up to maxCalls+1), its name and arguments as sent
// (a string's value, or other JSON as it is), as gjson's paths find them in
// valid JSON (what reaches the loop: the upstream's body is checked first).
// Anything else must only not panic.
func FuzzCallsFromMessage(f *testing.F) {
	for _, s := range []string{
		`[{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}}]`,
		`[{"id":"a","function":{"name":"f","arguments":{"x":1}}},{"id":"b","function":{"name":"g"}}]`,
		`[{"id":"a","id":"b","function":{"name":"f"},"function":{"name":"g","arguments":"{}"},"function":[1]}]`,
		`[1,"x",null,{"function":"f"},{}]`,
		`{"id":"a"}`, `[]`, `null`, `[`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tc := gjson.Parse(s)
		calls := callsFromMessage(tc, false)
		if !gjson.Valid(s) {
			return
		}
		if !tc.IsArray() {
			if calls != nil {
				t.Fatalf("calls from a non-array %s", s)
			}
			return
		}
		var objs []gjson.Result
		tc.ForEach(func(_, v gjson.Result) bool {
			if v.IsObject() {
				objs = append(objs, v)
			}
			return len(objs) <= maxCalls
		})
		if len(calls) != len(objs) {
			t.Fatalf("%d calls from %d objects", len(calls), len(objs))
		}
		for i, c := range calls {
			v := objs[i]
			want := v.Get("function.arguments")
			args := want.Raw
			if want.Type == gjson.String {
				args = want.String()
			}
			if c.name != v.Get("function.name").String() || c.id != v.Get("id").String() || string(c.args) != args {
				t.Fatalf("call %d = %q %q %q from %s", i, c.id, c.name, c.args, v.Raw)
			}
		}
		for _, c := range callsFromMessage(tc, true) {
			if !strings.HasPrefix(c.id, "call_") {
				t.Fatalf("gateway id %q", c.id)
			}
		}
	})
}

// FuzzToolArguments runs model-produced tool names and arguments through
// the whole function layer (name resolution, empty arguments read as {},
// JSON and schema validation, the calculator). Invariants: a call never
// fails the request, the result is {"status":"ok"|"error",...} JSON; an ok
// result means the arguments were a JSON object (or empty) matching the
// schema and a name within two edits of "calculator"; an invalid-arguments
// error names a field that is a JSON pointer; the calculator's ok results
// are finite numbers.
func FuzzToolArguments(f *testing.F) {
	for _, s := range [][2]string{
		{"calculator", `{"expression":"6*7"}`},
		{"Calculator", `{"expression":"(1+2)^3 / .5"}`},
		{"calculater", ` {"expression": "-2^2"} `},
		{"calculator", ``},
		{"calculator", `{}`},
		{"calculator", `{"expression":7}`},
		{"calculator", `{"expression":"1/0"}`},
		{"calculator", `{"expression":"1","extra":true}`},
		{"calculator", `{"expression":"1"`},
		{"calculator", `[{"expression":"1"}]`},
		{"calculator", `{"expression":"1","expression":"2"}`},
		{"calc", `{"expression":"1"}`},
		{"calculator", "{\"expression\":\"\xff\"}"},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	l := newLoop(f, []config.Tool{calcTool}, nil)
	f.Fuzz(func(t *testing.T, name string, args []byte) {
		res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: name, Arguments: args})
		if err != nil || res == nil {
			t.Fatalf("the call failed: %v", err)
		}
		r := gjson.ParseBytes(res.Content)
		if !gjson.ValidBytes(res.Content) || !r.IsObject() {
			t.Fatalf("result is not a JSON object: %s", res.Content)
		}
		switch r.Get("status").Str {
		case "ok":
			if res.IsError {
				t.Fatalf("ok result flagged as error: %s", res.Content)
			}
			if editDistance(strings.ToLower(name), "calculator", 3) > 2 {
				t.Fatalf("name %q ran the calculator", name)
			}
			trimmed := bytes.TrimSpace(args)
			if len(trimmed) > 0 && (!json.Valid(trimmed) || trimmed[0] != '{') {
				t.Fatalf("arguments %q were accepted", args)
			}
			v := r.Get("data.result")
			if v.Type != gjson.Number || math.IsInf(v.Num, 0) || math.IsNaN(v.Num) {
				t.Fatalf("calculator result %s", res.Content)
			}
		case "error":
			if !res.IsError || r.Get("error.message").Str == "" {
				t.Fatalf("error result %s", res.Content)
			}
			if r.Get("error.type").Str == "invalid_arguments" {
				if f := r.Get("error.field"); f.Exists() && !strings.HasPrefix(f.Str, "/") {
					t.Fatalf("field %q is not a JSON pointer", f.Str)
				}
			}
		default:
			t.Fatalf("result %s", res.Content)
		}
	})
}

// FuzzEditDistance: the distance behind near-miss tool names is a metric
// capped at limit, and cheap inputs stay cheap.
func FuzzEditDistance(f *testing.F) {
	for _, s := range [][2]string{{"calculator", "calculater"}, {"", "x"}, {"get_weather", "getweather"}, {"é", "e"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		const limit = 3
		d := editDistance(a, b, limit)
		if d < 0 || d > limit || d != editDistance(b, a, limit) {
			t.Fatalf("d(%q,%q) = %d, d(b,a) = %d", a, b, d, editDistance(b, a, limit))
		}
		if (d == 0) != (a == b) {
			t.Fatalf("d(%q,%q) = %d", a, b, d)
		}
		if diff := len(a) - len(b); d < min(max(diff, -diff), limit) {
			t.Fatalf("d(%q,%q) = %d below the length difference", a, b, d)
		}
	})
}

// FuzzRestream runs one upstream round of arbitrary chunks (one a line)
// through the streaming loop, with the client's get_weather tool and the
// calculator as a server tool (a second round answers "done"). The stream
// the client gets must pass the wire checker and openai-go's accumulator,
// and its tool calls must be exactly the round's get_weather calls (name
// and arguments, in order), as the loop's own accumulator read them.
func FuzzRestream(f *testing.F) {
	join := func(chunks ...[]string) []byte {
		var all []string
		for _, c := range chunks {
			all = append(all, c...)
		}
		return []byte(strings.Join(all, "\n"))
	}
	f.Add(join(toolRound("u1", "c1", "get_weather", `{"city":"Oslo"}`, 3, 4)))
	f.Add(join(toolRound("u1", "c1", "calculator", `{"expression":"6*7"}`, 3, 4)))
	f.Add(join([]string{
		chunk("u1", `{"role":"assistant","content":"Let me see. "}`, ""),
		chunk("u1", callHeader(0, "a", "get_weather"), ""),
		chunk("u1", callHeader(1, "b", "calculator"), ""),
		chunk("u1", callFrag(1, `{"expression":"1+1"}`), ""),
		chunk("u1", callFrag(0, `{"city":"Pa`), ""),
		chunk("u1", callFrag(0, `ris"}`), ""),
		chunk("u1", `{}`, "tool_calls"),
	}))
	f.Add(join([]string{chunk("u1", `{"content":"{\"city\":\"Oslo\"}"}`, ""), chunk("u1", callWhole(0, "a", "get_weather", `{"city":"Oslo"}`), ""), ": keep-alive", chunk("u1", `{}`, "tool_calls")}))
	f.Add(join(textRound("u1", "just text", 1, 1)))
	f.Add(join([]string{
		withLogprobs(chunk("u1", `{"content":" "}`, ""), tokenLP(" ")),
		withLogprobs(chunk("u1", `{"content":"{\"a\":1}"}`, ""), `{"content":[{"token":"x"}],"refusal":[]}`),
		withLogprobs(chunk("u1", `{"refusal":"no"}`, ""), `{"content":[{"token":"y"`),
		chunk("u1", `{}`, "stop"),
	}))
	// Rounds the loop cannot follow: an error event, never an empty answer.
	f.Add(join([]string{strings.Replace(chunk("u1", `{"content":"hi"}`, ""), `"index":0`, `"index":1`, 1), chunk("u1", `{}`, "stop")}))
	f.Add(join([]string{chunk("u1", callWhole(1<<20+1, "a", "get_weather", `{}`), ""), chunk("u1", `{}`, "tool_calls")}))
	l := newLoop(f, []config.Tool{calcTool}, nil)
	const body = `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
	f.Fuzz(func(t *testing.T, data []byte) {
		var lines []string
		for _, ln := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(ln, ":") {
				ln = string(pipeline.KeepAlive) // the sse reader drops the upstream's comments; model layers yield only this one
			} else if ln != "" && !(gjson.Valid(ln) && gjson.Parse(ln).IsObject()) {
				continue // a provider's stream hands out JSON objects only, checked (TestChunkNotAnObject)
			}
			lines = append(lines, ln)
		}
		m := &fakeModel{turns: []turnFn{always(lines, ""), always(textRound("u2", "done", 1, 1), "")}}
		resp, err := l.Chat(context.Background(), request(m, true, body))
		if err != nil {
			t.Fatal(err)
		}
		raw := sse(t, resp.Stream)
		all, bad := upstreamCalls(lines)
		if bad {
			// No choice 0 in a round with choices, or a call index out of
			// range: the round fails (upstream_malformed).
			wiretest.CheckStreamAll(t, raw, wiretest.Options{WantError: true}, nil)
			return
		}
		sum := checkStream(t, raw, false)

		var want []*call
		var last []bool // the round's last call: never closed early
		for j, c := range all {
			if c.name == "get_weather" {
				want = append(want, c)
				last = append(last, j == len(all)-1)
			}
		}
		if len(sum.ToolCalls) != len(want) {
			t.Fatalf("client saw %d get_weather calls, the round had %d", len(sum.ToolCalls), len(want))
		}
		for i, c := range sum.ToolCalls {
			// Invalid UTF-8 reaches the client as U+FFFD, byte by byte. A
			// call is closed for the client when a later call has started
			// and its arguments are valid JSON (the SDKs need one call after
			// the other): fragments after that are not shown. Real
			// arguments (one JSON object) never grow once valid.
			args := gjson.ParseBytes(appendJSONString(nil, want[i].args)).String()
			shown := c.Arguments == args || !last[i] && strings.HasPrefix(args, c.Arguments) && gjson.Valid(c.Arguments)
			if c.Name != want[i].name || !shown {
				t.Fatalf("client call %d = %s(%q), want %s(%q)", i, c.Name, c.Arguments, want[i].name, want[i].args)
			}
		}
	})
}

// upstreamCalls accumulates the tool calls of choice 0 of a round's chunks,
// reading each chunk the way loopStream.onChunk does; bad reports a round
// the loop must fail: chunks with choices but never one at index 0, or a
// call index past maxCallIndex.
func upstreamCalls(lines []string) (_ []*call, bad bool) {
	var a accumulator
	stray, zero := false, false
	defer func() { bad = bad || stray && !zero }()
	for _, ln := range lines {
		if ln == "" || ln[0] == ':' {
			continue
		}
		var choices gjson.Result
		gjson.Parse(ln).ForEach(func(k, v gjson.Result) bool {
			if k.Str == "choices" {
				choices = v
			}
			return true
		})
		choice, s := choiceZero(choices)
		stray = stray || s
		if !choice.IsObject() {
			continue
		}
		zero = true
		choice.Get("delta").ForEach(func(k, v gjson.Result) bool {
			if k.Str == "tool_calls" {
				v.ForEach(func(_, e gjson.Result) bool {
					if i := e.Get("index"); e.IsObject() && i.Type == gjson.Number && i.Int() > maxCallIndex {
						bad = true
					}
					a.add(e)
					return true
				})
			}
			return true
		})
		if bad {
			return a.calls, true
		}
	}
	return a.calls, false
}

// FuzzReadCompletion: the one-pass reader of a round's chat.completion
// finds what gjson's paths find, for any JSON an upstream sends, and never
// panics on anything else.
func FuzzReadCompletion(f *testing.F) {
	for _, s := range []string{
		completion("up", "hi", "", "stop", 3, 4),
		completion("up", "", `[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]`, "tool_calls", 1, 2),
		`{"id":"x","id":"y","choices":[{"message":{"content":"a","content":"b","refusal":null,"reasoning":"r"}},{}],"choices":[]}`,
		`{"choices":{"0":{"finish_reason":"stop","message":{"reasoning_content":"t"}}}}`,
		withLogprobs(`{"service_tier":"default","system_fingerprint":"fp","choices":[{"index":0,"message":{"content":"Hi"},"logprobs":null,"finish_reason":"stop"}]}`, tokenLP("Hi")),
		`{"choices":[{"index":1,"message":{"content":"hi"},"finish_reason":"stop"}]}`, `{"choices":[{"index":2},{"index":"0"}],"choices":[1]}`,
		`{"choices":[{"message":[1,2]}]}`, `{"choices":[{}],"choices":[{"message":{}},{"message":{"content":"x"}}],"choices":[{"message":{"content":"y"}}]}`, `{"choices":{"0":{},"0":{"finish_reason":"stop"}}}`, `[]`, `"s"`, `{"choices":[1]}`, `{"usage":null,"created":"7"}`,
	} {
		f.Add([]byte(s))
	}
	paths := []string{"id", "created", "model", "usage", "choices.0.finish_reason", "choices.0.message.content", "choices.0.message.tool_calls",
		"choices.0.message." + sideTexts[0], "choices.0.message." + sideTexts[1], "choices.0.message." + sideTexts[2],
		"system_fingerprint", "service_tier", "choices.0.logprobs"}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := readCompletion(body)
		if !gjson.ValidBytes(body) {
			return
		}
		// stray: a choices array holds a choice, and none of them (in any
		// choices key) is at index 0.
		stray, zero := false, false
		eachKey(gjson.ParseBytes(body), "choices", func(ch gjson.Result) {
			if !ch.IsArray() {
				return
			}
			for _, x := range ch.Array() {
				if x.Get("index").Int() == 0 {
					zero = true
					break
				}
				stray = stray || x.IsObject()
			}
		})
		if want := stray && !zero; c.stray != want {
			t.Fatalf("stray %v, want %v", c.stray, want)
		}
		if c.stray {
			return // no choice to read; gjson's choices.0 is another one
		}
		got := []gjson.Result{c.id, c.created, c.model, c.usage, c.finish, c.content, c.toolCalls, c.side[0], c.side[1], c.side[2],
			c.fingerprint, c.tier, c.logprobs}
		for i, want := range gjson.GetManyBytes(body, paths...) {
			if got[i].Type != want.Type || got[i].Raw != want.Raw || got[i].Str != want.Str {
				t.Fatalf("%s: got %s (%v), gjson finds %s (%v)", paths[i], got[i].Raw, got[i].Type, want.Raw, want.Type)
			}
		}
	})
}

// FuzzUsageAdd: a round's usage object adds what wire.ParseChatUsage reads
// of it (nothing for a usage that is not one), and two rounds sum.
func FuzzUsageAdd(f *testing.F) {
	for _, s := range []string{
		`{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":2,"cache_write_tokens":1},"completion_tokens_details":{"reasoning_tokens":3}}`,
		`{"prompt_tokens":1,"prompt_tokens":2,"prompt_tokens_details":{},"prompt_tokens_details":{"cached_tokens":4}}`,
		`null`, `{"total_tokens":"7","completion_tokens_details":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !gjson.ValidBytes(b) {
			return
		}
		r := gjson.ParseBytes(b)
		var got usage
		prompt := got.add(r)
		// One round's usage is written as the gateway reads it, with the
		// upstream's other members; it is valid JSON and reads back as itself.
		if one := got.appendJSON(nil, 1); got.seen {
			back, ok := wire.ParseChatUsage(gjson.ParseBytes(one))
			c, _ := wire.ParseChatUsage(r)
			if c.Total == 0 {
				c.Total = c.Prompt + c.Completion // AppendJSON's total when there was none
			}
			if c.Total > wire.MaxTokenCount {
				c, ok = back, true // a sum past the bound reads back as no count: nothing to compare
			}
			if !jsonvalid.Bytes(one) || !ok || back != c {
				t.Fatalf("one usage %s written as %s (read back %+v, ok %v)", r.Raw, one, back, ok)
			}
		}
		got.add(r)
		want := usage{}
		if c, ok := wire.ParseChatUsage(r); ok {
			want.seen, want.sum = true, c
			want.sum.Add(c)
		}
		if got.seen != want.seen || got.sum != want.sum || prompt*2 != want.sum.Prompt {
			t.Fatalf("one pass %+v (prompt %d), by path %+v", got, prompt, want)
		}
		if want.seen && string(got.appendJSON(nil, 2)) != string(want.sum.AppendJSON(nil)) {
			t.Fatalf("two usages written as %s", got.appendJSON(nil, 2))
		}
	})
}
