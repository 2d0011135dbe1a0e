package proxy

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

// A pass-through call reaches the provider without the gateway's own
// control headers (any X-Gateway-*: a client's invented x-gateway-tenant
// included) and without forwarding headers the client wrote (its
// X-Forwarded-*, Forwarded, X-Real-Ip: unverified, and the client's
// address is not the provider's business), as a chat call does; other
// headers pass.
func TestPassthroughDropsGatewayAndForwardingHeaders(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		var names []string
		for k := range ctx.Request.Header.All() {
			names = append(names, strings.ToLower(string(k)))
		}
		got <- strings.Join(names, ",")
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"object":"list","data":[]}`)
	})
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	c := &fasthttp.HostClient{Addr: addr}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://gw/v1/embeddings")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyString(`{"model":"m","input":"hi"}`)
	for _, h := range []string{"X-Gateway-Tenant", "x-gateway-key", "X-Gateway-Cache", "X-Forwarded-For", "X-Forwarded-Host",
		"Forwarded", "X-Real-Ip", "X-Client-Kept"} {
		req.Header.Set(h, "v")
	}
	if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	names := <-got
	for _, bad := range []string{"x-gateway-tenant", "x-gateway-key", "x-gateway-cache", "x-forwarded-for", "x-forwarded-host", "forwarded", "x-real-ip"} {
		if strings.Contains(","+names+",", ","+bad+",") {
			t.Errorf("%s reached the provider (%s)", bad, names)
		}
	}
	if !strings.Contains(names, "x-client-kept") {
		t.Errorf("a client header was dropped: %s", names)
	}
}

// A request with two credentials is refused whatever their order, before
// any tenant is decided: a proxy in front that reads the other header
// would otherwise decide on another tenant than the gateway. One
// Authorization and an equal Api-Key pass.
func TestAmbiguousCredentialRefused(t *testing.T) {
	t.Parallel()
	addr, _ := serveGateway(t, serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"object":"list","data":[]}`)
	}), pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	c := &fasthttp.HostClient{Addr: addr}
	for _, tc := range []struct {
		name    string
		headers [][2]string
		expect  bool
		want    int
	}{
		{"two authorizations", [][2]string{{"Authorization", "Bearer a"}, {"Authorization", "Bearer b"}}, false, 400},
		{"two authorizations, expect 100-continue", [][2]string{{"Authorization", "Bearer a"}, {"Authorization", "Bearer b"}}, true, 400},
		{"two api keys", [][2]string{{"Api-Key", "a"}, {"Api-Key", "b"}}, false, 400},
		{"authorization and another api key", [][2]string{{"Authorization", "Bearer a"}, {"Api-Key", "b"}}, false, 400},
		{"authorization and the same api key", [][2]string{{"Authorization", "Bearer a"}, {"Api-Key", "a"}}, false, 200},
		{"one authorization", [][2]string{{"Authorization", "Bearer a"}}, false, 200},
	} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://gw/v1/embeddings")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.Header.DisableNormalizing()
		for _, h := range tc.headers {
			req.Header.Add(h[0], h[1])
		}
		if tc.expect {
			req.Header.Set("Expect", "100-continue")
		}
		req.SetBodyString(`{"model":"m","input":"hi"}`)
		if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.StatusCode() != tc.want || (tc.want == 400 && !strings.Contains(string(resp.Body()), `"code":"ambiguous_credential"`)) {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode(), resp.Body(), tc.want)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
}

// A pass-through answer that quotes a configured secret has it masked:
// in an event stream also when the secret is spelt with \u escapes (any
// JSON reader decodes them back), and in a 2xx JSON answer as it passes,
// a secret split between two writes included.
func TestPassthroughMasksSecretsInAnswers(t *testing.T) {
	t.Parallel()
	const secret = "sk-upstream-mask-answer-secret"
	observe.Secrets.Add(secret)
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		switch {
		case strings.Contains(string(ctx.PostBody()), `"sse"`):
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString("data: {\"echo\":\"sk-upstream-m\\u0061sk-answer-secret\",\"ok\":\"caf\\u00e9\"}\n\ndata: [DONE]\n\n")
		default:
			ctx.SetContentType("application/json")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				_, _ = w.WriteString(`{"object":"list","data":[],"echo":"Bearer sk-upstream-mask-an`)
				_ = w.Flush()
				time.Sleep(20 * time.Millisecond)
				_, _ = w.WriteString(`swer-secret"}`)
			})
		}
	})
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	c := &fasthttp.HostClient{Addr: addr}
	for _, input := range []string{"sse", "json"} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://gw/v1/embeddings")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.SetBodyString(`{"model":"m","input":"` + input + `"}`)
		if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		body := string(resp.Body())
		decoded := body
		if input == "sse" {
			decoded = gjson.Get(strings.TrimPrefix(strings.SplitN(body, "\n", 2)[0], "data: "), "echo").Str
			if !strings.Contains(body, `caf\u00e9`) {
				t.Errorf("sse: a string without a secret was rewritten: %s", body)
			}
		}
		if resp.StatusCode() != 200 || strings.Contains(decoded, secret) || !strings.Contains(decoded, observe.Mask) {
			t.Errorf("%s: %d %s (decoded %q)", input, resp.StatusCode(), body, decoded)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
}

// FuzzMaskEscaped: any bytes are masked without a panic; bytes without a
// \u escape come back as they are, and a secret spelt with escapes in a
// JSON string of a line never survives as its decoded text.
func FuzzMaskEscaped(f *testing.F) {
	const secret = "sk-fuzz-mask-escaped-secret"
	observe.Secrets.Add(secret)
	f.Add([]byte("data: {\"k\":\"sk-fuzz-m\\u0061sk-escaped-secret\"}\n\n"))
	f.Add([]byte("data: {\"k\":\"a\\\"b\\u00e9\"}\n\"\\u"))
	f.Add([]byte(`"\u"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out := maskEscaped(b)
		if !bytes.Contains(b, escapeU) && !bytes.Equal(out, b) {
			t.Fatalf("%q changed into %q", b, out)
		}
		for _, line := range bytes.Split(out, []byte("\n")) {
			if line := bytes.TrimPrefix(line, []byte("data: ")); jsonvalid.Bytes(line) {
				gjson.ParseBytes(line).ForEach(func(_, v gjson.Result) bool {
					if v.Type == gjson.String && strings.Contains(v.Str, secret) {
						t.Fatalf("%q left the secret in %q", b, out)
					}
					return true
				})
			}
		}
	})
}
