package gateway

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3/option"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/llmgw/gateway/mockllm"
)

// echoSpec writes a spec of one operation, getItem, whose servers URL is
// server, and returns its path.
func echoSpec(t *testing.T, server string) string {
	t.Helper()
	spec := filepath.Join(t.TempDir(), "spec.json")
	doc := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"` + server + `"}],
"paths":{"/items/{id}":{"get":{"operationId":"getItem","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}]}}}}`
	if err := os.WriteFile(spec, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return spec
}

// callsGetItem is a model that calls t_getItem, then answers with the
// tool's result.
var callsGetItem = mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
	if c.LastRole == "tool" {
		return mockllm.Turn{Text: "result: " + strings.Join(c.ToolResults, "")}
	}
	return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "t_getItem", Arguments: `{"id":"1"}`}}}
}}

// An OpenAPI operation's request carries traceparent naming its
// execute_tool span, as an http tool's does: the API's own spans join the
// client's trace (a probe found none sent).
func TestOpenAPITraceparent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Get("Traceparent")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"1"}`))
	}))
	t.Cleanup(api.Close)
	rc, otlpURL := newOTLPReceiver(t)
	cfg := baseConfig + `
[[openapi]]
name = "t"
spec = "` + echoSpec(t, api.URL) + `"
prefix = "t_"
[tracing]
enabled = true
endpoint = "` + otlpURL + `"
`
	h := newHarness(t, cfg, callsGetItem)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("get"),
		option.WithHeader("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")); err != nil {
		t.Fatal(err)
	}
	var tool *tracepb.Span
	for _, s := range rc.wait(t, 4) { // the request, two model calls, the tool call
		if strings.HasPrefix(s.Name, "execute_tool ") {
			tool = s
		}
	}
	mu.Lock()
	defer mu.Unlock()
	parts := strings.Split(got, "-")
	if tool == nil || len(parts) != 4 || parts[1] != traceID || parts[2] != hex.EncodeToString(tool.SpanId) {
		t.Fatalf("the API got traceparent %q; want trace %s, the tool span %x", got, traceID, tool.GetSpanId())
	}
}

// A credential in the spec's own server URL, base_url when none is
// configured, is masked in what the model and the client see, as one in a
// configured base_url is.
func TestOpenAPIMasksTheSpecServerURL(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("you asked " + r.URL.RequestURI()))
	}))
	t.Cleanup(api.Close)
	cfg := baseConfig + `
[[openapi]]
name = "t"
spec = "` + echoSpec(t, api.URL+"/?key=SPECSRVKEY-8a7d1&token=SPECTOK-31c9e") + `"
prefix = "t_"
`
	h := newHarness(t, cfg, callsGetItem)
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("get"))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Choices[0].Message.Content
	if !strings.Contains(got, "/items/1?key=[REDACTED]&token=[REDACTED]") {
		t.Fatalf("answer %q", got)
	}
}
