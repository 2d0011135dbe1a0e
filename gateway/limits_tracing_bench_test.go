package gateway

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// benchLimits are rate limits, a concurrency limit and a budget that all
// match the benchmark's tenant and never refuse it.
const benchLimits = `
[[limits]]
tenant = "team"
requests_per_minute = 1000000000
tokens_per_minute = 1000000000
concurrent = 1000
[[budgets]]
tenant = "team"
amount = 1000000
period = "month"
`

// benchTracing samples every request.
const benchTracing = `
[tracing]
enabled = true
sample_ratio = 1.0
`

// BenchmarkLimitsAndTracing runs chainConfig's request through the chains
// Build composes, ending in an upstream that answers at once, with neither,
// either and both of [[limits]] (in memory: requests, tokens, in flight,
// budget) and [tracing] (every request sampled, batched to a no-op
// exporter). added-ns/op is a sub-benchmark's ns/op less none's, measured
// in the same run: what configuring it costs a request.
func BenchmarkLimitsAndTracing(b *testing.B) {
	upstream := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: instantAnswer}, nil
	})
	// A price, so that every call adds to the budget's spend.
	base := strings.Replace(chainConfig, "name = \"gpt-x\"\n", "name = \"gpt-x\"\nprice = { input = 2.5, output = 10 }\n", 1)
	if base == chainConfig {
		b.Fatal("chainConfig has no gpt-x model to price")
	}
	none := 0.0
	for _, c := range []struct{ name, toml string }{
		{"none", ""},
		{"limits", benchLimits},
		{"tracing", benchTracing},
		{"both", benchLimits + benchTracing},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg, err := config.Parse([]byte(base + c.toml))
			if err != nil {
				b.Fatal(err)
			}
			rt, err := build(cfg, zerolog.New(io.Discard), seams{upstream: upstream, spans: tracetest.NewNoopExporter()})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			route := rt.Routes["gpt-x"]
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				req := &pipeline.Request{ID: "r", Body: chainBody, Model: "gpt-x", Route: route, Credential: "sk-team", Meta: &pipeline.Meta{}}
				resp, err := rt.Chat.Chat(ctx, req)
				if err != nil || len(resp.Body) == 0 {
					b.Fatal(err)
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if c.name == "none" {
				none = ns
			} else if none > 0 {
				b.ReportMetric(ns-none, "added-ns/op")
			}
		})
	}
}
