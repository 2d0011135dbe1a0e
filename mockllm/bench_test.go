package mockllm

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// benchCtx builds a request context carrying a chat completion body.
func benchCtx(body string) *fasthttp.RequestCtx {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/chat/completions")
	ctx.Request.SetBodyString(body)
	return &ctx
}

// BenchmarkNonStream measures the handler for one non-stream answer.
func BenchmarkNonStream(b *testing.B) {
	s := New(Options{MaxRecorded: -1, Respond: func(*Call) Turn { return Turn{Text: strings.Repeat("word ", 100)} }})
	defer s.Close()
	h := s.Handler()
	body := chatBody("m", false, false, `[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]`)
	ctx := benchCtx(body)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Response.Reset()
		h(ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatal(ctx.Response.StatusCode())
		}
	}
}

// BenchmarkStream measures one streamed answer through fasthttp's body
// stream (handler, stream goroutine, pipe): 125 content deltas plus role,
// finish and usage chunks.
func BenchmarkStream(b *testing.B) {
	s := New(Options{MaxRecorded: -1, Respond: func(*Call) Turn { return Turn{Text: strings.Repeat("word ", 100)} }})
	defer s.Close()
	h := s.Handler()
	ctx := benchCtx(chatBody("m", true, true, `[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]`))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Response.Reset()
		h(ctx)
		if err := ctx.Response.BodyWriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamEvents measures only building and writing the events of
// the same answer.
func BenchmarkStreamEvents(b *testing.B) {
	s := New(Options{MaxRecorded: -1})
	defer s.Close()
	a := &answer{id: "chatcmpl-mock-1", created: 1, model: "m", turn: Turn{Text: strings.Repeat("word ", 100)},
		finish: "stop", usage: Usage{Prompt: 10, Completion: 125}, chunking: Chunking{}.withDefaults(), includeUsage: true}
	w := bufio.NewWriter(io.Discard)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st := &stream{s: s, a: a}
		if st.run(w) != outDone {
			b.Fatal("stream did not finish")
		}
	}
}
