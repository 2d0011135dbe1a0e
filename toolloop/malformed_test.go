package toolloop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// An upstream round the loop cannot follow (its choices have no index 0,
// a tool call's index is out of range, or it made more calls than a round
// takes) is the upstream's failure,
// upstream_malformed, never an empty answer that ends with "stop": as a
// JSON answer and as a stream alike.
func TestMalformedRoundFails(t *testing.T) {
	t.Parallel()
	const tools = `,"tools":[{"type":"function","function":{"name":"mine","parameters":{"type":"object"}}}]`
	at1 := func(delta, finish string) string {
		return strings.Replace(chunk("up", delta, finish), `"index":0`, `"index":1`, 1)
	}
	cases := []struct {
		name   string
		chunks []string
		body   string // "": a JSON message's calls have no index
	}{
		{name: "choice at index 1",
			chunks: []string{at1(`{"role":"assistant","content":""}`, ""), at1(`{"content":"hello"}`, ""), at1(`{}`, "stop")},
			body:   `{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":1,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}`},
		{name: "call index past the range",
			chunks: []string{chunk("up", `{"role":"assistant","content":""}`, ""), chunk("up", callWhole(99999999, "a", "mine", "{}"), ""), chunk("up", `{}`, "tool_calls")}},
		{name: "more calls than a round takes", chunks: overCalls(false), body: overCalls(true)[0]},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			if !stream && tc.body == "" {
				continue
			}
			t.Run(tc.name+map[bool]string{false: " json", true: " stream"}[stream], func(t *testing.T) {
				t.Parallel()
				l := newLoop(t, []config.Tool{calcTool}, nil)
				m := &fakeModel{turns: []turnFn{always(tc.chunks, tc.body)}}
				body := userBody + tools
				if stream {
					body += `,"stream":true`
				}
				resp, err := l.Chat(context.Background(), request(m, stream, body+`}`))
				var shown []string
				if stream && err == nil {
					for {
						var ch []byte
						if ch, err = resp.Stream.Next(); err != nil {
							break
						}
						shown = append(shown, string(ch))
					}
					resp.Stream.Close()
				}
				var ue *pipeline.UpstreamError
				if !errors.As(err, &ue) || ue.Kind != pipeline.UpstreamMalformed {
					t.Fatalf("err %v after %q", err, shown)
				}
				for _, ch := range shown {
					if d := gjson.Get(ch, "choices.0.delta"); d.Get("content").String() != "" || d.Get("tool_calls").Exists() || gjson.Get(ch, "choices.0.finish_reason").String() != "" {
						t.Fatalf("shown %q before the error", shown)
					}
				}
			})
		}
	}
}

// overCalls is a round of maxCalls+1 client calls: one chunk's delta, or
// (json) a completion's message.
func overCalls(json bool) []string {
	var calls []string
	for i := range maxCalls + 1 {
		calls = append(calls, fmt.Sprintf(`{"index":%d,"id":"c%d","type":"function","function":{"name":"mine","arguments":"{}"}}`, i, i))
	}
	list := "[" + strings.Join(calls, ",") + "]"
	if json {
		return []string{`{"id":"up","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":` + list + `},"finish_reason":"tool_calls"}]}`}
	}
	return []string{chunk("up", `{"role":"assistant","content":""}`, ""), chunk("up", `{"tool_calls":`+list+`}`, ""), chunk("up", `{}`, "tool_calls")}
}

// Choices beside choice 0 (an upstream that sends more than asked) are
// left out, as before: only a round without choice 0 fails.
func TestExtraChoicesBesideZero(t *testing.T) {
	t.Parallel()
	l := newLoop(t, []config.Tool{calcTool}, nil)
	at1 := strings.Replace(chunk("up", `{"content":"other"}`, ""), `"index":0`, `"index":1`, 1)
	round := textRound("up", "hello there", 1, 1)
	round = append([]string{at1}, round...)
	m := &fakeModel{turns: []turnFn{always(round, "")}}
	resp, err := l.Chat(context.Background(), request(m, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if sum := checkStream(t, sse(t, resp.Stream), false); sum.Content != "hello there" || sum.FinishReason != "stop" {
		t.Fatalf("content %q finish %q", sum.Content, sum.FinishReason)
	}
}
