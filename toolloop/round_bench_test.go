package toolloop

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/limits"
	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
)

// roundConfig is the bench's tool-loop setup: the two builtins (here with
// their own definitions) offered to tools-*, and a plain model for the
// reference call.
const roundConfig = `
providers = [{ name = "api", kind = "openai", base_url = "http://127.0.0.1:1/v1" }]
models = [
  { name = "tools-2", provider = "api", context_window = 128000 },
  { name = "chat", provider = "api", context_window = 128000 },
]
tools = [
  { name = "current_time", kind = "builtin", models = ["tools-*"] },
  { name = "calculator", kind = "builtin", idempotent = true, models = ["tools-*"] },
]
[tool_loop]
max_iterations = 10
`

const roundBenchRounds = 2 // tool rounds before the answer, as bench's toolloop

// BenchmarkRound measures what one more tool round costs, the way bench's
// toolloop scenario does: a request whose model calls the calculator twice
// before answering, against one plain call, both through the gateway's
// default model-call layer (ModelCallLimit, fallback, context_edit,
// prompt_cache, meter) around an upstream that answers at once ("layer"),
// or with the loop calling that upstream directly ("loop"). ns/round and
// cpu-ns/round are (exchange - plain call) / 2; cpu-ns is the process's CPU
// time (the garbage collector included), which does not grow while other
// processes hold the CPU.
func BenchmarkRound(b *testing.B) {
	cfg, err := config.Parse([]byte(roundConfig))
	if err != nil {
		b.Fatal(err)
	}
	log := zerolog.Nop()
	up := newRoundModel()
	routes := map[string]*pipeline.Route{}
	lookup := func(n string) *pipeline.Route { return routes[n] }
	lim := limits.New(limits.Options{Config: cfg, Logger: log})
	b.Cleanup(lim.Close)
	layer := pipeline.Chain(lim.Meter(up), ModelCallLimit,
		fallback.New(fallback.Options{Providers: cfg.Providers, Models: cfg.Models, Fallback: cfg.Middleware.Fallback, Logger: log}, lookup),
		contextedit.New(contextedit.Options{Config: cfg.Middleware.ContextEdit, Logger: log}),
		caching.NewPromptCache(caching.PromptOptions{Providers: caching.PromptProviders(cfg.Providers), Logger: log}))
	loop, err := New(Options{Tools: cfg.Tools, Loop: cfg.ToolLoop, Lookup: lookup, NewEditLog: contextedit.NewEditLog, Logger: log,
		ToolMiddleware: []pipeline.ToolMiddleware{caching.NewToolResultCache(caching.NewMemoryStore(1<<20), func(string) time.Duration { return 0 })}})
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range cfg.Models {
		routes[m.Name] = &pipeline.Route{Name: m.Name, ContextWindow: m.ContextWindow, Encoding: m.Encoding,
			Deployments: []pipeline.Target{{Provider: "api", Weight: 1, Model: m.Name}}}
	}
	body := []byte(`{"model":"tools-2","temperature":0.7,"messages":[{"role":"user","content":"compute twice"}]}`)
	plain := []byte(`{"model":"chat","temperature":0.7,"messages":[{"role":"user","content":"compute twice"}]}`)
	for _, tc := range []struct {
		name  string
		layer pipeline.Handler
	}{{"loop", up}, {"layer", layer}} {
		b.Run(tc.name, func(b *testing.B) {
			for _, r := range routes {
				r.ModelLayer = tc.layer
			}
			send := func(model string, body []byte) {
				req := &pipeline.Request{ID: "r", Body: body, Model: model, Route: routes[model], Meta: &pipeline.Meta{}}
				resp, err := loop.Chat(context.Background(), req)
				if err != nil || len(resp.Body) == 0 {
					b.Fatal(err)
				}
			}
			send("tools-2", body)
			b.ReportAllocs()
			c, n := processCPU(), 0
			for b.Loop() {
				send("tools-2", body)
				n++
			}
			ns, cpu := float64(b.Elapsed().Nanoseconds())/float64(n), float64((processCPU()-c).Nanoseconds())/float64(n)
			// The plain call as often, after the timed loop.
			c, t := processCPU(), time.Now()
			for range n {
				send("chat", plain)
			}
			ns -= float64(time.Since(t).Nanoseconds()) / float64(n)
			cpu -= float64((processCPU() - c).Nanoseconds()) / float64(n)
			b.ReportMetric(ns/roundBenchRounds, "ns/round")
			b.ReportMetric(cpu/roundBenchRounds, "cpu-ns/round")
		})
	}
}

// roundModel answers tools-2 with a calculator call per tool round (chosen
// by the tool messages already in the history), then an answer; any other
// model with the answer.
type roundModel struct{ bodies [][]byte }

func newRoundModel() *roundModel {
	m := &roundModel{}
	for i := range roundBenchRounds {
		id := "call_" + strconv.Itoa(i)
		m.bodies = append(m.bodies, []byte(completion("chatcmpl-"+strconv.Itoa(i), "", `[{"id":"`+id+`","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"`+strconv.Itoa(i)+`*2+1\"}"}}]`, "tool_calls", 100, 10)))
	}
	m.bodies = append(m.bodies, []byte(completion("chatcmpl-a", "done after 2 tool rounds", "", "stop", 100, 10)))
	return m
}

func (m *roundModel) Chat(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
	if r.Model != "tools-2" {
		return &pipeline.Response{Body: m.bodies[roundBenchRounds]}, nil
	}
	return &pipeline.Response{Body: m.bodies[min(countTools(r.Body), roundBenchRounds)]}, nil
}

// processCPU returns the CPU time this process has used, every thread.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
