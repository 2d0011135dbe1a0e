package fallback

import (
	"context"
	"io"
	"testing"

	"github.com/llmgw/gateway/pipeline"
)

// BenchmarkOverhead compares the bare handler with the middleware around it,
// both answering at once; the difference is the middleware's cost.
func BenchmarkOverhead(b *testing.B) {
	resp := &pipeline.Response{Body: []byte(`{}`)}
	bare := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: resp.Body}, nil
	})
	route := rt("m", 0, []string{"n"}, dep("p", "m", 1))
	wrapped := New(withDefaults(Options{}, route), func(string) *pipeline.Route { return nil })(bare)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		h    pipeline.Handler
	}{{"bare", bare}, {"fallback", wrapped}} {
		b.Run(bc.name, func(b *testing.B) {
			req := &pipeline.Request{Model: "m", Body: []byte(`{"model":"m"}`), Route: route, Meta: &pipeline.Meta{}}
			b.ReportAllocs()
			for b.Loop() {
				req.Meta = &pipeline.Meta{}
				if _, err := bc.h.Chat(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStreamOverhead is the same for a stream of a role chunk, two
// content chunks and a finish chunk, read to its end.
func BenchmarkStreamOverhead(b *testing.B) {
	chunks := [][]byte{[]byte(roleChunk), []byte(textA), []byte(textB), []byte(finishChunk)}
	bare := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		i := 0
		return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
			if i == len(chunks) {
				return nil, io.EOF
			}
			i++
			return chunks[i-1], nil
		}}}, nil
	})
	route := rt("m", 0, nil, dep("p", "m", 1))
	wrapped := New(withDefaults(Options{}, route), nil)(bare)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		h    pipeline.Handler
	}{{"bare", bare}, {"fallback", wrapped}} {
		b.Run(bc.name, func(b *testing.B) {
			req := &pipeline.Request{Model: "m", Stream: true, Body: []byte(`{"model":"m"}`), Route: route}
			b.ReportAllocs()
			for b.Loop() {
				req.Meta = &pipeline.Meta{}
				resp, err := bc.h.Chat(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := drain(resp.Stream); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
