package fallback

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

const (
	roleChunk    = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	textA        = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`
	textB        = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}`
	finishChunk  = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	toolChunk    = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}`
	refusalChunk = `{"choices":[{"index":0,"delta":{"refusal":"no"},"finish_reason":null}]}`
	// emptyFinishRole is a role chunk as Ollama and SGLang send it.
	emptyFinishRole = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":""}]}`
	usageChunk      = `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	emptyDelta      = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":null}]}`
	argsChunk       = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]}`
)

func cut() error {
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: "p", Err: errors.New("eof mid-stream")}
}

func TestStreamFailureBeforeContent(t *testing.T) {
	t.Parallel()
	good := []string{roleChunk, textA, textB, finishChunk, usageChunk}
	tests := []struct {
		name    string
		primary step
	}{
		{name: "cut_after_role", primary: step{chunks: []string{roleChunk}, end: cut()}},
		// Ollama and SGLang send "finish_reason":"" on every chunk: not an end.
		{name: "cut_after_role_with_empty_finish", primary: step{chunks: []string{emptyFinishRole}, end: cut()}},
		{name: "idle_at_start", primary: step{chunks: []string{}, end: &pipeline.UpstreamError{Kind: pipeline.UpstreamIdle}}},
		{name: "malformed", primary: step{chunks: []string{roleChunk, string(pipeline.KeepAlive)}, end: &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed}}},
		{name: "clean_end_without_content", primary: step{chunks: []string{roleChunk, usageChunk}}},
		{name: "status_before_body", primary: step{err: status(502, `{}`)}},
		// A tool call's head (id and name, no arguments) is held: the
		// client has seen nothing of the call yet.
		{name: "cut_after_tool_call_head", primary: step{chunks: []string{roleChunk, toolChunk}, end: cut()}},
		// More empty chunks than a few, then a clean end without content.
		{name: "many_empty_chunks_then_end", primary: step{chunks: append([]string{roleChunk}, slices.Repeat([]string{emptyDelta}, 100)...)}},
	}
	for _, tc := range tests {
		for _, nested := range []bool{true, false} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(Options{Providers: []config.Provider{{Name: "p", Retries: intp(0)}}},
					map[string][]step{"p/a": {tc.primary}, "q/b": {{chunks: good}}}, nested,
					rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("q", "b", 1)))
				resp, req, err := e.chat(t, "a", true)
				if err != nil {
					t.Fatal(err)
				}
				got, err := drain(resp.Stream)
				if err != nil {
					t.Fatalf("stream error %v", err)
				}
				if !slices.Equal(got, good) {
					t.Fatalf("chunks =\n%q\nwant\n%q", got, good)
				}
				if req.Meta.Get(HeaderModel) != "b" || req.Meta.Get(HeaderAttempts) != "2" {
					t.Fatalf("headers %v", req.Meta.Headers())
				}
			})
		}
	}
}

func TestStreamRetrySameDeployment(t *testing.T) {
	t.Parallel()
	good := []string{roleChunk, toolChunk, finishChunk}
	e := newEnv(Options{}, map[string][]step{"p/a": {{chunks: []string{roleChunk}, end: cut()}, {chunks: good}}}, false,
		rt("a", 0, nil, dep("p", "a", 1)))
	resp, _, err := e.chat(t, "a", true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := drain(resp.Stream)
	if err != nil || !slices.Equal(got, good) {
		t.Fatalf("chunks %q err %v", got, err)
	}
	if e.f.count("p/a") != 2 {
		t.Fatalf("calls = %d", e.f.count("p/a"))
	}
}

// A tool call whose arguments began is content: a cut after it is the
// stream's error, never a fallback that would show the call twice.
func TestStreamFailureAfterCallArguments(t *testing.T) {
	t.Parallel()
	fail := cut()
	sent := []string{roleChunk, toolChunk, argsChunk}
	e := newEnv(Options{}, map[string][]step{"p/a": {{chunks: sent, end: fail}}}, false,
		rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("q", "b", 1)))
	resp, _, err := e.chat(t, "a", true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := drain(resp.Stream)
	if err != fail || !slices.Equal(got, sent) || e.f.count("q/b") != 0 {
		t.Fatalf("chunks %q, error %v, fallback calls %d", got, err, e.f.count("q/b"))
	}
}

func TestStreamFailureAfterContent(t *testing.T) {
	t.Parallel()
	for _, nested := range []bool{true, false} {
		t.Run(map[bool]string{true: "model_layer", false: "direct"}[nested], func(t *testing.T) {
			t.Parallel()
			fail := cut()
			e := newEnv(Options{}, map[string][]step{"p/a": {{chunks: []string{roleChunk, textA}, end: fail}}}, nested,
				rt("a", 0, []string{"b"}, dep("p", "a", 1)), rt("b", 0, nil, dep("q", "b", 1)))
			resp, _, err := e.chat(t, "a", true)
			if err != nil {
				t.Fatal(err)
			}
			got, err := drain(resp.Stream)
			if err != fail {
				t.Fatalf("stream error = %v, want the upstream's own error", err)
			}
			if !slices.Equal(got, []string{roleChunk, textA}) {
				t.Fatalf("chunks %q", got)
			}
			if e.f.count("p/a") != 1 || e.f.count("q/b") != 0 {
				t.Fatalf("calls %v: no retry after content reached the client", e.f.calls)
			}
		})
	}
}

func TestHasContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		chunk string
		want  bool
	}{
		{name: "role", chunk: roleChunk, want: false},
		{name: "text", chunk: textA, want: true},
		{name: "finish", chunk: finishChunk, want: true},
		{name: "tool_calls", chunk: toolChunk, want: true},
		{name: "refusal", chunk: refusalChunk, want: true},
		{name: "reasoning", chunk: `{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, want: true},
		{name: "usage", chunk: usageChunk, want: false},
		// Mistral's magistral streams its thinking as a list of parts.
		{name: "content_parts", chunk: `{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hm"}]}]},"finish_reason":null}]}`, want: true},
		{name: "empty_content_parts", chunk: `{"choices":[{"delta":{"content":[]},"finish_reason":null}]}`, want: false},
		{name: "empty_finish_reason", chunk: emptyFinishRole, want: false},
		{name: "empty_finish_reason_text", chunk: `{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}`, want: true},
		{name: "null_content", chunk: `{"choices":[{"delta":{"role":"assistant","content":null},"finish_reason":null}]}`, want: false},
		{name: "empty_tool_calls", chunk: `{"choices":[{"delta":{"tool_calls":[]}}]}`, want: false},
		{name: "second_choice", chunk: `{"choices":[{"delta":{}},{"delta":{"content":"x"}}]}`, want: true},
		{name: "garbage", chunk: `{"choices":[{"delta":`, want: false},
		{name: "empty", chunk: ``, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := wire.ChunkHasContent([]byte(tc.chunk)); got != tc.want {
				t.Fatalf("ChunkHasContent = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzHasContent(f *testing.F) {
	for _, s := range []string{roleChunk, textA, toolChunk, usageChunk, `{"choices":[{"delta":{"content":"`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if callHeads(b) && !wire.ChunkHasContent(b) {
			t.Fatal("call heads without content")
		}
		if wire.ChunkHasContent(b) != wire.ChunkHasContent(append([]byte(nil), b...)) {
			t.Fatal("not deterministic")
		}
	})
}

func TestStreamOutlivesDeadline(t *testing.T) {
	t.Parallel()
	good := []string{roleChunk, textA, textB, finishChunk}
	e := newEnv(Options{Fallback: config.Fallback{Deadline: config.Duration(300 * time.Millisecond)}},
		map[string][]step{"p/a": {{chunks: good}}}, false, rt("a", 0, nil, dep("p", "a", 1)))
	resp, _, err := e.chat(t, "a", true)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond) // the deadline bounds getting an answer, not reading it
	got, err := drain(resp.Stream)
	if err != nil || !slices.Equal(got, good) {
		t.Fatalf("chunks %q err %v", got, err)
	}
}

func TestCloseReleasesContext(t *testing.T) {
	t.Parallel()
	var upstreamCtx context.Context
	inner := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		upstreamCtx = ctx
		return &pipeline.Response{Stream: newFakeStream(ctx, []string{textA}, nil)}, nil
	})
	route := rt("a", 0, nil, dep("p", "a", 1))
	h := New(withDefaults(Options{}, route), nil)(inner)
	req := &pipeline.Request{Stream: true, Route: route, Meta: &pipeline.Meta{}}
	resp, err := h.Chat(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if upstreamCtx.Err() != nil {
		t.Fatal("context canceled while the stream is in use")
	}
	resp.Stream.Close()
	resp.Stream.Close()
	if upstreamCtx.Err() == nil {
		t.Fatal("Close did not release the attempt's context")
	}
}

func TestConcurrentStreams(t *testing.T) {
	t.Parallel()
	good := []string{roleChunk, textA, finishChunk}
	e := newEnv(Options{Rand: rand.Float64}, map[string][]step{
		"p/a": {{chunks: []string{roleChunk}, end: cut()}, {chunks: good}},
		"q/a": {{err: status(503, `{}`)}, {chunks: good}},
		"r/b": {{chunks: good}},
	}, true, rt("a", 0, []string{"b"}, dep("p", "a", 1), dep("q", "a", 1)), rt("b", 0, nil, dep("r", "b", 1)))
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			resp, _, err := e.chat(t, "a", true)
			if err != nil {
				t.Error(err)
				return
			}
			if got, err := drain(resp.Stream); err != nil || !slices.Equal(got, good) {
				t.Errorf("chunks %q err %v", got, err)
			}
		})
	}
	wg.Wait()
}

// TestPrimedChunksAreQueued: the chunks the fallback layer read to choose
// the upstream (up to the first content) count as buffered on the
// request's Lookahead until they are handed out, so that the client's
// writer sends them, the first content included, in one write; the
// upstream's next chunk is not queued, and Close forgets what is left.
func TestPrimedChunksAreQueued(t *testing.T) {
	t.Parallel()
	inner := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: newFakeStream(ctx, []string{roleChunk, textA, textB}, nil)}, nil
	})
	route := rt("a", 0, nil, dep("p", "a", 1))
	h := New(withDefaults(Options{}, route), nil)(inner)
	look := &pipeline.Lookahead{}
	resp, err := h.Chat(t.Context(), &pipeline.Request{Stream: true, Route: route, Meta: &pipeline.Meta{}, Lookahead: look})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		chunk    string
		buffered bool // after the chunk was handed out
	}{{roleChunk, true}, {textA, false}} {
		c, err := resp.Stream.Next()
		if err != nil || string(c) != want.chunk || look.Buffered() != want.buffered {
			t.Fatalf("chunk %d: %q, %v, buffered %v; want %q, buffered %v", i, c, err, look.Buffered(), want.chunk, want.buffered)
		}
	}
	resp.Stream.Close()

	// Closed with its chunks still queued: nothing stays queued.
	resp, err = h.Chat(t.Context(), &pipeline.Request{Stream: true, Route: route, Meta: &pipeline.Meta{}, Lookahead: look})
	if err != nil || !look.Buffered() {
		t.Fatalf("a primed stream queues nothing: %v", err)
	}
	resp.Stream.Close()
	if look.Buffered() {
		t.Fatal("a closed stream's chunks stay queued")
	}
}

// TestReplayHoldsNoHandedChunk: once the chunks read while priming are
// handed out, the stream holds no copy of them: an open stream waits with
// what it needs, and thousands of them are open at once.
func TestReplayHoldsNoHandedChunk(t *testing.T) {
	t.Parallel()
	inner := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: newFakeStream(ctx, []string{roleChunk, textA, textB}, nil)}, nil
	})
	route := rt("a", 0, nil, dep("p", "a", 1))
	resp, err := New(withDefaults(Options{}, route), nil)(inner).Chat(t.Context(), &pipeline.Request{Stream: true, Route: route, Meta: &pipeline.Meta{}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	rs, ok := resp.Stream.(*replayStream)
	if !ok {
		t.Fatalf("the stream is a %T", resp.Stream)
	}
	for range 2 { // the role chunk, then the first content
		if _, err := resp.Stream.Next(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range rs.arr {
		if c != nil {
			t.Fatalf("primed chunk %d still held: %q", i, c)
		}
	}
}
