package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// matrixText trips every kind of the matrix: the regex (forbidden), the pii
// kind (an e-mail address), max_length (longer than 20) and the classifier
// (which flags "forbidden").
var matrixText = "forbidden dana@corp.example.com " + strings.Repeat("x", 40)

// matrixKinds are the guardrail settings of each kind.
var matrixKinds = map[string]string{
	"regex":      `patterns = ['forbidden']`,
	"pii":        `pii = ["email"]`,
	"max_length": `max_length = 20`,
}

// whole reports whether s still holds all of matrixText's trigger; cleaned
// whether the part kind acts on is gone.
func whole(s string) bool {
	return strings.Contains(s, "forbidden") && strings.Contains(s, "dana@corp.example.com") && strings.Contains(s, strings.Repeat("x", 40))
}

func cleaned(kind, s string) bool {
	switch kind {
	case "regex":
		return !strings.Contains(s, "forbidden")
	case "pii":
		return !strings.Contains(s, "dana@")
	}
	return !strings.Contains(s, strings.Repeat("x", 40)) // max_length cuts
}

// TestGuardrailsMatrix runs every kind with every action it has at every
// stage, streamed and not, through the real openai-go client: block stops
// the text (400, an error event, or an error result for the model with the
// tool not run), redact removes what the kind matches before the next
// reader (upstream, client, tool or model) sees it, flag lets it through
// whole.
func TestGuardrailsMatrix(t *testing.T) {
	t.Parallel()
	classifier, _ := newClassifier(t)
	kinds := map[string]string{"http": `url = "` + classifier.URL + `"` + "\n" + `timeout = "1s"`}
	for k, v := range matrixKinds {
		kinds[k] = v
	}
	for _, stage := range []string{"request", "response", "tool_input", "tool_output"} {
		for kind, settings := range kinds {
			for _, action := range []string{"block", "redact", "flag"} {
				if kind == "http" && action == "redact" {
					continue // a classifier cannot redact (config refuses it)
				}
				t.Run(stage+"/"+kind+"/"+action, func(t *testing.T) {
					t.Parallel()
					guardrailCase(t, stage, kind, action, settings)
				})
			}
		}
	}
}

func guardrailCase(t *testing.T, stage, kind, action, settings string) {
	var (
		runs atomic.Int32
		got  atomic.Value // what the tool received
	)
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"answer":"` + matrixText + `"}`))
	}))
	t.Cleanup(tool.Close)
	cfg := baseConfig + `
[[tools]]
name = "lookup"
kind = "http"
url = "` + tool.URL + `"
parameters = '{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}'
` + guardrail("g", stage, kind, action, settings)
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		switch {
		case c.LastRole == "tool":
			return mockllm.Turn{Text: "tool said " + strings.Join(c.ToolResults, "")}
		case strings.HasPrefix(stage, "tool"):
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "lookup", Arguments: `{"key":"` + matrixText + `"}`}}}
		case stage == "response":
			return mockllm.Turn{Text: matrixText}
		}
		return mockllm.Turn{Text: "ok"}
	}})
	schema := wiretest.LoadSchema(t)
	prompt := "look it up"
	if stage == "request" {
		prompt = matrixText
	}
	for _, stream := range []bool{false, true} {
		var (
			answer string
			err    error
		)
		switch {
		case stream && stage == "request" && action == "block":
			// Refused before any stream: a 400, no SSE to check.
			st := h.client.Chat.Completions.NewStreaming(context.Background(), userMsg(prompt))
			for st.Next() {
				answer += "chunk"
			}
			err = st.Err()
			_ = st.Close()
		case stream:
			var acc openai.ChatCompletion
			acc, _, err = h.streamChat(userMsg(prompt), wiretest.Options{WantError: stage == "response" && action == "block"}, schema)
			if len(acc.Choices) > 0 {
				answer = acc.Choices[0].Message.Content
			}
		default:
			var r *openai.ChatCompletion
			if r, err = h.client.Chat.Completions.New(context.Background(), userMsg(prompt)); err == nil {
				answer = r.Choices[0].Message.Content
			}
		}
		reqs := h.mock.Requests()
		upstream, results := "", "" // the last upstream request's messages, and its tool results
		if len(reqs) > 0 {
			upstream = gjson.GetBytes(reqs[len(reqs)-1].Body, "messages").Raw
			results = gjson.GetBytes(reqs[len(reqs)-1].Body, `messages.#(role=="tool")#.content`).Raw
		}
		var apiErr *openai.Error
		blocked := errors.As(err, &apiErr) && apiErr.Code == "content_blocked"
		switch stage + "/" + action {
		case "request/block", "response/block":
			if !blocked && !(stream && err != nil && strings.Contains(err.Error(), "content_blocked")) || whole(answer) {
				t.Fatalf("stream=%v: %v, answer %q", stream, err, answer)
			}
		case "request/redact":
			if err != nil || !cleaned(kind, upstream) {
				t.Fatalf("stream=%v: %v, the upstream saw %s", stream, err, upstream)
			}
		case "response/redact":
			if err != nil || !cleaned(kind, answer) {
				t.Fatalf("stream=%v: %v, answer %q", stream, err, answer)
			}
		case "request/flag":
			if err != nil || !whole(upstream) {
				t.Fatalf("stream=%v: %v, the upstream saw %s", stream, err, upstream)
			}
		case "response/flag":
			if err != nil || !whole(answer) {
				t.Fatalf("stream=%v: %v, answer %q", stream, err, answer)
			}
		case "tool_input/block":
			if err != nil || runs.Load() != 0 || !strings.Contains(answer, "content_blocked") {
				t.Fatalf("stream=%v: %v, tool runs %d, answer %q", stream, err, runs.Load(), answer)
			}
		case "tool_input/redact":
			// A cut that would break the arguments' JSON withholds them:
			// the tool then does not run at all.
			s, _ := got.Load().(string)
			if err != nil || runs.Load() != 0 && !cleaned(kind, s) {
				t.Fatalf("stream=%v: %v, the tool got %q", stream, err, s)
			}
		case "tool_input/flag":
			s, _ := got.Load().(string)
			if err != nil || !whole(s) {
				t.Fatalf("stream=%v: %v, the tool got %q", stream, err, s)
			}
		case "tool_output/block":
			if err != nil || whole(results) || !strings.Contains(results, "content_blocked") {
				t.Fatalf("stream=%v: %v, the model saw %s", stream, err, upstream)
			}
		case "tool_output/redact":
			if err != nil || !cleaned(kind, results) {
				t.Fatalf("stream=%v: %v, the model saw %s", stream, err, results)
			}
		case "tool_output/flag":
			if err != nil || !whole(results) {
				t.Fatalf("stream=%v: %v, the model saw %s", stream, err, results)
			}
		}
	}
}
