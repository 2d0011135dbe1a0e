package guardrails

import (
	"context"
	"io"
	"strings"
	"testing"

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
	for {
		c, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
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
