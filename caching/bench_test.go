package caching

import (
	"context"
	"strings"
	"testing"

	"github.com/llmgw/gateway/pipeline"
)

// benchBody is a typical agent request: a system prompt, a few turns, tools.
var benchBody = `{"model":"demo","temperature":0,"tools":` + tools + `,"messages":[{"role":"system","content":"` +
	strings.Repeat("You are a helpful assistant. ", 40) + `"},{"role":"user","content":"What is the weather in Oslo?"},` +
	`{"role":"assistant","content":"It is 3 degrees and cloudy."},{"role":"user","content":"And tomorrow?"}]}`

// BenchmarkResponseCache compares a hit through the middleware (key,
// lookup, render) with a direct call to an instant inner handler.
func BenchmarkResponseCache(b *testing.B) {
	up := &upstream{content: strings.Repeat("Tomorrow looks sunny. ", 10)}
	// The baseline: an instant inner handler answering prebuilt bytes.
	jsonAnswer, _ := up.Chat(context.Background(), newReq(benchBody, "acme"))
	chunks := up.chunks("stop", false)
	direct := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if r.Stream {
			return &pipeline.Response{Stream: sliceStream(chunks)}, nil
		}
		return &pipeline.Response{Body: jsonAnswer.Body}, nil
	})
	cached, _ := newCache(up, newClock(), nil)
	for _, stream := range []bool{false, true} {
		body := benchBody
		if stream {
			body = strings.Replace(body, `"temperature":0`, `"temperature":0,"stream":true`, 1)
		}
		if _, err := cached.Chat(context.Background(), newReq(body, "acme")); err != nil {
			b.Fatal(err)
		}
		name := "json"
		if stream {
			name = "stream"
		}
		for _, bc := range []struct {
			name string
			h    pipeline.Handler
		}{{"direct", direct}, {"hit", cached}} {
			b.Run(name+"/"+bc.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					r := newReq(body, "acme")
					resp, err := bc.h.Chat(context.Background(), r)
					if err != nil {
						b.Fatal(err)
					}
					if resp.Stream != nil {
						for {
							if _, err := resp.Stream.Next(); err != nil {
								break
							}
						}
						resp.Stream.Close()
					}
				}
			})
		}
	}
}

func BenchmarkRequestKey(b *testing.B) {
	r := newReq(benchBody, "acme")
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		_ = requestKey(r, "ts", false)
	}
}

func BenchmarkPromptCache(b *testing.B) {
	inner := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{"choices":[]}`)}, nil
	})
	providers := map[string]PromptProvider{"claude": {Mode: PromptAnthropic}, "oai": {Mode: PromptOpenAI}, "plain": {Mode: PromptNone}}
	h := pipeline.Chain(inner, NewPromptCache(PromptOptions{Providers: providers}))
	for _, p := range []string{"plain", "oai", "claude"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			body := []byte(benchBody)
			for b.Loop() {
				r := &pipeline.Request{Body: body, Tenant: &pipeline.Tenant{Name: "acme"}, Target: &pipeline.Target{Provider: p, Upstream: "u"}}
				if _, err := h.Chat(context.Background(), r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCacheable is the response cache's first question of every
// request, on a request without a temperature (the usual bypass).
func BenchmarkCacheable(b *testing.B) {
	body := []byte(`{"model":"gpt-x","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is the capital of Norway? Answer in one word, then explain briefly why it became the capital."}],"max_tokens":64}`)
	b.ReportAllocs()
	for b.Loop() {
		if cacheable(&pipeline.Request{Body: body}, false) { // a new request: its first walk
			b.Fatal("cacheable without a temperature")
		}
	}
}
