package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

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
