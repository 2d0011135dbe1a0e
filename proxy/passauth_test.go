package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

// TestPassthroughKeepsTheGatewaysAccount: a pass-through error answer
// reaches the client as the chat route's envelope: one about the gateway's
// provider credentials (401, 403, or a credentials code at any status)
// with the gateway's own message, never the upstream's text, which quotes
// the key; any other with the gateway's secrets masked in it; and
// no pass-through answer carries the gateway's provider organisation,
// project or cookies.
func TestPassthroughKeepsTheGatewaysAccount(t *testing.T) {
	t.Parallel()
	base := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Openai-Organization", "org-gateway-account")
		ctx.Response.Header.Set("Openai-Project", "proj_gateway")
		ctx.Response.Header.Set("Set-Cookie", "__cf_bm=gateway-session")
		ctx.Response.Header.Set("X-Kept", "yes")
		ctx.SetContentType("application/json")
		switch body := string(ctx.PostBody()); {
		case strings.Contains(body, "echo-400"), strings.Contains(body, "echo-429"):
			// An upstream that quotes the Authorization header it got (the
			// gateway's key, registered as a secret below).
			ctx.Response.Header.Set("Retry-After", "7")
			ctx.SetStatusCode(400)
			if strings.Contains(body, "echo-429") {
				ctx.SetStatusCode(429)
			}
			ctx.SetBodyString(`{"error":{"message":"Invalid header value: Bearer sk-upstream-passthrough-secret","type":"invalid_request_error","param":"input","code":null}}`)
			return
		case strings.Contains(body, "stream-echo"):
			// A 200 event stream with an error event quoting the key, the
			// key cut between two writes.
			ctx.SetContentType("text/event-stream")
			if strings.Contains(body, "stream-echo-case") {
				ctx.SetContentType("Text/Event-Stream; charset=utf-8") // types compare without regard to case
			}
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				_, _ = w.WriteString("data: {\"x\":1,\"api_key\":\"model-wrote-this\"}\n\nevent: error\ndata: {\"error\":{\"message\":\"bad key Bearer sk-upstream-pass")
				_ = w.Flush()
				time.Sleep(20 * time.Millisecond)
				_, _ = w.WriteString("through-secret\"}}\n\ndata: [DONE]\n\n")
			})
			return
		case strings.Contains(body, "ae-check"):
			ctx.SetBodyString(`{"accept_encoding":"` + string(ctx.Request.Header.Peek("Accept-Encoding")) + `","cookie":"` +
				string(ctx.Request.Header.Peek("Cookie")) + `","x_api_key":"` + string(ctx.Request.Header.Peek("X-Api-Key")) + `"}`)
			return
		case strings.Contains(body, "key-400"):
			ctx.SetStatusCode(400)
			ctx.SetBodyString(`{"error":{"message":"key sk-upstream-passthrough-secret is revoked","type":"invalid_request_error","code":"invalid_api_key"}}`)
			return
		}
		if strings.Contains(string(ctx.PostBody()), "denied") {
			ctx.SetStatusCode(401)
			ctx.SetBodyString(`{"error":{"message":"Incorrect API key provided: sk-proj-abc***wxyz","type":"invalid_request_error","code":"invalid_api_key"}}`)
			return
		}
		ctx.SetBodyString(`{"object":"list","data":[]}`)
	})
	addr, _ := serveGateway(t, base, pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return nil, nil
	}))
	c := &fasthttp.HostClient{Addr: addr}
	observe.Secrets.Add("sk-upstream-passthrough-secret")
	for _, input := range []string{"ok", "denied", "echo-400", "echo-429", "key-400", "stream-echo", "stream-echo-case", "ae-check"} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://gw/v1/embeddings")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.SetBodyString(`{"model":"m","input":"` + input + `"}`)
		req.Header.Set("Accept-Encoding", "gzip")
		req.Header.Set("Cookie", "gw_session=client-session")
		req.Header.Set("X-Api-Key", "sk-client-gateway-key")
		if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"Openai-Organization", "Openai-Project", "Set-Cookie"} {
			if v := resp.Header.Peek(h); len(v) > 0 {
				t.Errorf("%s: %s: %s reached the client", input, h, v)
			}
		}
		switch input {
		case "ok":
			if resp.StatusCode() != 200 || string(resp.Header.Peek("X-Kept")) != "yes" {
				t.Errorf("ok: %d, X-Kept %q", resp.StatusCode(), resp.Header.Peek("X-Kept"))
			}
		case "ae-check":
			// Compressed, an error or an event stream could not be masked:
			// every pass-through call asks for identity, whatever the
			// client accepts.
			if got := gjson.GetBytes(resp.Body(), "accept_encoding").Str; got != "identity" {
				t.Errorf("ae-check: the upstream was asked for %q", got)
			}
			// The client's cookies and X-Api-Key are the client's, towards
			// the gateway: the provider gets neither.
			if c, k := gjson.GetBytes(resp.Body(), "cookie").Str, gjson.GetBytes(resp.Body(), "x_api_key").Str; c != "" || k != "" {
				t.Errorf("ae-check: the upstream got Cookie %q and X-Api-Key %q", c, k)
			}
		case "stream-echo", "stream-echo-case":
			got := string(resp.Body())
			if resp.StatusCode() != 200 || strings.Contains(got, "passthrough-secret") || !strings.Contains(got, `data: {"x":1,"api_key":"model-wrote-this"}`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
				t.Errorf("stream-echo: %d %q: want the stream whole with the key masked", resp.StatusCode(), got)
			}
		case "echo-400", "echo-429", "key-400":
			// Every error status: the chat route's envelope, the
			// upstream's status (and a 429's retry-after) kept, the key
			// never.
			want := 400
			if input == "echo-429" {
				want = 429
			}
			if resp.StatusCode() != want || gjson.GetBytes(resp.Body(), "error.message").Str == "" ||
				strings.Contains(string(resp.Body()), "sk-upstream-passthrough-secret") {
				t.Errorf("%s: %d %s: want %d with the key masked", input, resp.StatusCode(), resp.Body(), want)
			}
			if input == "echo-429" && string(resp.Header.Peek("Retry-After")) != "7" {
				t.Errorf("%s: retry-after %q, want the upstream's 7", input, resp.Header.Peek("Retry-After"))
			}
			if input == "echo-400" && gjson.GetBytes(resp.Body(), "error.param").Str != "input" {
				t.Errorf("%s: the upstream's param was not kept: %s", input, resp.Body())
			}
			if input == "key-400" && gjson.GetBytes(resp.Body(), "error.code").Str != pipeline.CodeUpstreamAuth {
				t.Errorf("%s: an error about the key, at 400: %s, want the gateway's own message", input, resp.Body())
			}
		case "denied":
			msg := gjson.GetBytes(resp.Body(), "error.message").Str
			if resp.StatusCode() != 401 || msg == "" || strings.Contains(string(resp.Body()), "sk-proj") {
				t.Errorf("denied: %d %s: want 401 with the gateway's own message", resp.StatusCode(), resp.Body())
			}
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
}

// TestCredentialErrorEventsAreNotQuoted: an error event in a stream (status
// 200, so no 401 to go by) that is about the gateway's credentials is
// answered with the gateway's message, and a registered secret in any
// upstream message is masked.
func TestCredentialErrorEventsAreNotQuoted(t *testing.T) {
	t.Parallel()
	for i, body := range []string{
		`{"error":{"message":"Incorrect API key provided: sk-proj-abc***wxyz","type":"invalid_request_error","code":"invalid_api_key"}}`,
		`{"error":{"message":"invalid x-api-key sk-ant-abc","type":"authentication_error"}}`,
		`{"type":"error","error":{"message":"permission denied for key sk-ant-abc","type":"permission_error"}}`,
	} {
		env := mapUpstream(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 502, Body: []byte(body)})
		if strings.Contains(string(env.body), "sk-") {
			t.Errorf("event %d: %s", i, env.body)
		}
	}
	env := mapUpstream(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 400, Body: []byte(`{"error":{"message":"bad input","type":"invalid_request_error"}}`)})
	if gjson.GetBytes(env.body, "error.message").Str != "bad input" {
		t.Errorf("an ordinary upstream message was not kept: %s", env.body)
	}
	observe.Secrets.Add("sk-registered-secret-1234")
	env = mapUpstream(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 400, Body: []byte(`{"error":{"message":"model not found for sk-registered-secret-1234","type":"invalid_request_error"}}`)})
	if strings.Contains(string(env.body), "sk-registered") {
		t.Errorf("a registered secret was quoted back: %s", env.body)
	}
	// In every field passed on, not only the message.
	env = mapUpstream(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 400, Body: []byte(`{"error":{"message":"bad","type":"invalid_request_error","param":"sk-registered-secret-1234","code":"sk-registered-secret-1234"}}`)})
	if strings.Contains(string(env.body), "sk-registered") {
		t.Errorf("a registered secret was quoted back in param or code: %s", env.body)
	}
}

// FuzzLineMasker: an event stream comes out the same however its reads cut
// it (a secret never spans a line), and every byte not masked goes out.
func FuzzLineMasker(f *testing.F) {
	observe.Secrets.Add("sk-fuzz-line-secret")
	f.Add([]byte("data: {\"a\":1}\n\nevent: error\ndata: Bearer sk-fuzz-line-secret\n\n"), uint16(30))
	f.Add([]byte("data: {\"api_key\":\"sk-fuzz-line-secret\"}\n\n"), uint16(20))
	f.Add([]byte("no newline at all"), uint16(3))
	feed := func(parts ...[]byte) []byte {
		var m lineMasker
		var got []byte
		for i, p := range parts {
			out, n := m.lines(p, i == len(parts)-1)
			got = append(got, out...)
			m.drop(n)
		}
		return got
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		i := int(cut) % (len(b) + 1)
		want := feed(b)
		if got := feed(b[:i], b[i:], nil); string(got) != string(want) {
			t.Fatalf("cut at %d: %q, whole %q", i, got, want)
		}
		if bytes.Contains(want, []byte("sk-fuzz-line-secret")) {
			t.Fatalf("the secret went out: %q", want)
		}
		// Only the configured secrets: an answer's credential-looking
		// values are its data.
		if !bytes.Contains(b, []byte("sk-fuzz")) && string(want) != string(b) {
			t.Fatalf("bytes changed with nothing to mask: %q -> %q", b, want)
		}
	})
}

// TestLineMaskerLongLineKeepsSecretWhole: a line longer than the bound goes
// out before its end, but a secret the forced cut would split waits whole
// for the next bytes and goes out masked. Cutting at the bound wrote the
// secret's first part in clear.
func TestLineMaskerLongLineKeepsSecretWhole(t *testing.T) {
	const secret = "sk-straddling-secret-0123456789"
	observe.Secrets.Add(secret)
	for _, split := range []int{1, 2, 10, len(secret) - 1} {
		var m lineMasker
		var got []byte
		fill := bytes.Repeat([]byte("a"), maxEventBytes-split+1) // the secret's first bytes push it over
		parts := [][]byte{append(fill, secret[:split]...), []byte(secret[split:] + " tail\n")}
		for _, p := range parts {
			out, n := m.lines(p, false)
			got = append(got, out...)
			m.drop(n)
		}
		out, n := m.lines(nil, true)
		got = append(got, out...)
		m.drop(n)
		if i := bytes.Index(got, []byte("sk-stra")); i >= 0 {
			t.Fatalf("split %d: the secret's start went out in clear: %q", split, got[i:min(len(got), i+len(secret))])
		}
		if !bytes.HasSuffix(got, []byte(" tail\n")) || !bytes.HasPrefix(got, fill) {
			t.Fatalf("split %d: %d bytes out, ending %q", split, len(got), got[max(0, len(got)-20):])
		}
	}
}

// feedJSON runs a JSON answer through a masker in the given parts.
func feedJSON(parts ...[]byte) []byte {
	m := lineMasker{json: true}
	var got []byte
	for i, p := range parts {
		out, n := m.lines(p, i == len(parts)-1)
		got = append(got, out...)
		m.drop(n)
	}
	return got
}

// A pass-through JSON answer that spells a secret with \u escapes (any
// JSON reader decodes it to the key) goes out masked, wherever the reads
// cut it: the string still open at a read's end is held until it closes.
func TestJSONMaskerEscapedSecret(t *testing.T) {
	const secret = "sk-json-escaped-secret-42"
	observe.Secrets.Add(secret)
	body := []byte(`{"object":"list","note":"\u0073k-json-escaped-secret-42 and sk-json-escaped\u002dsecret-42","data":[1.5,2]}`)
	for i := 0; i <= len(body); i++ {
		for _, parts := range [][][]byte{{body[:i], body[i:]}, {body[:i], body[i:], nil}} {
			got := feedJSON(parts...)
			var v struct{ Note string }
			if err := json.Unmarshal(got, &v); err != nil {
				t.Fatalf("cut at %d: %q is not JSON: %v", i, got, err)
			}
			if strings.Contains(v.Note, "secret-42") || !strings.Contains(v.Note, observe.Mask) {
				t.Fatalf("cut at %d: note %q", i, v.Note)
			}
		}
	}
}

// FuzzJSONMasker: a JSON answer comes out the same however its reads cut
// it, no configured secret goes out in a string, escaped or not, and
// nothing changes where there is none.
func FuzzJSONMasker(f *testing.F) {
	observe.Secrets.Add("sk-fuzz-json-secret")
	f.Add([]byte(`{"a":"\u0073k-fuzz-json-secret","b":"x\\\"y"}`), uint16(9), uint16(30))
	f.Add([]byte(`{"k":"sk-fuzz-json-secret"}`), uint16(3), uint16(12))
	f.Add([]byte(`["a\\","b\"c",1]`), uint16(4), uint16(6))
	f.Add([]byte("a\"b\n\"\\u0073k-fuzz-json-secret\""), uint16(5), uint16(30)) // a raw newline inside quotes: not JSON, cut anywhere
	f.Fuzz(func(t *testing.T, b []byte, c1, c2 uint16) {
		i, j := int(c1)%(len(b)+1), int(c2)%(len(b)+1)
		if i > j {
			i, j = j, i
		}
		want := feedJSON(b)
		if got := feedJSON(b[:i], b[i:j], b[j:]); string(got) != string(want) {
			t.Fatalf("cut at %d, %d: %q, whole %q", i, j, got, want)
		}
		if jsonvalid.Bytes(b) {
			if !jsonvalid.Bytes(want) {
				t.Fatalf("%q masked into %q, not JSON", b, want)
			}
			var v any
			if err := json.Unmarshal(want, &v); err == nil && strings.Contains(fmt.Sprint(v), "sk-fuzz-json-secret") {
				t.Fatalf("the secret went out: %q", want)
			}
		}
		if !bytes.Contains(b, []byte("sk-fuzz")) && !bytes.Contains(b, []byte(`\u`)) && string(want) != string(b) {
			t.Fatalf("bytes changed with nothing to mask: %q -> %q", b, want)
		}
	})
}
