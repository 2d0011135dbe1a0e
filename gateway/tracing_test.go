package gateway

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/gateway/mockllm"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it keeps every span posted
// to /v1/traces.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	rc := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			w.WriteHeader(400)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

func (rc *otlpReceiver) wait(t *testing.T, n int) []*tracepb.Span {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		rc.mu.Lock()
		got := append([]*tracepb.Span(nil), rc.spans...)
		rc.mu.Unlock()
		if len(got) >= n {
			return got
		}
	}
	t.Fatalf("fewer than %d spans arrived", n)
	return nil
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			v := a.Value
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetArrayValue() != nil && len(v.GetArrayValue().Values) > 0:
				return v.GetArrayValue().Values[0].GetStringValue()
			case v.GetIntValue() != 0:
				return strconv.FormatInt(v.GetIntValue(), 10)
			default:
				if v.GetBoolValue() {
					return "true"
				}
				return "false"
			}
		}
	}
	return ""
}

// A two-round tool loop whose primary model fails every time and falls
// back: one server span continuing the client's traceparent, a client span
// per upstream attempt (the failed ones marked, the fallback ones marked),
// an execute_tool span per tool call, GenAI attributes, and traceparent
// sent upstream naming the attempt's span.
func TestTracingSpanTree(t *testing.T) {
	t.Parallel()
	rc, otlpURL := newOTLPReceiver(t)
	_, toolURL := newToolServer(t, 0)
	cfg := strings.ReplaceAll(toolConfig, "{{HTTP}}", toolURL)
	cfg = strings.Replace(cfg, "context_window = 1000\n", "context_window = 1000\nfallbacks = [\"backup\"]\n", 1) + `
[[models]]
name = "backup"
provider = "up"
upstream = "up-backup"
[middleware.fallback]
breaker_failures = 100
[tracing]
enabled = true
endpoint = "` + otlpURL + `"
`
	respond := func(c *mockllm.Call) mockllm.Turn {
		if c.Model == "up-model" {
			return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "primary down")}
		}
		return twoRounds(c)
	}
	h := newHarness(t, cfg, mockllm.Options{Respond: respond})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const parentID = "00f067aa0ba902b7"
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("compute"),
		option.WithHeader("traceparent", "00-"+traceID+"-"+parentID+"-01"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Choices[0].Message.Content, "Final:") {
		t.Fatalf("answer %q", resp.Choices[0].Message.Content)
	}
	// 1 server + 6 chat attempts (3 rounds × primary and fallback) + 3 tools.
	spans := rc.wait(t, 10)
	var server *tracepb.Span
	var chats, tools []*tracepb.Span
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != traceID {
			t.Fatalf("span %q in trace %x, not the client's", s.Name, s.TraceId)
		}
		switch {
		case s.Kind == tracepb.Span_SPAN_KIND_SERVER:
			server = s
		case strings.HasPrefix(s.Name, "chat "):
			chats = append(chats, s)
		case strings.HasPrefix(s.Name, "execute_tool "):
			tools = append(tools, s)
		}
	}
	if server == nil || hex.EncodeToString(server.ParentSpanId) != parentID || attr(server, "gen_ai.request.model") != "gpt-x" {
		t.Fatalf("server span %v", server)
	}
	if len(chats) != 6 || len(tools) != 3 {
		t.Fatalf("%d chat spans, %d tool spans", len(chats), len(tools))
	}
	chatIDs := map[string]bool{}
	failed, fellBack := 0, 0
	for _, s := range chats {
		chatIDs[hex.EncodeToString(s.SpanId)] = true
		if string(s.ParentSpanId) != string(server.SpanId) || s.Kind != tracepb.Span_SPAN_KIND_CLIENT || attr(s, "gen_ai.operation.name") != "chat" {
			t.Fatalf("chat span %q: parent %x kind %v", s.Name, s.ParentSpanId, s.Kind)
		}
		// The provider by its kind's well-known name; its configured name
		// beside it.
		if attr(s, "gen_ai.provider.name") != "openai" || attr(s, "gateway.provider") != "up" {
			t.Fatalf("chat span %q: provider %q (%q)", s.Name, attr(s, "gen_ai.provider.name"), attr(s, "gateway.provider"))
		}
		// A later round's call of a deployment is a round, not a retry.
		if attr(s, "gateway.retry") != "false" {
			t.Fatalf("chat span %q (attempt %s) marked a retry", s.Name, attr(s, "gateway.attempt"))
		}
		switch attr(s, "gen_ai.request.model") {
		case "up-model":
			if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(s, "gateway.fallback") != "false" {
				t.Fatalf("failed attempt %v", s)
			}
			failed++
		case "up-backup":
			if attr(s, "gateway.fallback") != "true" || attr(s, "gen_ai.usage.input_tokens") == "" || attr(s, "gen_ai.usage.output_tokens") != "10" {
				t.Fatalf("fallback attempt %v", s.Attributes)
			}
			fellBack++
		}
	}
	if failed != 3 || fellBack != 3 {
		t.Fatalf("%d failed and %d fallback attempts", failed, fellBack)
	}
	names := map[string]int{}
	for _, s := range tools {
		if string(s.ParentSpanId) != string(server.SpanId) || attr(s, "gen_ai.operation.name") != "execute_tool" {
			t.Fatalf("tool span %q parent %x", s.Name, s.ParentSpanId)
		}
		names[attr(s, "gen_ai.tool.name")]++
	}
	if names["calculator"] != 1 || names["slow_lookup"] != 2 {
		t.Fatalf("tool spans %v", names)
	}
	// Every upstream request carried traceparent naming its attempt's span.
	for _, r := range h.mock.Requests() {
		tp := r.Header["Traceparent"]
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != traceID || !chatIDs[parts[2]] {
			t.Fatalf("upstream traceparent %q (headers %v)", tp, r.Header)
		}
	}
}

// A server call the loop refuses before it runs (arguments that are not
// JSON) gets its execute_tool span too, marked as failed: every server tool
// call has one (a tracing probe found none for refused calls).
func TestTracingSpanForRefusedToolCall(t *testing.T) {
	t.Parallel()
	rc, otlpURL := newOTLPReceiver(t)
	h := newHarness(t, baseConfig+calculatorTool+"[tracing]\nenabled = true\nendpoint = \""+otlpURL+"\"\n", mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if len(c.ToolResults) > 0 {
			return mockllm.Turn{Text: "done"}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `not json`}}}
	}})
	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("compute")); err != nil {
		t.Fatal(err)
	}
	spans := rc.wait(t, 4) // the request, two model calls, the refused tool call
	var tool *tracepb.Span
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "execute_tool ") {
			tool = s
		}
	}
	if tool == nil || tool.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(tool, "gen_ai.tool.name") != "calculator" {
		t.Fatalf("tool span %v", tool)
	}
}

// A server call a limit refuses before the tool chain (the turn's second
// call over max_tool_calls = 1) has its execute_tool span too, marked as
// failed, beside the span of the call that ran.
func TestTracingSpanForLimitedToolCall(t *testing.T) {
	t.Parallel()
	rc, otlpURL := newOTLPReceiver(t)
	h := newHarness(t, baseConfig+calculatorTool+"[tool_loop]\nmax_tool_calls = 1\n[tracing]\nenabled = true\nendpoint = \""+otlpURL+"\"\n",
		mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
			if len(c.ToolResults) > 0 {
				return mockllm.Turn{Text: "done"}
			}
			return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"1+1"}`}, {Name: "calculator", Arguments: `{"expression":"2+2"}`}}}
		}})
	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("compute")); err != nil {
		t.Fatal(err)
	}
	spans := rc.wait(t, 5) // the request, two model calls, two tool calls
	failed, ok := 0, 0
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, "execute_tool ") {
			continue
		}
		if s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			failed++
		} else {
			ok++
		}
	}
	if failed != 1 || ok != 1 {
		t.Fatalf("tool spans: %d failed, %d ok; want one of each", failed, ok)
	}
}

// Failed requests' spans say the status their client was answered with, as
// the access line does: a request the upstream refused (its call's span has
// the upstream's status too), and requests refused before the request
// layer ran (a model the config does not have, a body that is no JSON, a
// Responses request that does not translate), which had no span at all and
// now get one in a trace of their own, linked to the client's.
func TestTracingFailedRequestStatus(t *testing.T) {
	t.Parallel()
	rc, otlpURL := newOTLPReceiver(t)
	h := newLoggedHarness(t, strings.Replace(baseConfig, `log_level = "warn"`, `log_level = "info"`, 1)+"[tracing]\nenabled = true\nendpoint = \""+otlpURL+"\"\n", mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Fault: mockllm.StatusFault(429, "rate_limit_exceeded", "slow down")}
	}})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}
	for _, c := range []struct{ path, body string }{
		{"/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`},
		{"/chat/completions", `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`},
		{"/chat/completions", `{"model":`},
		{"/responses", `{"model":"gpt-x","input":[{"type":"no_such_item"}]}`},
	} {
		if st, _, b := h.post(c.path, c.body, tp); st < 400 {
			t.Fatalf("%s %s: %d %s", c.path, c.body, st, b)
		}
	}
	want := map[string]int{"429": 1, "404": 1, "400": 1} // server spans by status, chat
	spans := rc.wait(t, 5)                               // four server spans, one model call
	got := map[string]int{}
	responses := 0
	for _, s := range spans {
		// The request layer's spans continue the client's trace; a span of
		// a request refused before it is a trace of its own, linked to the
		// client's (a caller without a key must not choose its trace).
		refused := s.Kind == tracepb.Span_SPAN_KIND_SERVER && attr(s, "http.response.status_code") != "429"
		if in := hex.EncodeToString(s.TraceId) == traceID; in == refused ||
			refused && (len(s.Links) != 1 || hex.EncodeToString(s.Links[0].TraceId) != traceID) {
			t.Fatalf("span %q (refused %v) in trace %x, links %v", s.Name, refused, s.TraceId, s.Links)
		}
		st := attr(s, "http.response.status_code")
		if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || st == "" {
			t.Fatalf("span %q: status %v, http.response.status_code %q", s.Name, s.Status, st)
		}
		switch {
		case s.Kind == tracepb.Span_SPAN_KIND_CLIENT:
			if st != "429" {
				t.Fatalf("model call span status %q", st)
			}
		case s.Name == "POST /v1/responses":
			if st != "400" {
				t.Fatalf("responses span status %q", st)
			}
			responses++
		case s.Name == "POST /v1/chat/completions":
			if s.StartTimeUnixNano == 0 || s.EndTimeUnixNano < s.StartTimeUnixNano {
				t.Fatalf("span times %d..%d", s.StartTimeUnixNano, s.EndTimeUnixNano)
			}
			got[st]++
		}
	}
	if responses != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("chat server spans by status %v (want %v), %d responses spans", got, want, responses)
	}
	// Each access line names its span's trace, the refused ones' too.
	traces := map[string]bool{}
	for _, s := range spans {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			traces[hex.EncodeToString(s.TraceId)] = true
		}
	}
	lines := 0
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if gjson.Get(l, "message").Str != "request" {
			continue
		}
		lines++
		if id := gjson.Get(l, "trace_id").Str; !traces[id] {
			t.Errorf("access line with trace_id %q, not a server span's: %s", id, l)
		}
	}
	if lines != 4 {
		t.Errorf("%d access lines, want 4:\n%s", lines, h.logs.String())
	}
}
