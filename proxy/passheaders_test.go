package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
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
// address is not the provider's business), as a chat call does, nor the
// method and URL overrides a server may honour (X-HTTP-Method-Override:
// the tenant's allowed POST would become another request); other headers
// pass.
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
		"Forwarded", "X-Real-Ip", "X-HTTP-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-URL", "X-Rewrite-URL",
		"X-Original-Method", "X-Client-Kept"} {
		req.Header.Set(h, "v")
	}
	if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	names := <-got
	for _, bad := range []string{"x-gateway-tenant", "x-gateway-key", "x-gateway-cache", "x-forwarded-for", "x-forwarded-host", "forwarded", "x-real-ip",
		"x-http-method-override", "x-http-method", "x-method-override", "x-original-url", "x-rewrite-url", "x-original-method"} {
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
		{"basic authorization and an api key", [][2]string{{"Authorization", "Basic b3RoZXI="}, {"Api-Key", "a"}}, false, 400},
		{"empty authorization and an api key", [][2]string{{"Authorization", ""}, {"Api-Key", "a"}}, false, 400},
		{"one api key", [][2]string{{"Api-Key", "a"}}, false, 200},
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
	addr := passGateway(t, base)
	for _, input := range []string{"sse", "json"} {
		status, body := postEmbeddings(t, addr, `{"model":"m","input":"`+input+`"}`)
		decoded := body
		if input == "sse" {
			decoded = gjson.Get(strings.TrimPrefix(strings.SplitN(body, "\n", 2)[0], "data: "), "echo").Str
			if !strings.Contains(body, `caf\u00e9`) {
				t.Errorf("sse: a string without a secret was rewritten: %s", body)
			}
		}
		if status != 200 || strings.Contains(decoded, secret) || !strings.Contains(decoded, observe.Mask) {
			t.Errorf("%s: %d %s (decoded %q)", input, status, body, decoded)
		}
	}
}

// passGateway serves a gateway whose pass-through routes go to base (its
// chat handler answers nothing) and returns its address.
func passGateway(t *testing.T, base string) string {
	t.Helper()
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	return addr
}

// postEmbeddings posts body to the gateway's /v1/embeddings and returns the
// answer's status and body.
func postEmbeddings(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	c := &fasthttp.HostClient{Addr: addr}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://gw/v1/embeddings")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode(), string(resp.Body())
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
		b = observe.Secrets.RedactSecrets(b) // as the masker runs it: plain spellings go first
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

// TestPassthroughRewritesLimitEvents: an upstream stream's error event about
// the provider account's rate limits (chat's error object, Responses' error
// event and response.failed) reaches the client with the gateway's own
// message, code kept, as a 429 answer does: the provider's text names the
// account and counts its use. Other events, a model's text about rate
// limits included, pass as they are.
func TestPassthroughRewritesLimitEvents(t *testing.T) {
	t.Parallel()
	const org = "org-probe-limit-7c1"
	leak := "Rate limit reached for gpt-4o in organization " + org + " on tokens per min (TPM): Limit 30000, Used 29950, Requested 700."
	content := `data: {"type":"response.output_text.delta","delta":"an error\" about ` + org + ` rate_limit_exceeded"}`
	events := []string{
		content,
		`data: {"error":{"message":"` + leak + `","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
		"event: error\r\ndata:" + `{"type":"error","code":"rate_limit_exceeded","message":"` + leak + `","param":null,"sequence_number":3}`,
		`data: {"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"insufficient_quota","message":"` + leak + `"}}}`,
	}
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(strings.Join(events, "\n\n") + "\n\n")
	})
	_, body := postEmbeddings(t, passGateway(t, base), `{"model":"m","input":"x"}`)
	if !strings.HasPrefix(body, content+"\n\n") {
		t.Errorf("a text event was changed: %s", body)
	}
	if n := strings.Count(body, org); n != 1 {
		t.Errorf("the provider's account is named %d times (once is the model's text): %s", n, body)
	}
	data := eventData(t, body, len(events))
	for i, path := range map[int]string{1: "error", 2: "", 3: "response.error"} {
		e := data[i]
		if path != "" {
			e = e.Get(path)
		}
		if !strings.Contains(e.Get("message").Str, "upstream provider") || !strings.Contains(e.Get("code").Str, "_") {
			t.Errorf("event %d: %s", i, data[i].Raw)
		}
	}
	if !strings.Contains(data[3].Get("response.error.message").Str, "quota") {
		t.Errorf("a quota error is not told as one: %s", data[3].Raw)
	}
}

// An error event about the gateway's provider key, in a pass-through
// stream, is the gateway's own, as a 401 answer is: the provider's text
// (which may quote a fragment of the key, or name its address) is gone, in
// a chat stream's error, a Responses error event and a response.failed.
func TestPassthroughRewritesCredentialEvents(t *testing.T) {
	t.Parallel()
	const leak = "Incorrect API key provided: sk-proj-****abcd at http://provider.internal/v1"
	events := []string{
		`data: {"choices":[{"index":0,"delta":{"content":"invalid_api_key is a code"}}]}`,
		`data: {"error":{"message":"` + leak + `","type":"invalid_request_error","param":"key","code":"invalid_api_key"}}`,
		`data: {"type":"error","code":"invalid_api_key","message":"` + leak + `","param":null,"sequence_number":3}`,
		`data: {"type":"response.failed","response":{"id":"r","status":"failed","error":{"type":"authentication_error","message":"` + leak + `"}}}`,
		`data: {"error":{"message":"` + leak + `","code":"INVALID_API_KEY"}}`,
		`data: {"error":{"message":"` + leak + `","type":"authentication\u005ferror"}}`,
	}
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(strings.Join(events, "\n\n") + "\n\n")
	})
	_, body := postEmbeddings(t, passGateway(t, base), `{"model":"m","input":"x"}`)
	if !strings.HasPrefix(body, events[0]+"\n\n") {
		t.Errorf("a text event was changed: %s", body)
	}
	if strings.Contains(body, "abcd") || strings.Contains(body, "provider.internal") {
		t.Errorf("the provider's text reached the client: %s", body)
	}
	data := eventData(t, body, len(events))
	for i, path := range map[int]string{1: "error", 2: "", 3: "response.error", 4: "error", 5: "error"} {
		e := data[i]
		if path != "" {
			e = e.Get(path)
		}
		typ := pipeline.TypeUpstreamAuth
		if path == "" {
			typ = "error" // a Responses error event's type is its kind
		}
		if e.Get("message").Str != credentialsMessage || e.Get("code").Str != pipeline.CodeUpstreamAuth ||
			e.Get("type").Str != typ || (e.Get("param").Exists() && e.Get("param").Type != gjson.Null) {
			t.Errorf("event %d: %s", i, data[i].Raw)
		}
	}
	if data[2].Get("sequence_number").Int() != 3 {
		t.Errorf("the event's other fields changed: %s", data[2].Raw)
	}
	// A Responses error event must carry a param (the schema requires
	// one): null, where it was left out (a pass-through probe).
	if p := data[2].Get("param"); p.Type != gjson.Null || !p.Exists() {
		t.Errorf("the error event's param: %s", data[2].Raw)
	}
}

// An error event of a pass-through stream has the providers' addresses
// masked in its message, as the same error in a JSON answer has: only the
// key was (a pass-through probe: a completions stream and a native
// Responses stream's response.failed named http://host:port).
func TestPassthroughStreamMasksAddressesInErrors(t *testing.T) {
	t.Parallel()
	var addr string
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(`data: {"choices":[{"index":0,"delta":{"content":"set base_url to ` + addr + ` to avoid the error"}}]}` + "\n\n" +
			`data: {"type":"response.output_text.delta","delta":"` + addr + `","error":null}` + "\n\n" +
			`data: {"error":{"message":"connect to ` + addr + `/v1 failed","type":"server_error"}}` + "\n\n" +
			`data: {"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"server_error","message":"` + addr + ` is down"}}}` + "\n\n")
	})
	addr = strings.TrimSuffix(base, "/v1")
	observe.UpstreamAddrs.Add(base, addr, strings.TrimPrefix(addr, "http://")) // as the build adds a config's (config.UpstreamAddrs)
	_, body := postEmbeddings(t, passGateway(t, base), `{"model":"m","input":"x"}`)
	data := eventData(t, body, 4)
	// The model's text is its answer, an address in it included (a review:
	// the whole read was masked when a line in it held "error").
	if data[0].Get("choices.0.delta.content").Str != "set base_url to "+addr+" to avoid the error" || data[1].Get("delta").Str != addr {
		t.Errorf("text events changed: %s", body)
	}
	for _, e := range data[2:] {
		if strings.Contains(e.Raw, strings.TrimPrefix(addr, "http://")) || !strings.Contains(e.Raw, "REDACTED") {
			t.Errorf("the provider's address reached the client in an error: %s", e.Raw)
		}
	}
}

// eventData returns the data of each event of an event stream's body,
// which must have want of them.
func eventData(t *testing.T, body string, want int) []gjson.Result {
	t.Helper()
	var data []gjson.Result
	for _, line := range strings.Split(body, "\n") {
		if p, ok := strings.CutPrefix(line, "data:"); ok {
			data = append(data, gjson.Parse(p))
		}
	}
	if len(data) != want {
		t.Fatalf("%d events, want %d: %s", len(data), want, body)
	}
	return data
}

// A rewritten line keeps its own ending (CRLF framing stays CRLF), and a
// line with no rate-limit or quota code is not touched.
func TestRewriteAccountEventsKeepsLineEnds(t *testing.T) {
	t.Parallel()
	in := "data: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"org-x\"}\r\n\r\n" +
		"data: {\"type\":\"response.created\",\"response\":{\"error\":null}}\r\n\r\n"
	out := string(rewriteAccountEvents([]byte(in)))
	if strings.Contains(out, "org-x") || strings.Count(out, "\r\n") != 4 || !strings.HasSuffix(out, strings.SplitN(in, "\r\n\r\n", 2)[1]) {
		t.Fatalf("%q", out)
	}
}

// FuzzRewriteAccountEvents: any bytes are rewritten without a panic, keep
// their number of lines, and come back as they are without an "error".
func FuzzRewriteAccountEvents(f *testing.F) {
	f.Add([]byte("data: {\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"org-x\"}}\n\n"))
	f.Add([]byte("data:{\"type\":\"error\",\"code\":\"insufficient_quota\"}\r\ndata: {\"error\":1}"))
	f.Add([]byte("data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"type\":\"rate_limit_error\"}}}\n"))
	f.Add([]byte("data: {\"error\":{\"code\":\"invalid_api_key\",\"param\":\"k\",\"message\":\"sk-x\"}}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out := rewriteAccountEvents(b)
		if !bytes.Contains(b, errorWord) && !bytes.Equal(out, b) {
			t.Fatalf("%q changed into %q", b, out)
		}
		if bytes.Count(out, []byte("\n")) != bytes.Count(b, []byte("\n")) {
			t.Fatalf("%q: lines changed in %q", b, out)
		}
	})
}

// A header the gateway sets on a pass-through call is the one value the
// provider gets: a client that repeats it (two Accept-Encoding: gzip, two
// X-Request-Id) used to have its second copy sent beside the gateway's
// (fasthttp's Set replaces only the first), so the provider could answer
// compressed, past the usage meter and the secret mask.
func TestPassthroughHeadersTheGatewaySetsAreSingle(t *testing.T) {
	t.Parallel()
	got := make(chan map[string][]string, 1)
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		seen := map[string][]string{}
		for k, v := range ctx.Request.Header.All() {
			seen[strings.ToLower(string(k))] = append(seen[strings.ToLower(string(k))], string(v))
		}
		got <- seen
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"object":"list","data":[]}`)
	})
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	if _, err := passCall(t, addr, "", func(req *fasthttp.Request) {
		for range 2 {
			req.Header.Add("Accept-Encoding", "gzip")
			req.Header.Add("X-Request-Id", "client-chosen")
		}
	}); err != nil {
		t.Fatal(err)
	}
	seen := <-got
	if ae := seen["accept-encoding"]; len(ae) != 1 || ae[0] != "identity" {
		t.Errorf("Accept-Encoding at the provider: %q", ae)
	}
	if id := seen["x-request-id"]; len(id) != 1 {
		t.Errorf("X-Request-Id at the provider: %q", id)
	}
}

// A pass-through answer compressed though the gateway asked for identity
// is refused (502), not relayed: neither the usage meter nor the secret
// mask can read it, so it went uncharged and unmasked.
func TestPassthroughCompressedAnswerRefused(t *testing.T) {
	t.Parallel()
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.Response.Header.Set("Content-Encoding", "gzip")
		ctx.SetBody(fasthttp.AppendGzipBytes(nil, []byte(`{"object":"list","data":[],"usage":{"prompt_tokens":100000,"total_tokens":100000}}`)))
	})
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	resp, err := passCall(t, addr, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusBadGateway || len(resp.Header.ContentEncoding()) > 0 ||
		gjson.GetBytes(resp.Body(), "error.code").Str != "upstream_malformed" {
		t.Fatalf("%d %s: %q", resp.StatusCode(), resp.Header.ContentEncoding(), resp.Body())
	}
}

// A pass-through answer quoting the gateway's key is masked whatever its
// text type (plain text, problem+json, NDJSON, none), and so are its
// headers (an echoed key, the provider's address in Location); binary
// media go as they are. Only application/json and event streams were.
func TestPassthroughMasksEveryTextAndHeader(t *testing.T) {
	t.Parallel()
	const key = "sk-passthrough-masked-key-77"
	observe.Secrets.Add(key)
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ct := string(ctx.QueryArgs().Peek("ct"))
		if ct != "" {
			ctx.SetContentType(ct)
		} else {
			ctx.Response.Header.SetNoDefaultContentType(true)
		}
		ctx.Response.Header.Set("X-Debug-Key", key)
		ctx.Response.Header.Set("Location", "http://"+ctx.LocalAddr().String()+"/v1/files/f1")
		ctx.SetBodyString(`{"note":"` + key + `"}`)
	})
	upstreamHost := strings.TrimPrefix(strings.TrimSuffix(base, "/v1"), "http://")
	observe.UpstreamAddrs.Add(upstreamHost)
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	for _, tc := range []struct {
		ct     string
		masked bool
	}{
		{"text/plain", true}, {"application/problem+json", true}, {"application/x-ndjson", true}, {"", true},
		{"application/json; charset=utf-8", true}, {"application/problem+xml", true}, {"application/yaml", true},
		{"audio/mpeg", false}, {"application/octet-stream", false},
		{"image/svg+xml", true}, {"audio/mpeg, application/json", true}, // text under a media type; a list
	} {
		resp, err := passCall(t, addr, "/v1/embeddings?ct="+url.QueryEscape(tc.ct), nil)
		if err != nil {
			t.Fatal(err)
		}
		if body := string(resp.Body()); strings.Contains(body, key) == tc.masked {
			t.Errorf("%q: body %s", tc.ct, body)
		}
		if h := string(resp.Header.Peek("X-Debug-Key")); strings.Contains(h, key) {
			t.Errorf("%q: X-Debug-Key %s", tc.ct, h)
		}
		if l := string(resp.Header.Peek("Location")); strings.Contains(l, upstreamHost) {
			t.Errorf("%q: Location %s", tc.ct, l)
		}
	}
}

// A pass-through stream whose client leaves while the upstream is silent
// ends the upstream call at once (its connection closed), as on the chat
// route: it ran on until the provider's idle timeout, holding the
// tenant's concurrency slot and the provider generating.
func TestPassthroughStreamClientLeavesWhileUpstreamSilent(t *testing.T) {
	t.Parallel()
	ev := "data: {\"choices\":[{\"text\":\"hi\"}]}\n\n"
	base, closed := stallingUpstream(t, "text/event-stream", ev)
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	left := leaveAfter(t, addr, "/v1/completions", `{"model":"m","prompt":"hi","stream":true}`, "data:")
	select {
	case at := <-closed:
		if d := at.Sub(left); d > 3*time.Second {
			t.Fatalf("the upstream call ended %v after the client left", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call went on after the client left")
	}
}

// stallingUpstream serves one pass-through call: the head of an answer of
// contentType, its first chunk, then nothing until the gateway closes the
// connection, whose time closed receives. It returns the base URL.
func stallingUpstream(t *testing.T, contentType, first string) (string, <-chan time.Time) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	closed := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", contentType, len(first), first)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = r.ReadByte() // silent until the gateway closes the connection
		closed <- time.Now()
	}()
	return "http://" + ln.Addr().String() + "/v1", closed
}

// leaveAfter posts body to path on the gateway at addr, reads the answer
// until marker, closes the connection and returns when it did.
func leaveAfter(t *testing.T, addr, path, body, marker string) time.Time {
	t.Helper()
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fmt.Fprintf(client, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	for !strings.Contains(string(got), marker) {
		b := make([]byte, 256)
		n, err := client.Read(b)
		if err != nil {
			t.Fatalf("no %q before the client leaves: %v (%q)", marker, err, got)
		}
		got = append(got, b[:n]...)
	}
	left := time.Now()
	_ = client.Close()
	return left
}

// An answer compressed under a second Content-Encoding line (fasthttp
// keeps only the last, identity) is caught by its first bytes: the client
// never gets it as a complete answer, which the meter and the mask could
// not read.
func TestPassthroughCompressedUnderTwoHeadersCut(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			t.Parallel()
			compressedUnderTwoHeaders(t, split)
		})
	}
}

func compressedUnderTwoHeaders(t *testing.T, split bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	gz := fasthttp.AppendGzipBytes(nil, []byte(`{"object":"list","data":[],"usage":{"prompt_tokens":100000,"total_tokens":100000}}`))
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if !split {
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Encoding: identity\r\nContent-Length: %d\r\n\r\n", len(gz))
			_, _ = c.Write(gz)
			return
		}
		// The magic bytes in two reads: a first chunk of one byte.
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n%s\r\n", gz[:1])
		time.Sleep(100 * time.Millisecond)
		_, _ = fmt.Fprintf(c, "%x\r\n%s\r\n0\r\n\r\n", len(gz)-1, gz[1:])
	}()
	addr, _ := serveGateway(t, "http://"+ln.Addr().String()+"/v1", pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	if resp, err := passCall(t, addr, "", nil); err == nil && resp.StatusCode() == 200 {
		t.Fatalf("a compressed answer went out whole: %q", resp.Body())
	}
}

// passCall posts an embeddings request to the gateway at addr (uri: its
// path and query, "" for /v1/embeddings), with set's changes, and returns
// the answer, released when the test ends.
func passCall(t *testing.T, addr, uri string, set func(*fasthttp.Request)) (*fasthttp.Response, error) {
	t.Helper()
	if uri == "" {
		uri = "/v1/embeddings"
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	t.Cleanup(func() { fasthttp.ReleaseRequest(req); fasthttp.ReleaseResponse(resp) })
	req.SetRequestURI("http://gw" + uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyString(`{"model":"m","input":"hi"}`)
	if set != nil {
		set(req)
	}
	c := &fasthttp.HostClient{Addr: addr}
	return resp, c.DoTimeout(req, resp, 5*time.Second)
}

// passWithHeaders makes a pass-through call whose provider answers a JSON
// list with the headers set writes, and returns the client's answer.
func passWithHeaders(t *testing.T, set func(*fasthttp.ResponseHeader)) *fasthttp.Response {
	t.Helper()
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		set(&ctx.Response.Header)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"object":"list","data":[]}`)
	})
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	resp, err := passCall(t, addr, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Every value of a repeated answer header reaches the client (Vary: Accept
// and Vary: Origin), each masked: only the last was kept.
func TestPassthroughRepeatedResponseHeaders(t *testing.T) {
	t.Parallel()
	resp := passWithHeaders(t, func(h *fasthttp.ResponseHeader) {
		h.Add("Vary", "Accept")
		h.Add("Vary", "Origin")
	})
	var vary []string
	for _, v := range resp.Header.PeekAll("Vary") {
		vary = append(vary, string(v))
	}
	if strings.Join(vary, ",") != "Accept,Origin" {
		t.Fatalf("Vary at the client: %q", vary)
	}
}

// A pass-through answer does not carry the provider's headers about its
// own origin (Alt-Svc, HSTS, WWW-Authenticate, CORS, ...) or any in the gateway's
// namespace (an upstream's x-gateway-cache: hit is not this gateway's);
// the provider's other headers pass, and the gateway's own are its own.
func TestPassthroughDropsUpstreamOriginAndGatewayHeaders(t *testing.T) {
	t.Parallel()
	resp := passWithHeaders(t, func(h *fasthttp.ResponseHeader) {
		for _, k := range []string{"Alt-Svc", "Strict-Transport-Security", "WWW-Authenticate", "X-Gateway-Cache",
			"x-gateway-model", "X-Gateway-Budget-Remaining", "Clear-Site-Data", "NEL", "Report-To", "Content-Security-Policy",
			"Access-Control-Allow-Origin", "Cross-Origin-Resource-Policy", "X-Provider-Kept"} {
			h.Set(k, "upstream")
		}
	})
	if resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	for k, v := range resp.Header.All() {
		if string(v) == "upstream" && !strings.EqualFold(string(k), "X-Provider-Kept") {
			t.Errorf("the provider's %s reached the client", k)
		}
	}
	if string(resp.Header.Peek("X-Provider-Kept")) != "upstream" {
		t.Errorf("a provider header was dropped: %s", resp.Header.String())
	}
}

// A JSON answer whose client left while the provider stalls is read on
// for its usage only drainIdle per read: the call, and the tenant's
// concurrency slot, were held until the provider's idle or total timeout.
func TestPassthroughJSONClientLeavesWhileUpstreamStalls(t *testing.T) {
	t.Parallel()
	base, closed := stallingUpstream(t, "application/json", `{"object":"list","data":[`)
	addr, logs := loggedGateway(t, base)
	left := leaveAfter(t, addr, "/v1/embeddings", `{"model":"m","input":"hi"}`, `"data":[`)
	select {
	case at := <-closed:
		if d := at.Sub(left); d > drainIdle+3*time.Second {
			t.Fatalf("the upstream call ended %v after the client left", d)
		}
	case <-time.After(drainIdle + 10*time.Second):
		t.Fatal("the upstream call went on after the client left")
	}
	// A client that left, not an upstream failure (502).
	var line gjson.Result
	waitFor(t, 5*time.Second, func() bool {
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if gjson.Get(l, "message").Str == "request" {
				line = gjson.Parse(l)
				return true
			}
		}
		return false
	})
	if line.Get("status").Int() != statusClientClosed {
		t.Fatalf("access line %s, want status %d", line.Raw, statusClientClosed)
	}
}

// loggedGateway is serveGateway for pass-through tests that read the
// access lines.
func loggedGateway(t *testing.T, base string) (string, *lockedBuffer) {
	t.Helper()
	cfg, u := testUpstream(t, base, "")
	routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
	logs := &lockedBuffer{}
	srv := NewServer(&Runtime{Config: cfg, Routes: routes, Upstream: u,
		Chat: pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return nil, nil })}, zerolog.New(logs))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return ln.Addr().String(), logs
}

// A file of a compressed type (an archive, S3's binary/octet-stream) is
// relayed as it is: only an answer the gateway reads as text is refused
// for starting as compressed data.
func TestPassthroughCompressedFileRelayed(t *testing.T) {
	t.Parallel()
	gz := fasthttp.AppendGzipBytes(nil, []byte(strings.Repeat("hello world\n", 100)))
	for _, ct := range []string{"application/x-gzip", "binary/octet-stream", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "application/x-custom"} {
		base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType(ct)
			ctx.SetBody(gz)
		})
		addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			return nil, nil
		}))
		resp, err := passCall(t, addr, "", nil)
		if err != nil || resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), gz) {
			t.Errorf("%s: %v %d, %d of %d bytes", ct, err, resp.StatusCode(), len(resp.Body()), len(gz))
		}
	}
}

// A bearer token is trimmed of what HTTP trims around a header value
// (spaces, tabs) and nothing else: a key with a no-break space before or
// after it is another key, not the tenant's (a probe: strings.TrimSpace
// let "Bearer key\u00a0" in as "key", which a strict proxy in front would
// not have matched).
func TestBearerTrimsOnlyHTTPWhitespace(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{
		"Bearer key":        "key",
		"bearer  key \t":    "key",
		"Bearer key\u00a0":  "key\u00a0",
		"Bearer \u00a0key":  "\u00a0key",
		"Bearer key\u2003 ": "key\u2003",
	} {
		var h fasthttp.RequestHeader
		h.Set(fasthttp.HeaderAuthorization, value)
		if got := bearer(&h); got != want {
			t.Errorf("%q: bearer %q, want %q", value, got, want)
		}
	}
}
