package caching

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmgw/gateway/wire"
	"github.com/llmgw/gateway/wiretest"
)

// TestReplayEqualsLiveEncoding renders one neutral event sequence with
// wire.ChatSSE (what the live loop sends), records it as the response cache
// does, replays the entry, and compares: the bytes are the same but for id
// and created. Text and arguments come in the replay's own pieces, so both
// sides carry the same events. The stream checker and the schema run on
// both.
func TestReplayEqualsLiveEncoding(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("ünïcødé 🎉 text ", 12)
	usage := []byte(`{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":0}}`)
	text := func(s string) []wire.Event {
		var evs []wire.Event
		for _, p := range splitRunes(s, replayPiece) {
			evs = append(evs, wire.Event{Kind: wire.Text, Key: "content", Text: []byte(p)})
		}
		return evs
	}
	call := func(id, name, args string) []wire.Event {
		evs := []wire.Event{{Kind: wire.CallHeader, ID: id, Name: name}}
		for _, p := range splitRunes(args, replayPiece) {
			evs = append(evs, wire.Event{Kind: wire.CallArgs, Text: []byte(p)})
		}
		return evs
	}
	join := func(parts ...[]wire.Event) []wire.Event {
		out := []wire.Event{{Kind: wire.Role}}
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	finish := func(f string) []wire.Event {
		return []wire.Event{{Kind: wire.Finish, Finish: f}, {Kind: wire.Usage, Raw: usage}}
	}
	tests := []struct {
		name   string
		events []wire.Event
		usage  bool
	}{
		{name: "text", events: join(text(long), finish("stop")), usage: true},
		{name: "text, no usage asked", events: join(text(long), finish("length"))},
		{name: "text then two calls", events: join(text("Checking."),
			call("call_a", "lookup_city", `{"name":"Zürich","country":"CH","detail":"`+strings.Repeat("x", 80)+`"}`),
			call("call_b", "local_time", `{"tz":"Europe/Zurich"}`), finish("tool_calls")), usage: true},
		{name: "calls only", events: join(call("call_a", "lookup_city", `{}`), finish("tool_calls"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := wire.Header{ID: "chatcmpl-live", Created: 1767225600, Model: "gpt-x", IncludeUsage: tt.usage}
			live := wire.NewChatSSE(h)
			var chunks []string
			var rec recorder
			for i := range tt.events {
				if c := live.Encode(nil, &tt.events[i]); len(c) > 0 {
					chunks = append(chunks, string(c))
					rec.add(c)
				}
			}
			completion := rec.completion()
			if !storable(completion, true) {
				t.Fatalf("recorded completion not storable: %s", completion)
			}
			replayed, err := drain(t, newReplayStream(completion, "chatcmpl-replay", 1767229999, "gpt-x", tt.usage, nil))
			if err != nil {
				t.Fatal(err)
			}
			a, b := sseBytes(chunks), sseBytes(replayed)
			for _, raw := range [][]byte{a, b} {
				wiretest.CheckStreamAll(t, raw, wiretest.Options{WantUsage: tt.usage}, chatSchema(t))
			}
			b = bytes.ReplaceAll(b, []byte(`"id":"chatcmpl-replay","object":"chat.completion.chunk","created":1767229999`),
				[]byte(`"id":"chatcmpl-live","object":"chat.completion.chunk","created":1767225600`))
			if !bytes.Equal(a, b) {
				t.Fatalf("replay differs from the live encoding:\nlive:\n%s\nreplay:\n%s", a, b)
			}
		})
	}
}
