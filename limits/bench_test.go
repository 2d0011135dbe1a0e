package limits

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// BenchmarkLimits measures what limits add to a request without Redis:
// the request-layer check and the meter on its one upstream call.
func BenchmarkLimits(b *testing.B) {
	up := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}`)}, nil
	})
	body := []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hello there, how are you today?"}]}`)
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := &pipeline.Request{ID: "x", Model: "gpt-x", Body: body, Meta: &pipeline.Meta{}}
			if _, err := up.Chat(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct{ name, toml string }{
		{"none", ""},
		{"rpm+concurrent+budget", "[[limits]]\ntenant = \"*\"\nrequests_per_minute = 1000000000\nconcurrent = 1000\n[[budgets]]\ntenant = \"a\"\namount = 1000000\n"},
		{"rpm+tpm+concurrent+budget", "[[limits]]\ntenant = \"*\"\nrequests_per_minute = 1000000000\ntokens_per_minute = 1000000000\nconcurrent = 1000\n[[budgets]]\ntenant = \"a\"\namount = 1000000\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg, err := config.Parse([]byte(baseTOML + c.toml))
			if err != nil {
				b.Fatal(err)
			}
			l := New(Options{Config: cfg, Logger: zerolog.Nop()})
			defer l.Close()
			h := pipeline.Chain(l.Meter(up), l.Middleware())
			tenant := &pipeline.Tenant{Name: "a", Key: "k"}
			_, _ = h.Chat(context.Background(), &pipeline.Request{ID: "warm", Model: "gpt-x", Body: body, Meta: &pipeline.Meta{}, Tenant: tenant})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				r := &pipeline.Request{ID: strconv.Itoa(i), Model: "gpt-x", Body: body, Meta: &pipeline.Meta{}, Tenant: tenant}
				if _, err := h.Chat(context.Background(), r); err != nil {
					b.Fatal(err)
				}
			}
		})
		// What a tool loop's later round adds (AdmitRound): nothing on a
		// plain request, which has no later round.
		b.Run("round/"+c.name, func(b *testing.B) {
			cfg, err := config.Parse([]byte(baseTOML + c.toml))
			if err != nil {
				b.Fatal(err)
			}
			l := New(Options{Config: cfg, Logger: zerolog.Nop()})
			defer l.Close()
			r := &pipeline.Request{ID: "x", Model: "gpt-x", Body: body, Meta: &pipeline.Meta{}, Tenant: &pipeline.Tenant{Name: "a", Key: "k"}}
			b.ReportAllocs()
			for b.Loop() {
				if err := l.AdmitRound(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPassthroughEstimate measures the input estimate a pass-through
// JSON body takes before its call when a tokens_per_minute rule applies: a
// small embeddings body, and bodies at the 8 MiB body limit, of prose (the
// first 64 KiB tokenized, the rest estimated from its bytes) and of token
// ids (a number is a token).
func BenchmarkPassthroughEstimate(b *testing.B) {
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog. ", (8<<20)/45)
	ids := strings.Repeat("1234,", (8<<20)/5)
	for _, c := range []struct{ name, body string }{
		{"small", `{"model":"gpt-x","input":"hello there, how are you today?"}`},
		{"8MiB-prose", `{"model":"gpt-x","prompt":"` + prose + `"}`},
		{"8MiB-token-ids", `{"model":"gpt-x","input":[` + ids + `1]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := &pipeline.Request{Model: "gpt-x", Endpoint: "/v1/embeddings", Body: []byte(c.body)}
			estimate(r) // the tokenizer's tables, built once per process
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				estimate(r)
			}
		})
	}
}
