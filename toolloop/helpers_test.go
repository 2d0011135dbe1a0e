package toolloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wiretest"
	"github.com/openai/openai-go/v3"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// turnFn scripts one model turn: it sees the request and returns either
// chunks (stream) or a body.
type turnFn func(r *pipeline.Request) (chunks []string, body string)

// fakeModel is a scripted model layer. Each call consumes the next turn; the
// last turn repeats. It records every request body.
type fakeModel struct {
	mu     sync.Mutex
	turns  []turnFn
	bodies [][]byte
	closed int
	opened int
}

func (f *fakeModel) Chat(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
	f.mu.Lock()
	n := len(f.bodies)
	f.bodies = append(f.bodies, r.Body)
	turn := f.turns[min(n, len(f.turns)-1)]
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	chunks, body := turn(r)
	if !r.Stream {
		return &pipeline.Response{Body: []byte(body)}, nil
	}
	f.mu.Lock()
	f.opened++
	f.mu.Unlock()
	i := 0
	return &pipeline.Response{Stream: &pipeline.StreamFunc{
		NextFunc: func() ([]byte, error) {
			if i >= len(chunks) {
				return nil, io.EOF
			}
			i++
			return []byte(chunks[i-1]), nil
		},
		CloseFunc: func() { f.mu.Lock(); f.closed++; f.mu.Unlock() },
	}}, nil
}

func (f *fakeModel) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

func (f *fakeModel) body(i int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[i]
}

// Chunk builders for scripted upstream rounds. Every round has its own id,
// as real upstreams do; the client must only ever see the first.
func chunk(id, delta, finish string) string {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":"gpt-x","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}],"usage":null}`, id, delta, fr)
}

func usageChunk(id string, p, c, cached int) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":"gpt-x","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d},"completion_tokens_details":{"reasoning_tokens":1}}}`, id, p, c, p+c, cached)
}

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

func callHeader(i int, id, name string) string {
	return fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]}`, i, id, name)
}

func callFrag(i int, frag string) string {
	return fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, i, q(frag))
}

func callWhole(i int, id, name, args string) string {
	return fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]}`, i, id, name, q(args))
}

// toolRound is a stream round calling one tool, arguments in two fragments.
func toolRound(id, callID, name, args string, p, c int) []string {
	half := len(args) / 2
	return []string{
		chunk(id, `{"role":"assistant","content":null}`, ""),
		chunk(id, callHeader(0, callID, name), ""),
		chunk(id, callFrag(0, args[:half]), ""),
		chunk(id, callFrag(0, args[half:]), ""),
		chunk(id, `{}`, "tool_calls"),
		usageChunk(id, p, c, 2),
	}
}

func textRound(id, text string, p, c int) []string {
	out := []string{chunk(id, `{"role":"assistant","content":""}`, "")}
	for _, w := range strings.SplitAfter(text, " ") {
		out = append(out, chunk(id, `{"content":`+q(w)+`}`, ""))
	}
	return append(out, chunk(id, `{}`, "stop"), usageChunk(id, p, c, 2))
}

// completion builds a non-stream body.
func completion(id, content string, calls string, finish string, p, c int) string {
	ct := "null"
	if content != "" {
		ct = q(content)
	}
	tc := ""
	if calls != "" {
		tc = `,"tool_calls":` + calls
	}
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1767225600,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":null%s},"logprobs":null,"finish_reason":%q}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}}}`, id, ct, tc, finish, p, c, p+c)
}

func always(chunks []string, body string) turnFn {
	return func(*pipeline.Request) ([]string, string) { return chunks, body }
}

// newLoop builds a Loop from tools and the config defaults, with a shorter
// tool timeout and wall time; mod changes what a test needs, and the fields
// it leaves unset get config's defaults.
func newLoop(t testing.TB, tools []config.Tool, mod func(*Options)) *Loop {
	t.Helper()
	opts := Options{
		Tools:      tools,
		Loop:       config.ToolLoop{ToolTimeout: config.Duration(5 * time.Second), WallTime: config.Duration(time.Minute)},
		Logger:     zerolog.Nop(),
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	if mod != nil {
		mod(&opts)
	}
	c := config.Config{Tools: slices.Clone(opts.Tools), ToolLoop: opts.Loop}
	c.ApplyDefaults()
	opts.Tools, opts.Loop = c.Tools, c.ToolLoop
	l, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var calcTool = config.Tool{Name: "calculator", Kind: "builtin"}
var timeTool = config.Tool{Name: "current_time", Kind: "builtin"}

func request(m pipeline.Handler, stream bool, body string) *pipeline.Request {
	return &pipeline.Request{ID: "req-1", Body: []byte(body), Model: "gpt-x", Stream: stream,
		IncludeUsage: stream && gjson.Get(body, "stream_options.include_usage").Bool(),
		Route:        &pipeline.Route{Name: "gpt-x", ModelLayer: m}, Meta: &pipeline.Meta{}}
}

// sse drains s the way the proxy's sink does and returns the SSE bytes.
func sse(t testing.TB, s pipeline.Stream) []byte {
	t.Helper()
	defer s.Close()
	var b []byte
	for {
		ch, err := s.Next()
		if errors.Is(err, io.EOF) {
			return append(b, "data: [DONE]\n\n"...)
		}
		if err != nil {
			b = append(b, "event: error\ndata: {\"error\":{\"message\":\"x\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"...)
			t.Logf("stream error: %v", err)
			return b
		}
		if len(ch) > 0 && ch[0] == ':' {
			b = append(b, ch...)
			b = append(b, "\n\n"...)
			continue
		}
		b = append(b, "data: "...)
		b = append(b, ch...)
		b = append(b, "\n\n"...)
	}
}

// checkStream runs the wire contract checker and the real openai-go
// accumulator on raw and returns the summary.
func checkStream(t *testing.T, raw []byte, wantUsage bool) *wiretest.Summary {
	t.Helper()
	sum := wiretest.CheckStreamAll(t, raw, wiretest.Options{WantUsage: wantUsage}, nil)
	var acc openai.ChatCompletionAccumulator
	for i, ch := range sum.Chunks {
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(ch, &c); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if !acc.AddChunk(c) {
			t.Fatalf("openai-go accumulator rejected chunk %d: %s", i, ch)
		}
	}
	if len(acc.Choices) == 1 {
		if got := acc.Choices[0].Message.Content; got != sum.Content {
			t.Fatalf("openai-go content %q, checker %q", got, sum.Content)
		}
		if len(acc.Choices[0].Message.ToolCalls) != len(sum.ToolCalls) {
			t.Fatalf("openai-go saw %d tool calls, checker %d", len(acc.Choices[0].Message.ToolCalls), len(sum.ToolCalls))
		}
		for i, tc := range acc.Choices[0].Message.ToolCalls {
			if tc.Type != "function" || tc.Function.Name != sum.ToolCalls[i].Name || tc.Function.Arguments != sum.ToolCalls[i].Arguments {
				t.Fatalf("openai-go tool call %d = %+v, checker %+v", i, tc, sum.ToolCalls[i])
			}
		}
	}
	return sum
}

// toolMessages returns the tool messages of a request body, in order.
func toolMessages(body []byte) []gjson.Result {
	var out []gjson.Result
	for _, m := range gjson.GetBytes(body, "messages").Array() {
		if m.Get("role").String() == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// toolPolicy is a tenant policy that allows the server tools it reports.
type toolPolicy func(name string) bool

func (p toolPolicy) AllowsTool(name string) bool        { return p(name) }
func (toolPolicy) TracesTools() bool                    { return false }
func (toolPolicy) CachesResponses(def bool) bool        { return def }
func (toolPolicy) ApprovalRequired(string) (bool, bool) { return false, false }

// chatLoop runs userBody, streamed or not, through a loop that offers
// tool, with m as the model.
func chatLoop(t *testing.T, tool config.Tool, m pipeline.Handler, stream bool) *pipeline.Response {
	t.Helper()
	l := newLoop(t, []config.Tool{tool}, nil)
	body := userBody + `}`
	if stream {
		body = userBody + `,"stream":true}`
	}
	resp, err := l.Chat(context.Background(), request(m, stream, body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
