package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

func TestNonStreamingText(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{Text: "Bonjour, ça va ?"})})
	schema := wiretest.LoadSchema(t)
	got, err := h.client.Chat.Completions.New(context.Background(), userMsg("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Choices[0].Message.Content != "Bonjour, ça va ?" || got.Model != "gpt-x" {
		t.Fatalf("content %q model %q", got.Choices[0].Message.Content, got.Model)
	}
	raw, hdr := h.lastRaw()
	if err := schema.Completion(raw); err != nil {
		t.Fatalf("schema: %v\n%s", err, raw)
	}
	if hdr.Get("X-Request-Id") == "" {
		t.Fatal("no x-request-id")
	}
	// The upstream saw its own model name and the provider's key, not the client's.
	rec := h.mock.Requests()
	if len(rec) != 1 || gjson.GetBytes(rec[0].Body, "model").Str != "up-model" {
		t.Fatalf("upstream saw %+v", rec)
	}
	if a := rec[0].Header["Authorization"]; a != "Bearer sk-upstream-secret" {
		t.Fatalf("upstream authorization %q", a)
	}
}

func TestUnknownFieldsPassUntouched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"x","cache_hint":{"k":[1,2]}}],"verbosity":"low","prompt_cache_options":{"ttl":"30m","mode":"explicit"},"x_vendor":{"a":null}}`
	if status, _, b := h.post("/chat/completions", body, nil); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	got := gjson.ParseBytes(h.mock.Requests()[0].Body)
	for _, path := range []string{"verbosity", "prompt_cache_options", "x_vendor", "messages.0.cache_hint"} {
		if got.Get(path).Raw != gjson.Get(body, path).Raw {
			t.Errorf("%s: upstream saw %s, client sent %s", path, got.Get(path).Raw, gjson.Get(body, path).Raw)
		}
	}
	if got.Get("model").Str != "up-model" {
		t.Errorf("model %s", got.Get("model").Raw)
	}
}

func TestStreamingTextAccumulates(t *testing.T) {
	t.Parallel()
	text := "Streaming works: naïve café, 日本語, emoji 🎉 and more."
	h := newHarness(t, baseConfig, mockllm.Options{
		Respond:  mockllm.Sequence(mockllm.Turn{Text: text}),
		Chunking: mockllm.Chunking{TextRunes: 3, SplitWrites: true},
	})
	schema := wiretest.LoadSchema(t)
	for _, usage := range []bool{false, true} {
		p := userMsg("hi")
		if usage {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: usage}, schema)
		if err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content != text || sum.Content != text {
			t.Fatalf("usage=%v: content %q", usage, acc.Choices[0].Message.Content)
		}
		if acc.Model != "gpt-x" || sum.Model != "gpt-x" {
			t.Fatalf("model %q", acc.Model)
		}
		if usage && (sum.Usage == nil || acc.Usage.TotalTokens == 0) {
			t.Fatalf("no usage: %s", sum.Usage)
		}
	}
}

func TestStreamingParallelClientToolCalls(t *testing.T) {
	t.Parallel()
	calls := []mockllm.ToolCall{
		{ID: "call_a", Name: "lookup_city", Arguments: `{"name":"Zürich – Ω 🎉","limit":3}`},
		{ID: "call_b", Name: "local_time", Arguments: `{"tz":"Europe/Москва"}`},
	}
	h := newHarness(t, baseConfig, mockllm.Options{
		Respond:  mockllm.Sequence(mockllm.Turn{ToolCalls: calls}),
		Chunking: mockllm.Chunking{ArgBytes: 3, SplitWrites: true},
	})
	schema := wiretest.LoadSchema(t)
	p := userMsg("weather?")
	p.Tools = []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup_city"}),
		openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "local_time"}),
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: true}, schema)
	if err != nil {
		t.Fatal(err)
	}
	got := acc.Choices[0].Message.ToolCalls
	if len(got) != 2 || acc.Choices[0].FinishReason != "tool_calls" || sum.FinishReason != "tool_calls" {
		t.Fatalf("tool calls %+v finish %q", got, acc.Choices[0].FinishReason)
	}
	for i, c := range calls {
		if got[i].ID != c.ID || got[i].Function.Name != c.Name || got[i].Function.Arguments != c.Arguments {
			t.Fatalf("call %d = %+v, want %+v", i, got[i], c)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(got[i].Function.Arguments), &v); err != nil {
			t.Fatalf("call %d arguments do not parse: %v", i, err)
		}
	}
}

func TestUpstreamErrorsKeepTheirStatus(t *testing.T) {
	t.Parallel()
	for _, status := range []int{401, 404, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, baseConfig, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{Fault: mockllm.StatusFault(status, "", "")})})
			schema := wiretest.LoadSchema(t)
			_, err := h.client.Chat.Completions.New(context.Background(), userMsg("hi"))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != status {
				t.Fatalf("non-stream: %v", err)
			}
			raw, _ := h.lastRaw()
			if err := schema.ErrorBody(raw); err != nil {
				t.Fatalf("error body: %v\n%s", err, raw)
			}
			stream := h.client.Chat.Completions.NewStreaming(context.Background(), userMsg("hi"))
			for stream.Next() {
			}
			if !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != status {
				t.Fatalf("stream: %v", stream.Err())
			}
		})
	}
}

func TestUpstreamCutMidStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{
		Text: "this answer will be cut in the middle", Fault: mockllm.CutFault(3)})})
	schema := wiretest.LoadSchema(t)
	_, sum, err := h.streamChat(userMsg("hi"), wiretest.Options{WantError: true}, schema)
	if err == nil {
		t.Fatal("the SDK stream ended without an error")
	}
	if !strings.Contains(string(sum.Error), "upstream_cut") {
		t.Fatalf("error event %s", sum.Error)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{
		Respond:    mockllm.Sequence(mockllm.Turn{Text: strings.Repeat("long answer ", 200)}),
		ChunkDelay: 20 * time.Millisecond,
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(h.base, "/v1"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"go"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	for i := 0; i < 3; i++ { // status line and a few bytes of the stream
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	closed := time.Now()
	_ = conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.mock.WaitCancelled(ctx); err != nil {
		t.Fatalf("upstream not cancelled within 1s of the client closing: %v", err)
	}
	t.Logf("upstream saw the cancellation %v after the client closed", time.Since(closed))
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(baseConfig, "[server]", "[server]\nmax_body_bytes = 65536", 1), mockllm.Options{})
	schema := wiretest.LoadSchema(t)
	cases := []struct {
		name, body  string
		status      int
		param, code string
	}{
		{"malformed", `{"model":`, 400, "", ""},
		{"no model", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model", ""},
		{"no messages", `{"model":"gpt-x"}`, 400, "messages", ""},
		{"messages not array", `{"model":"gpt-x","messages":{}}`, 400, "messages", ""},
		{"unknown model", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "model", "model_not_found"},
		{"stream not bool", `{"model":"gpt-x","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "stream", ""},
		{"too large", `{"model":"gpt-x","messages":[{"role":"user","content":"` + strings.Repeat("x", 100<<10) + `"}]}`, 413, "", "request_too_large"},
	}
	for _, c := range cases {
		status, hdr, body := h.post("/chat/completions", c.body, nil)
		if status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, status, c.status, body)
			continue
		}
		if err := schema.ErrorBody(body); err != nil {
			t.Errorf("%s: %v: %s", c.name, err, body)
		}
		if p := gjson.GetBytes(body, "error.param").Str; p != c.param {
			t.Errorf("%s: param %q, want %q", c.name, p, c.param)
		}
		if c.code != "" && gjson.GetBytes(body, "error.code").Str != c.code {
			t.Errorf("%s: code %s", c.name, body)
		}
		if hdr.Get("X-Request-Id") == "" {
			t.Errorf("%s: no x-request-id", c.name)
		}
	}
	// Wrong method.
	resp, err := http.Get(h.base + "/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET chat: %d allow=%q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// The client's own request id is kept.
	_, hdr, _ := h.post("/chat/completions", `{}`, map[string]string{"X-Request-Id": "my-id-1"})
	if hdr.Get("X-Request-Id") != "my-id-1" {
		t.Fatalf("request id %q", hdr.Get("X-Request-Id"))
	}
}

func TestModelsAndMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	schema := wiretest.LoadSchema(t)
	page, err := h.client.Models.List(context.Background())
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "gpt-x" {
		t.Fatalf("models: %v %+v", err, page)
	}
	raw, _ := h.lastRaw()
	if err := schema.Models(raw); err != nil {
		t.Fatal(err)
	}
	m, err := h.client.Models.Get(context.Background(), "gpt-x")
	if err != nil || m.ID != "gpt-x" {
		t.Fatalf("model: %v", err)
	}
	if _, err := h.client.Models.Get(context.Background(), "nope"); err == nil {
		t.Fatal("unknown model found")
	}
	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("count me")); err != nil {
		t.Fatal(err)
	}
	families := h.metrics()
	for _, name := range []string{"gateway_requests_total", "gateway_request_duration_seconds", "gateway_time_to_first_byte_seconds", "gateway_upstream_duration_seconds", "gateway_active_streams"} {
		if families[name] == nil {
			t.Errorf("metric %s missing", name)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(strings.TrimSuffix(h.base, "/v1") + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, err, resp.StatusCode)
		}
		resp.Body.Close()
	}
}

// A model id with a slash (meta-llama/...) is one path segment to the SDKs,
// which encode its slash: the gateway's own model route answers it, and no
// other method sends the encoded slash on.
func TestModelIDWithASlash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+openPassthrough+`
[[models]]
name = "org/m1"
provider = "up"
`, mockllm.Options{})
	m, err := h.client.Models.Get(context.Background(), "org/m1")
	if err != nil || m.ID != "org/m1" {
		t.Fatalf("model: %v %+v", err, m)
	}
	if p := h.mock.Requests(); len(p) != 0 {
		t.Fatalf("the lookup reached the upstream: %+v", p)
	}
	if _, err := h.client.Models.Get(context.Background(), "org/nope"); err == nil {
		t.Fatal("unknown model found")
	}
	for _, c := range []struct{ method, path string }{
		{"DELETE", "/v1/models/org%2Fm1"},
		{"GET", "/v1/models/org%252Fm1"},
		{"GET", "/v1/models/org%2F..%2Fx"},
		{"GET", "/v1/models/org/m1%2Fx"},
	} {
		req, _ := http.NewRequest(c.method, strings.TrimSuffix(h.base, "/v1")+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 400 {
			t.Fatalf("%s %s: %d", c.method, c.path, resp.StatusCode)
		}
	}
	if p := h.mock.Requests(); len(p) != 0 {
		t.Fatalf("a refused path reached the upstream: %+v", p)
	}
}

func TestPassthroughForwardsOtherPaths(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+openPassthrough, mockllm.Options{})
	status, hdr, body := h.post("/echo?x=1", `{"model":"gpt-x","input":"hello"}`, map[string]string{
		"Authorization": "Bearer sk-client", "Connection": "X-Hop, keep-alive", "X-Hop": "1", "X-Custom": "kept",
	})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	e := gjson.ParseBytes(body)
	if e.Get("path").Str != "/v1/echo" || e.Get("query").Str != "x=1" {
		t.Fatalf("forwarded to %s", body)
	}
	// The upstream got the gateway's key (its echo of it reaches the
	// client masked, as every answer quoting a configured secret does).
	if rs := h.mock.Requests(); len(rs) == 0 || rs[len(rs)-1].Header["Authorization"] != "Bearer sk-upstream-secret" {
		t.Fatalf("upstream authorization: %+v", rs)
	}
	if a := e.Get("headers.Authorization").Str; strings.Contains(a, "sk-upstream-secret") {
		t.Fatalf("the echoed key reached the client: %s", a)
	}
	if e.Get("headers.X-Hop").Exists() || e.Get("headers.X-Custom").Str != "kept" {
		t.Fatalf("hop-by-hop hygiene: %s", e.Get("headers"))
	}
	if !strings.Contains(e.Get("body").Str, `"up-model"`) {
		t.Fatalf("model not routed: %s", e.Get("body"))
	}
	if hdr.Get("X-Request-Id") == "" {
		t.Fatal("no request id")
	}
}

// HEAD of the models list and of a model is its GET without the body, as
// RFC 9110 has it (health checks and link checkers send HEAD); another
// method on the list is a 405 naming both.
func TestModelsAnswerHEAD(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	for _, p := range []string{"/models", "/models/gpt-x"} {
		get, _, body := send(t, http.MethodGet, h.base+p, "", "")
		req, _ := http.NewRequest(http.MethodHead, h.base+p, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if get != http.StatusOK || resp.StatusCode != http.StatusOK || len(b) != 0 ||
			resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("HEAD %s: %d %v %q (GET: %d, %d bytes)", p, resp.StatusCode, resp.Header, b, get, len(body))
		}
	}
	if status, hdr, b := send(t, http.MethodPut, h.base+"/models", "", ""); status != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" {
		t.Fatalf("PUT /models: %d %v %s", status, hdr, b)
	}
}
