package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/mockllm"
)

// An upstream's JSON answer whose choice has no finish_reason, or a null
// one, reaches the client with "stop", as the same answer streamed ends
// and as the schema requires of an answer.
func TestAnswerWithoutFinishReason(t *testing.T) {
	t.Parallel()
	h := harnessOn(t, baseConfig, &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		finish := ""
		if strings.Contains(string(ctx.PostBody()), "null please") {
			finish = `, "finish_reason": null`
		}
		ctx.SetBodyString(`{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null` + finish + `}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}})
	for _, text := range []string{"missing please", "null please"} {
		code, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"`+text+`"}]}`, nil)
		if code != 200 || gjson.GetBytes(b, "choices.0.finish_reason").Str != "stop" {
			t.Fatalf("%s: %d %s", text, code, b)
		}
	}
}

// A compressed chat body is refused as the pass-through refuses one, 415
// unsupported_media_type, not as JSON it cannot parse (the gateway decodes
// no request body).
func TestCompressedChatBodyIs415(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{})
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write([]byte(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`))
	_ = zw.Close()
	code, _, b := h.post("/chat/completions", zb.String(), map[string]string{"Content-Encoding": "gzip"})
	if code != 415 || gjson.GetBytes(b, "error.code").Str != "unsupported_media_type" {
		t.Fatalf("%d %s", code, b)
	}
	if n := h.mock.TotalCalls(); n != 0 {
		t.Fatalf("the upstream got %d calls", n)
	}
}

// Tool-call arguments an upstream sends as an object reach the client as
// the string of that object, in a JSON answer and in a stream, outside the
// tool loop as inside it: the openai-go client reads them either way.
func TestObjectArgumentsBecomeStrings(t *testing.T) {
	t.Parallel()
	h := harnessOn(t, baseConfig, &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if gjson.GetBytes(ctx.PostBody(), "stream").Bool() {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":{"q":"x"}}}]},"finish_reason":null}]}` +
				"\n\n" + `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n")
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":{"q":"x"}}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}})
	p := userMsg("look it up")
	p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup"})}
	for _, stream := range []bool{false, true} {
		if m := h.message(p, stream, nil); len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"q":"x"}` {
			t.Fatalf("stream %v: %+v", stream, m.ToolCalls)
		}
	}
	if _, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, nil); gjson.GetBytes(b, "choices.0.message.tool_calls.0.function.arguments").Type != gjson.String {
		t.Fatalf("raw JSON: %s", b)
	}
}

// A JSON answer cut before its Content-Length ends fails the same way
// whether the client asked for JSON or for a stream (which the gateway
// makes of such an answer): upstream_cut, not the part that arrived
// served as whole.
func TestCutJSONAnswerFailsBothWays(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				var req fasthttp.Request
				if req.Read(br) != nil {
					return
				}
				body := `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop"}]}`
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body)+100)+"\r\n\r\n"+body)
			}()
		}
	}()
	h := newHarness(t, strings.Replace(baseConfig, `base_url = "{{MOCK}}"`, `base_url = "http://`+ln.Addr().String()+`/v1"`, 1), mockllm.Options{})
	for _, stream := range []string{"false", "true"} {
		code, _, b := h.post("/chat/completions", `{"model":"gpt-x","stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if code != 502 || gjson.GetBytes(b, "error.code").Str != "upstream_cut" {
			t.Fatalf("stream %s: %d %s", stream, code, b)
		}
	}
}

// A model endpoint takes a POST only: another method is 405 with Allow:
// POST, not a complaint about a body it should not have, and nothing
// reaches the provider.
func TestModelEndpointMethods(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+openPassthrough, mockllm.Options{})
	for _, m := range []string{"OPTIONS", "GET", "PUT", "DELETE"} {
		req, _ := http.NewRequest(m, h.base+"/embeddings", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || gjson.GetBytes(b, "error.code").Str != "method_not_allowed" {
			t.Errorf("%s: %d allow %q %s", m, resp.StatusCode, resp.Header.Get("Allow"), b)
		}
	}
	if n := h.mock.TotalCalls(); n != 0 {
		t.Fatalf("the provider got %d calls", n)
	}
}

// harnessOn is a harness whose provider is the server up (not the mock),
// on a loopback port of its own, with cfg's "{{MOCK}}" base URL pointing at
// it; up is shut down with the test.
func harnessOn(t *testing.T, cfg string, up *fasthttp.Server) *harness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Shutdown() })
	return newHarness(t, strings.Replace(cfg, `base_url = "{{MOCK}}"`, `base_url = "http://`+ln.Addr().String()+`/v1"`, 1), mockllm.Options{})
}
