package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/internal/teststream"
	"github.com/llmgw/gateway/pipeline"
)

// recorded runs one request through Request and ModelCall (called twice:
// the second call a retry of the same deployment) and returns the ended
// spans, server span last.
func recorded(t *testing.T, r *pipeline.Request, up pipeline.Handler) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := &Tracer{tp: tp, tr: tp.Tracer(instrumentation)}
	tr.SetProviders(map[string]string{"up": "openai"})
	call := tr.ModelCall(up)
	h := tr.Request()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		if _, err := call.Chat(ctx, r); err == nil {
			t.Fatal("the first attempt should fail")
		}
		r.Meta.Set("x-gateway-cache", "miss")
		return call.Chat(ctx, r)
	}))
	resp, err := h.Chat(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Stream != nil {
		var err error
		for err == nil {
			_, err = resp.Stream.Next()
		}
		resp.Stream.Close()
	}
	return rec.Ended()
}

// attrList renders a span's attributes as sorted key=value lines.
func attrList(s sdktrace.ReadOnlySpan) string {
	var out []string
	for _, kv := range s.Attributes() {
		out = append(out, fmt.Sprintf("%s=%s", kv.Key, kv.Value.String()))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestSpanAttributes(t *testing.T) {
	t.Parallel()
	route := &pipeline.Route{Name: "gpt-x", Deployments: []pipeline.Target{{Provider: "up", Upstream: "gpt-x-up", Model: "gpt-x"}}}
	for _, tc := range []struct {
		name      string
		stream    bool
		responses bool
	}{{"json", false, false}, {"stream", true, false}, {"responses", false, true}, {"responses stream", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := 0
			up := pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
				n++
				if n == 1 {
					return nil, &pipeline.UpstreamError{Status: 503, Provider: "up"}
				}
				if !tc.stream {
					return &pipeline.Response{Body: []byte(`{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5}}`)}, nil
				}
				return &pipeline.Response{Stream: teststream.Chunks(`{"choices":[{"delta":{"content":"hi"}}]}`, `{"choices":[{"delta":{},"finish_reason":"length"}]}`,
					`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4,"cache_write_tokens":2}}}`)}, nil
			})
			r := &pipeline.Request{Model: "gpt-x", Route: route, Stream: tc.stream, Body: []byte(`{"model":"gpt-x","messages":[]}`),
				Meta: &pipeline.Meta{}, Tenant: &pipeline.Tenant{Name: "team"}}
			endpoint := "/v1/chat/completions"
			if tc.responses {
				r.Messages.Input, endpoint = true, "/v1/responses"
			}
			spans := recorded(t, r, up)
			if len(spans) != 3 {
				t.Fatalf("%d spans", len(spans))
			}
			failed, ok, server := spans[0], spans[1], spans[2]
			stream := fmt.Sprint(tc.stream)
			if server.Name() != "POST "+endpoint || server.SpanKind() != trace.SpanKindServer {
				t.Fatalf("server span %q %v", server.Name(), server.SpanKind())
			}
			want := sortedAttrs("gateway.stream=" + stream + " gateway.tenant=team gen_ai.operation.name=chat gen_ai.request.model=gpt-x http.request.method=POST url.path=" + endpoint +
				" http.response.status_code=200")

			if got := attrList(server); got != want {
				t.Fatalf("server span:\n got %s\nwant %s", got, want)
			}
			if ev := server.Events(); len(ev) != 1 || ev[0].Name != "gateway.cache_lookup" || ev[0].Attributes[0].Value.AsString() != "miss" {
				t.Fatalf("server events %v", ev)
			}
			if r.TraceID != server.SpanContext().TraceID().String() {
				t.Fatalf("TraceID %q", r.TraceID)
			}
			for _, s := range []sdktrace.ReadOnlySpan{failed, ok} {
				if s.Name() != "chat gpt-x-up" || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != server.SpanContext().SpanID() {
					t.Fatalf("call span %q %v", s.Name(), s.SpanKind())
				}
			}
			want = "error.type=upstream_503 gateway.attempt=1 gateway.fallback=false gateway.provider=up gateway.retry=false gateway.stream=" + stream +
				" gen_ai.operation.name=chat gen_ai.provider.name=openai gen_ai.request.model=gpt-x-up http.response.status_code=503"
			if got := attrList(failed); got != want || failed.Status().Code != codes.Error || len(failed.Events()) != 1 {
				t.Fatalf("failed call:\n got %s %v %v\nwant %s", got, failed.Status(), failed.Events(), want)
			}
			usage, finish, cache := "10 5", "stop", ""
			if tc.stream { // with prompt-cache reads and writes
				usage, finish, cache = "7 3", "length", " gen_ai.usage.cache_read.input_tokens=4 gen_ai.usage.cache_creation.input_tokens=2"
			}
			want = sortedAttrs("gateway.attempt=2 gateway.fallback=false gateway.retry=true gateway.stream=" + stream +
				" gen_ai.operation.name=chat gateway.provider=up gen_ai.provider.name=openai gen_ai.request.model=gpt-x-up gen_ai.response.model=gpt-x-up" +
				" gen_ai.usage.input_tokens=" + strings.Fields(usage)[0] + " gen_ai.usage.output_tokens=" + strings.Fields(usage)[1] +
				" gen_ai.response.finish_reasons=[\"" + finish + "\"]" + cache)
			if got := attrList(ok); got != want || ok.Status().Code == codes.Error {
				t.Fatalf("answered call:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func sortedAttrs(s string) string {
	f := strings.Fields(s)
	slices.Sort(f)
	return strings.Join(f, " ")
}

// TestUnsampledRequest: a request that is not sampled (the client's
// traceparent says so) records no span, and its model and tool calls start
// none either: the upstream and the tool see the request's own span
// context, not sampled, in the client's trace.
func TestUnsampledRequest(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	tr := &Tracer{tp: tp, tr: tp.Tracer(instrumentation)}
	var atUpstream, atTool trace.SpanContext
	call := tr.ModelCall(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		atUpstream = trace.SpanContextFromContext(ctx)
		return &pipeline.Response{Body: []byte(`{"choices":[{"finish_reason":"stop"}]}`)}, nil
	}))
	tool := tr.Tool()(pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		atTool = trace.SpanContextFromContext(ctx)
		return &pipeline.ToolResult{}, nil
	}))
	var atRequest trace.SpanContext
	h := tr.Request()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		atRequest = trace.SpanContextFromContext(ctx)
		if _, err := tool.CallTool(ctx, &pipeline.ToolCall{Name: "calc", ID: "c1"}); err != nil {
			return nil, err
		}
		return call.Chat(ctx, r)
	}))
	r := &pipeline.Request{Model: "gpt-x", Body: []byte(`{"model":"gpt-x","messages":[]}`), Meta: &pipeline.Meta{},
		Hints: pipeline.Hints{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}}
	if _, err := h.Chat(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Started()); n != 0 {
		t.Fatalf("%d spans started", n)
	}
	if atRequest.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || atRequest.IsSampled() {
		t.Fatalf("request span context %v", atRequest)
	}
	// The access line names the trace all the same (a tracing probe found
	// no trace_id on an unsampled request's line).
	if r.TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("TraceID %q", r.TraceID)
	}
	if !atUpstream.Equal(atRequest) || !atTool.Equal(atRequest) {
		t.Fatalf("call and tool run in %v and %v, want the request's %v", atUpstream, atTool, atRequest)
	}
}

// With capture_content, a model call's span carries its answer, streamed
// or not: a stream's text, gathered from its chunks (a tracing probe found
// only the JSON answer's).
func TestCapturedAnswer(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		tr := &Tracer{tp: tp, tr: tp.Tracer(instrumentation), content: true}
		up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			if !stream {
				return &pipeline.Response{Body: []byte(`{"choices":[{"message":{"role":"assistant","content":"Hello there"},"finish_reason":"stop"}]}`)}, nil
			}
			return &pipeline.Response{Stream: teststream.Chunks(`{"choices":[{"delta":{"role":"assistant","content":"Hello"}}]}`,
				`{"choices":[{"delta":{"content":" there"}}]}`, `{"choices":[{"delta":{},"finish_reason":"stop"}]}`)}, nil
		})
		r := &pipeline.Request{Model: "m", Stream: stream, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), Meta: &pipeline.Meta{}}
		resp, err := tr.ModelCall(up).Chat(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Stream != nil {
			for err == nil {
				_, err = resp.Stream.Next()
			}
			resp.Stream.Close()
		}
		spans := rec.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans", len(spans))
		}
		var out string
		for _, kv := range spans[0].Attributes() {
			if kv.Key == "gen_ai.output.messages" {
				out = kv.Value.AsString()
			}
		}
		if !strings.Contains(out, `"content":"Hello there"`) {
			t.Fatalf("stream %v: gen_ai.output.messages %q", stream, out)
		}
	}
}

// An execute_tool span names the tool that ran when the loop resolved a
// near miss, and a name the model made up is bounded and valid UTF-8 (an
// invalid attribute would make the exporter drop its whole batch).
func TestToolSpanName(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := &Tracer{tp: tp, tr: tp.Tracer(instrumentation)}
	tool := tr.Tool()(pipeline.ToolHandlerFunc(func(_ context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		if c.Name == "calculatr" {
			return &pipeline.ToolResult{Name: "calculator"}, nil // resolved
		}
		return &pipeline.ToolResult{Name: c.Name, IsError: true}, nil // unknown
	}))
	long := strings.Repeat("x", 300) + "\xff"
	for _, name := range []string{"calculatr", long} {
		if _, err := tool.CallTool(context.Background(), &pipeline.ToolCall{Name: name, ID: "c1"}); err != nil {
			t.Fatal(err)
		}
	}
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].Name() != "execute_tool calculator" {
		t.Fatalf("spans %d, first %q", len(spans), spans[0].Name())
	}
	if n := spans[1].Name(); len(n) > len("execute_tool ")+maxToolName || !utf8.ValidString(n) {
		t.Fatalf("made-up name: %d bytes, valid %v", len(n), utf8.ValidString(n))
	}
	for _, kv := range spans[0].Attributes() {
		if kv.Key == "gen_ai.tool.name" && kv.Value.AsString() != "calculator" {
			t.Fatalf("gen_ai.tool.name %q", kv.Value.AsString())
		}
	}
}

// A retry is a second call of a deployment in one tool-loop round; the
// next round's call of it is none. The attempt number counts every call
// of the request.
func TestAttemptRetryPerRound(t *testing.T) {
	t.Parallel()
	var st requestState
	for i, want := range []struct {
		round, n int
		retry    bool
	}{{0, 1, false}, {0, 2, true}, {1, 3, false}, {1, 4, true}, {2, 5, false}} {
		n, retry := st.attempt("up", "m", want.round)
		if n != want.n || retry != want.retry {
			t.Errorf("call %d (round %d): attempt %d retry %v, want %d %v", i, want.round, n, retry, want.n, want.retry)
		}
	}
}

// A stream that fails after its head (an upstream cut) or that its client
// leaves carries on its server span the status its access line shows, not
// the head's 200.
func TestStreamFailureStatus(t *testing.T) {
	t.Parallel()
	route := &pipeline.Route{Name: "gpt-x", Deployments: []pipeline.Target{{Provider: "up", Upstream: "gpt-x-up", Model: "gpt-x"}}}
	cut := &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: "up"}
	for _, tc := range []struct {
		name  string
		reads int // Next calls before Close; -1: to the end
		want  string
	}{{"complete", -1, "200"}, {"cut", -1, "502"}, {"client left", 1, "499"}, {"closed early for no reason given", 1, "200"}} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		tr := &Tracer{tp: tp, tr: tp.Tracer(instrumentation)}
		tr.SetErrorStatus(func(err error) int {
			if errors.Is(err, pipeline.ErrClientGone) {
				return 499
			}
			return 502
		})
		h := tr.Request()(pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			chunks := []string{`{"choices":[{"delta":{"content":"hi"}}]}`, `{"choices":[{"delta":{"content":" there"}}]}`}
			if tc.name == "cut" {
				return &pipeline.Response{Stream: &failingStream{Stream: teststream.Chunks(chunks...), err: cut}}, nil
			}
			return &pipeline.Response{Stream: teststream.Chunks(chunks...)}, nil
		}))
		r := &pipeline.Request{Model: "gpt-x", Route: route, Stream: true, Body: []byte(`{"model":"gpt-x","messages":[]}`), Meta: &pipeline.Meta{}}
		resp, err := h.Chat(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; tc.reads < 0 || i < tc.reads; i++ {
			if _, err := resp.Stream.Next(); err != nil {
				break
			}
		}
		var why error
		if tc.name == "client left" {
			why = pipeline.ErrClientGone // the sink's failure, as it closes the stream (pipeline.CloseStream)
		}
		pipeline.CloseStream(resp.Stream, why)
		spans := rec.Ended()
		if len(spans) != 1 || !strings.Contains(attrList(spans[0]), "http.response.status_code="+tc.want) {
			t.Errorf("%s: %d spans, %s", tc.name, len(spans), attrList(spans[len(spans)-1]))
		}
	}
}

// failingStream is s, then err instead of its end.
type failingStream struct {
	pipeline.Stream
	err error
}

func (f *failingStream) Next() ([]byte, error) {
	c, err := f.Stream.Next()
	if err == io.EOF {
		return nil, f.err
	}
	return c, err
}
