package toolloop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// checkTooLarge fails t unless err is the loop's error for a round over
// its size limit, as the proxy writes an oversized upstream answer.
func checkTooLarge(t *testing.T, err error) {
	t.Helper()
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != http.StatusBadGateway || pe.Type != pipeline.TypeServer ||
		pe.Code != pipeline.CodeUpstreamResponseTooLarge || !errors.Is(err, errRoundTooLarge) {
		t.Fatalf("error %v (%T), want a 502 %s", err, err, pipeline.CodeUpstreamResponseTooLarge)
	}
}

// An upstream round that never stops sending (tool-call arguments, names,
// text) ends the client's stream with the "response too large" error once
// what the round keeps passes the limit, and what it keeps never exceeds
// the limit by more than the event that passed it. The upstream offers 4x
// the limit and then ends the round: without the bound the round completes.
func TestRoundOverLimitFails(t *testing.T) {
	t.Parallel()
	const limit = 16 << 10
	frag := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name  string
		first string           // the round's first delta
		delta func(int) string // the k-th delta after it
	}{
		{"server call arguments", callHeader(0, "c1", "calculator"),
			func(int) string { return callFrag(0, frag) }},
		{"client call arguments", callHeader(0, "c1", "get_weather"),
			func(int) string { return callFrag(0, frag) }},
		{"interleaved calls", callHeader(0, "c1", "get_weather"),
			func(k int) string {
				if k == 0 {
					return callHeader(1, "c2", "calculator")
				}
				return callFrag(k%2, frag)
			}},
		{"object arguments", callHeader(0, "c1", "get_weather"),
			func(int) string {
				return `{"tool_calls":[{"index":0,"function":{"arguments":{"a":"` + frag + `"}}}]}`
			}},
		{"name fragments", `{"tool_calls":[{"index":0,"id":"c1","function":{"name":"n"}}]}`,
			func(int) string { return `{"tool_calls":[{"index":0,"function":{"name":"` + frag + `"}}]}` }},
		{"text", `{"content":"hello"}`,
			func(int) string { return `{"content":` + q(frag) + `}` }},
		{"held text", `{"content":"{"}`,
			func(int) string { return `{"content":` + q(frag) + `}` }},
		{"whitespace", `{"content":" "}`,
			func(int) string { return `{"content":` + q(strings.Repeat(" ", 1000)) + `}` }},
		// Not kept by the loop, but by a JSON answer of the same request
		// (a probe streamed 300 MB of reasoning into one).
		{"reasoning", `{"reasoning_content":"hmm"}`,
			func(int) string { return `{"reasoning_content":` + q(frag) + `}` }},
		{"refusal", `{"refusal":"no"}`,
			func(int) string { return `{"refusal":` + q(frag) + `}` }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var st *loopStream
			served, closed, ended, prev := 0, false, false, 0
			rounds := 0
			model := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				if rounds++; rounds > 1 { // a next round (only without the bound): an answer
					return (&fakeModel{turns: []turnFn{always(textRound("up-2", "done", 1, 1), "")}}).Chat(context.Background(), r)
				}
				k := -1
				return &pipeline.Response{Stream: &pipeline.StreamFunc{
					NextFunc: func() ([]byte, error) {
						if st != nil && st.kept() > limit+2*prev { // text is kept twice while held
							t.Errorf("the round keeps %d bytes, limit %d, last event %d", st.kept(), limit, prev)
						}
						var ch string
						switch {
						case ended:
							return nil, io.EOF
						case k == -1:
							ch = chunk("up-1", tc.first, "")
						case served > 4*limit:
							ended = true
							ch = chunk("up-1", `{}`, "tool_calls")
						default:
							ch = chunk("up-1", tc.delta(k), "")
						}
						k++
						served += len(ch)
						prev = len(ch)
						return []byte(ch), nil
					},
					CloseFunc: func() { closed = true },
				}}, nil
			})
			l := newLoop(t, []config.Tool{calcTool}, nil)
			l.roundMax = limit
			body := userBody + `,"stream":true,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
			resp, err := l.Chat(context.Background(), request(model, true, body))
			if err != nil {
				t.Fatal(err)
			}
			st = resp.Stream.(*loopStream)
			defer st.Close()
			for {
				_, err = st.Next()
				if err != nil {
					break
				}
			}
			checkTooLarge(t, err)
			if ended || served > 3*limit/2 { // each event has ~200 bytes of envelope
				t.Fatalf("the loop read %d bytes of the round (limit %d)", served, limit)
			}
			if !closed || st.kept() != 0 {
				t.Fatalf("upstream closed %v, the round still keeps %d bytes", closed, st.kept())
			}
			if _, err := st.Next(); err == nil || err == io.EOF {
				t.Fatalf("Next after the error: %v", err)
			}
		})
	}
}

// The agent tool's read of its model's stream has the same bound.
func TestStreamTextOverLimit(t *testing.T) {
	t.Parallel()
	const limit = 4 << 10
	frag := chunk("up-1", `{"content":`+q(strings.Repeat("y", 500))+`}`, "")
	served, closed := 0, false
	s := &pipeline.StreamFunc{
		NextFunc: func() ([]byte, error) {
			if served > 4*limit {
				return nil, io.EOF
			}
			served += 500
			return []byte(frag), nil
		},
		CloseFunc: func() { closed = true },
	}
	text, err := streamText(s, limit)
	var te *ToolError
	if !errors.As(err, &te) || te.Kind != "tool_error" || !errors.Is(te.Detail, errRoundTooLarge) {
		t.Fatalf("streamText = %d bytes, %v; want a tool error for a round too large", len(text), err)
	}
	if served > limit+500 || !closed {
		t.Fatalf("read %d bytes of text (limit %d), closed %v", served, limit, closed)
	}
	n := 0
	if text, err := streamText(&pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
		if n++; n <= 8 {
			return []byte(frag), nil
		}
		return nil, io.EOF
	}}, limit); err != nil || len(text) != 8*500 {
		t.Fatalf("under the limit: %d bytes, %v", len(text), err)
	}
}

// argScanSeeds are argument texts, each checked on every prefix.
var argScanSeeds = []string{
	`{"city":"Oslo","n":[1,2.5e-3,{"a":null}],"s":"q\"}\\"}`, ` {} `, `[]`, `{]`, `{}}`, `{} x`,
	`"str\u00e9\n"`, `"a\"`, `"\x"`, "\"\x01\"", `true `, `tru`, `trux`, `false`, `null`, `nul l`,
	`-0.5E+12 `, `-`, `-a`, `01`, `0`, `1.`, `1.x`, `1e`, `1e+`, `1e5.`, `1.5.3`, `12 3`, `-12e-0`,
	`{"a":1} {`, "\t\r\n[\n]\n", `x`, ``, ` `, `{"a":"}"}`, `[[[]]`, `{"a"}`, `{"a":}`,
}

// TestArgScanMatchesValid: argScan reports what jsonvalid.Bytes reports,
// on every prefix of every seed, fed a byte at a time or all at once.
func TestArgScanMatchesValid(t *testing.T) {
	t.Parallel()
	for _, s := range argScanSeeds {
		checkArgScan(t, []byte(s), 1)
		checkArgScan(t, []byte(s), len(s)+1)
	}
}

// FuzzArgScan: argScan equals jsonvalid.Bytes on every prefix the
// arguments reach as fragments of cut bytes arrive.
func FuzzArgScan(f *testing.F) {
	for i, s := range argScanSeeds {
		f.Add([]byte(s), uint8(i))
	}
	f.Fuzz(func(t *testing.T, args []byte, cut uint8) {
		checkArgScan(t, args, int(cut%8)+1)
	})
}

func checkArgScan(t *testing.T, args []byte, step int) {
	t.Helper()
	var s argScan
	for n := 0; ; n = min(n+step, len(args)) {
		if got, want := s.valid(args[:n]), jsonvalid.Bytes(args[:n]); got != want {
			t.Fatalf("argScan(%q) = %v, jsonvalid.Bytes %v", args[:n], got, want)
		}
		if n == len(args) {
			return
		}
	}
}

// FuzzRoundLimit feeds chunk sequences (one a line) to a stream whose
// round limit is small and to one whose limit is the default. The small
// one never keeps more than its limit while it runs; it fails with the
// "too large" error and keeps nothing once failed; and it has failed by
// the chunk after which the unbounded one keeps more than the limit.
// argScan stays equal to jsonvalid.Bytes on every call's arguments.
func FuzzRoundLimit(f *testing.F) {
	f.Add([]byte(strings.Join([]string{
		chunk("a", callHeader(0, "c", "get_weather"), ""),
		chunk("a", callFrag(0, strings.Repeat("{", 200)), ""),
		chunk("a", callHeader(1, "d", "calculator"), ""),
		chunk("a", callFrag(0, strings.Repeat("}", 200)), ""),
	}, "\n")), uint16(256))
	f.Add([]byte(strings.Join([]string{
		chunk("a", `{"content":"   "}`, ""),
		chunk("a", `{"content":`+q(strings.Repeat(" ", 300))+`,"tool_calls":[{"index":0,"function":{"name":"f"}}]}`, ""),
		chunk("a", `{"tool_calls":[{"index":0,"function":{"name":"gg","arguments":{"a":1}}},{"index":0,"function":{"name":"h"}}]}`, ""),
	}, "\n")), uint16(200))
	f.Add([]byte(chunk("a", `{"content":"{\"a\":`+strings.Repeat("1", 300)+`}"}`, "")), uint16(100))
	small := newLoop(f, []config.Tool{calcTool}, nil)
	big := newLoop(f, []config.Tool{calcTool}, nil)
	stream := func(l *Loop) *loopStream {
		ctx, cancel := context.WithCancel(context.Background())
		st := &loopStream{s: l.newSession(request(nil, true, userBody+`}`), &plan{clientNames: []string{"get_weather"}, set: &toolSet{tools: l.static.tools}}),
			ctx: ctx, cancel: cancel, op: make(chan opResult, 1)}
		st.acc.gatewayIDs = true
		return st
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		small.roundMax = int(limit)
		a, b := stream(small), stream(big)
		defer a.Close()
		defer b.Close()
		for _, ch := range bytes.Split(data, []byte("\n")) {
			if !gjson.ValidBytes(ch) || !gjson.ParseBytes(ch).IsObject() {
				continue // a provider's stream hands out JSON objects only, checked (TestChunkNotAnObject)
			}
			a.onChunk(ch)
			b.onChunk(ch)
			if a.err != nil {
				checkTooLarge(t, a.err)
				if a.kept() != 0 {
					t.Fatalf("a failed round keeps %d bytes", a.kept())
				}
				return
			}
			if a.kept() > int(limit) || b.kept() > int(limit) {
				t.Fatalf("kept %d (unbounded %d) bytes without failing, limit %d", a.kept(), b.kept(), limit)
			}
			for _, c := range b.acc.calls {
				if got, want := c.scan.valid(c.args), jsonvalid.Bytes(c.args); got != want {
					t.Fatalf("argScan(%q) = %v, jsonvalid.Bytes %v", c.args, got, want)
				}
			}
		}
	})
}

// BenchmarkInterleavedArgs streams two calls whose argument fragments
// interleave: the first call is checked for completeness on every chunk.
func BenchmarkInterleavedArgs(b *testing.B) {
	l := newLoop(b, []config.Tool{calcTool}, nil)
	chunks := [][]byte{[]byte(chunk("a", callHeader(0, "c", "get_weather"), "")), []byte(chunk("a", callHeader(1, "d", "get_weather"), ""))}
	for k := range 4000 {
		chunks = append(chunks, []byte(chunk("a", callFrag(k%2, fmt.Sprintf(`"k%d":"%s",`, k, strings.Repeat("v", 100))), "")))
	}
	chunks = append(chunks[:2], append([][]byte{[]byte(chunk("a", callFrag(0, "{"), "")), []byte(chunk("a", callFrag(1, "{"), ""))}, chunks[2:]...)...)
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		st := &loopStream{s: l.newSession(request(nil, true, userBody+`}`), &plan{clientNames: []string{"get_weather"}, set: &toolSet{tools: l.static.tools}}),
			ctx: ctx, cancel: cancel, op: make(chan opResult, 1)}
		for _, ch := range chunks {
			st.onChunk(ch)
		}
		st.Close()
	}
}

// A provider's stream hands the loop JSON objects only (the OpenAI upstream
// checks each event); anything else fails the round as malformed, where
// its value was kept as a member named "" and written to the client as
// invalid JSON (found by fuzzing).
func TestChunkNotAnObject(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{calcTool}, nil)
	for _, ch := range []string{`"`, `"text"`, `[1,2]`, `42`} {
		ctx, cancel := context.WithCancel(context.Background())
		st := &loopStream{s: l.newSession(request(nil, true, userBody+`}`), &plan{clientNames: []string{"get_weather"}, set: &toolSet{tools: l.static.tools}}),
			ctx: ctx, cancel: cancel, op: make(chan opResult, 1)}
		st.onChunk([]byte(ch))
		var ue *pipeline.UpstreamError
		if !errors.As(st.err, &ue) || ue.Kind != pipeline.UpstreamMalformed || st.top.Size() != 0 {
			t.Fatalf("chunk %s: %v, %d bytes of members kept", ch, st.err, st.top.Size())
		}
		st.Close()
	}
}
