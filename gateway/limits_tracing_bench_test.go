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

// benchTracing samples every request; benchTracingRatio one in a hundred.
const (
	benchTracing = `
[tracing]
enabled = true
sample_ratio = 1.0
`
	benchTracingRatio = `
[tracing]
enabled = true
sample_ratio = 0.01
`
)

// benchConfigs are the configurations BenchmarkLimitsAndTracing compares,
// none first.
var benchConfigs = []struct{ name, toml string }{
	{"none", ""},
	{"limits", benchLimits},
	{"tracing", benchTracing},
	{"both", benchLimits + benchTracing},
	{"both-ratio0.01", benchLimits + benchTracingRatio},
}

// benchRuntime builds chainConfig (with a price on gpt-x, so that every
// call adds to the budget's spend) plus toml, ending in an upstream that
// answers at once, exporting spans to a no-op exporter; and a function that
// sends it one request.
func benchRuntime(b *testing.B, toml string) func() {
	base := strings.Replace(chainConfig, "name = \"gpt-x\"\n", "name = \"gpt-x\"\nprice = { input = 2.5, output = 10 }\n", 1)
	if base == chainConfig {
		b.Fatal("chainConfig has no gpt-x model to price")
	}
	cfg, err := config.Parse([]byte(base + toml))
	if err != nil {
		b.Fatal(err)
	}
	upstream := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: instantAnswer}, nil
	})
	rt, err := build(cfg, zerolog.New(io.Discard), seams{upstream: upstream, spans: tracetest.NewNoopExporter()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rt.Close)
	route := rt.Routes["gpt-x"]
	ctx := context.Background()
	return func() {
		req := &pipeline.Request{ID: "r", Body: chainBody, Model: "gpt-x", Route: route, Credential: "sk-team", Meta: &pipeline.Meta{}}
		resp, err := rt.Chat.Chat(ctx, req)
		if err != nil || len(resp.Body) == 0 {
			b.Fatal(err)
		}
	}
}

// BenchmarkLimitsAndTracing runs chainConfig's request through the chains
// Build composes, with neither, either and both of [[limits]] (in memory:
// requests, tokens, in flight, budget) and [tracing] (every request
// sampled, batched to a no-op exporter; both-ratio0.01 samples one request
// in a hundred). Besides ns/op each reports
// cpu-ns/op, the process's CPU time per request: it includes the garbage
// collector and the span exporter's goroutine, and unlike ns/op it does not
// grow while other processes hold the CPU. The others report what they add
// to none, measured in the same run: added-ns/op and added-cpu-ns/op.
func BenchmarkLimitsAndTracing(b *testing.B) {
	var none, noneCPU float64
	for _, c := range benchConfigs {
		b.Run(c.name, func(b *testing.B) {
			send := benchRuntime(b, c.toml)
			send() // warm: scopes, span names
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				send()
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			cpuNs := float64((processCPU() - cpu).Nanoseconds()) / float64(b.N)
			b.ReportMetric(cpuNs, "cpu-ns/op")
			if c.name == "none" {
				none, noneCPU = ns, cpuNs
			} else if none > 0 {
				b.ReportMetric(ns-none, "added-ns/op")
				b.ReportMetric(cpuNs-noneCPU, "added-cpu-ns/op")
			}
		})
	}
}
