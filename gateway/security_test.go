package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// Security regressions of the pass-through and operator routes: each of
// these requests went around tenant policy before the fix.

// tenantConfig has two keys: "sk-team" may use gpt-x only, with a token cap
// and a body limit; "sk-ops" has no restriction. secret-model exists.
const tenantConfig = baseConfig + `
[[models]]
name = "secret-model"
provider = "up"
upstream = "secret-up"
[[keys]]
name = "team-key"
tenant = "team"
key = "sk-team"
[[keys]]
name = "ops-key"
tenant = "ops"
key = "sk-ops"
[[policies]]
tenant = "team"
models = ["gpt-x"]
max_tokens = 100
max_body_bytes = 4096
`

// rawHTTP sends req (a whole HTTP/1.1 request) to addr as written, so that
// paths reach the gateway unnormalised, and returns status and body.
func rawHTTP(t *testing.T, addr, req string) (int, []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", strings.SplitN(req, "\r\n", 2)[0], err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func hostOf(base string) string {
	return strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
}

func postRaw(path, key, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, key, len(body), body)
}

func TestPassthroughAppliesTenantPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, tenantConfig, mockllm.Options{})
	addr := hostOf(h.base)
	secret := `{"model":"secret-model","input":"hi","prompt":"hi","messages":[{"role":"user","content":"hi"}]}`

	cases := []struct {
		name   string
		path   string
		key    string
		body   string
		status int
	}{
		{"chat refuses the model", "/v1/chat/completions", "sk-team", secret, 404},
		{"responses refuses it too", "/v1/responses", "sk-team", secret, 404},
		{"completions refuses it too", "/v1/completions", "sk-team", secret, 404},
		{"embeddings refuses it too", "/v1/embeddings", "sk-team", secret, 404},
		{"chat with a trailing slash", "/v1/chat/completions/", "sk-team", secret, 404},
		{"chat with an encoded slash", "/v1/chat/completions%2f", "sk-team", secret, 404},
		{"chat with an encoded slash, upper case", "/v1/chat%2Fcompletions", "sk-team", secret, 404},
		{"chat with a parameter", "/v1/chat/completions;", "sk-team", secret, 404},
		{"chat with a dot segment", "/v1/chat/completions/.", "sk-team", secret, 400},
		{"chat in another case", "/v1/Chat/Completions", "sk-team", secret, 404},
		{"chat with an empty segment", "/v1//chat/completions", "sk-team", secret, 404},
		{"chat route for ops via a variant", "/v1/chat/completions/", "sk-ops", secret, 404},
		{"unknown model", "/v1/embeddings", "sk-ops", `{"model":"not-configured","input":"x"}`, 404},
		{"duplicate model keys", "/v1/embeddings", "sk-team", `{"model":"gpt-x","model":"secret-model","input":"x"}`, 400},
		{"escaped model key", "/v1/embeddings", "sk-team", `{"model":"gpt-x","mod\u0065l":"secret-model","input":"x"}`, 400},
		{"a model key in another case", "/v1/embeddings", "sk-team", `{"model":"gpt-x","MODEL":"secret-model","input":"x"}`, 400},
		{"no model for a restricted tenant", "/v1/embeddings", "sk-team", `{"input":"x"}`, 400},
		{"a path off the allow-list", "/v1/files", "sk-team", `{"purpose":"x"}`, 403},
		{"a body over the tenant's limit", "/v1/embeddings", "sk-team", `{"model":"gpt-x","input":"` + strings.Repeat("x", 5000) + `"}`, 413},
		{"no key", "/v1/embeddings", "", `{"model":"gpt-x","input":"x"}`, 401},
	}
	for _, c := range cases {
		before := h.mock.TotalCalls()
		status, body := rawHTTP(t, addr, postRaw(c.path, c.key, c.body))
		if status != c.status {
			t.Errorf("%s: %s got %d, want %d: %s", c.name, c.path, status, c.status, body)
		}
		if e := gjson.GetBytes(body, "error"); !e.Get("message").Exists() || !e.Get("type").Exists() {
			t.Errorf("%s: not an OpenAI error envelope: %s", c.name, body)
		}
		if n := h.mock.TotalCalls() - before; n != 0 {
			t.Errorf("%s: the upstream got %d calls", c.name, n)
		}
	}

	// A model endpoint's body that is not declared JSON is not sent unjudged:
	// a lenient upstream would parse it as JSON anyway.
	for _, ct := range []string{"", "text/plain", "application/octet-stream"} {
		before := h.mock.TotalCalls()
		body := `{"model":"secret-model","input":"x"}`
		req := fmt.Sprintf("POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-team\r\nContent-Length: %d\r\nConnection: close\r\n", len(body))
		if ct != "" {
			req += "Content-Type: " + ct + "\r\n"
		}
		status, b := rawHTTP(t, addr, req+"\r\n"+body)
		if status != 415 || h.mock.TotalCalls() != before {
			t.Errorf("content type %q: %d %s", ct, status, b)
		}
	}
	if status, b := rawHTTP(t, addr, strings.Replace(postRaw("/v1/embeddings", "sk-team", `{"model":"secret-model","input":"x"}`), "application/json", "application/vnd.api+json", 1)); status != 404 {
		t.Errorf("+json content type: %d %s", status, b)
	}

	// An allowed body passes with the model routed and the token cap applied
	// per endpoint, on the endpoint's own field. /v1/responses runs through
	// the pipeline as a chat request: the upstream sees the capped
	// max_output_tokens as max_completion_tokens.
	for _, c := range []struct{ path, body, field string }{
		{"/v1/responses", `{"model":"gpt-x","input":"hi","max_output_tokens":5000}`, "max_completion_tokens"},
		{"/v1/responses", `{"model":"gpt-x","input":"hi"}`, "max_completion_tokens"},
		{"/v1/completions", `{"model":"gpt-x","prompt":"hi","max_tokens":5000}`, "max_tokens"},
	} {
		status, body := rawHTTP(t, addr, postRaw(c.path, "sk-team", c.body))
		if status != 200 {
			t.Fatalf("%s: %d %s", c.path, status, body)
		}
		up := gjson.Parse(gjson.GetBytes(body, "body").Str)
		if c.path == "/v1/responses" {
			reqs := h.mock.Requests()
			up = gjson.ParseBytes(reqs[len(reqs)-1].Body)
		}
		if up.Get("model").Str != "up-model" || up.Get(c.field).Int() != 100 {
			t.Errorf("%s: upstream body %s, want model up-model and %s = 100", c.path, up.Raw, c.field)
		}
	}
}

// A multipart body names its model in a form field: the same policy applies,
// and an allowed model is renamed for the upstream.
func TestPassthroughMultipartModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, tenantConfig, mockllm.Options{})
	form := func(field, model string) (string, []byte) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		fw, _ := w.CreateFormFile("file", "a.wav")
		_, _ = fw.Write([]byte("RIFF....WAVE"))
		_ = w.WriteField(field, model)
		_ = w.Close()
		return w.FormDataContentType(), b.Bytes()
	}
	sendField := func(field, model string) (int, []byte) {
		ct, body := form(field, model)
		req, _ := http.NewRequest("POST", h.base+"/audio/transcriptions", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", "Bearer sk-team")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	send := func(model string) (int, []byte) { return sendField("model", model) }
	before := h.mock.TotalCalls()
	if status, body := send("secret-model"); status != 404 {
		t.Fatalf("secret model in a form: %d %s", status, body)
	}
	// A field named in another case is the model an upstream that matches
	// names without regard to case reads: judged and renamed the same.
	if status, body := sendField("MODEL", "secret-model"); status != 404 {
		t.Fatalf("secret model in a MODEL field: %d %s", status, body)
	}
	if h.mock.TotalCalls() != before {
		t.Fatal("the upstream was called")
	}
	for _, field := range []string{"model", "Model"} {
		status, body := sendField(field, "gpt-x")
		if status != 200 {
			t.Fatalf("allowed model in a %s field: %d %s", field, status, body)
		}
		up := gjson.GetBytes(body, "body").Str
		if !strings.Contains(up, "\r\n\r\nup-model\r\n") || strings.Contains(up, "gpt-x") || !strings.Contains(up, "RIFF....WAVE") {
			t.Fatalf("upstream form (%s): %q", field, up)
		}
	}
}

// The upstream path always stays under the provider's base path: dot
// segments, raw or encoded at any depth, are refused before anything is
// sent.
func TestPassthroughPathTraversal(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.Replace(baseConfig+openPassthrough, `base_url = "{{MOCK}}"`, `base_url = "`+up.URL+`/m/ok/v1"`, 1), mockllm.Options{})
	addr := hostOf(h.base)
	get := func(path string) (int, []byte) {
		return rawHTTP(t, addr, "GET "+path+" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
	}
	for _, p := range []string{
		"/v1/%2e%2e/%2e%2e/secret",
		"/v1/%2E%2E/%2E%2E/secret",
		"/v1/x/../../../v1/y",
		"/v1/../secret",
		"/v1/.%2e/secret",
		"/v1/%252e%252e/%252e%252e/secret",
		"/v1/%25252e%25252e/secret",
		"/v1/files/%2e",
		"/v1/files/./x",
	} {
		if status, body := get(p); status != 400 {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
	mu.Lock()
	if len(seen) != 0 {
		t.Errorf("the upstream saw %q", seen)
	}
	mu.Unlock()
	if status, body := get("/v1/files/file-abc%3Ax/content"); status != 200 {
		t.Fatalf("a legitimate path: %d %s", status, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "/m/ok/v1/files/file-abc%3Ax/content" {
		t.Fatalf("upstream saw %q", seen)
	}
}

// Non-JSON uploads honour max_body_bytes (known and unknown length), and an
// upload slower than first_byte_timeout is not a 504: the upstream had not
// been asked yet.
func TestPassthroughUploadLimits(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(baseConfig+openPassthrough, "[server]", "[server]\nmax_body_bytes = 1048576\nread_timeout = \"10s\"", 1)
	cfg = strings.Replace(cfg, "retries = 0", "retries = 0\nfirst_byte_timeout = \"500ms\"", 1)
	h := newHarness(t, cfg, mockllm.Options{})
	big := bytes.Repeat([]byte("z"), 3<<20)

	resp, err := http.Post(h.base+"/files", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("3 MB upload with a known length: %d", resp.StatusCode)
	}
	before := h.mock.TotalCalls()
	resp, err = http.Post(h.base+"/files", "application/octet-stream", struct{ io.Reader }{bytes.NewReader(big)}) // chunked
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && len(gjson.GetBytes(b, "body").Str) > 1<<20 {
			t.Fatalf("3 MB chunked upload accepted: %d bytes reached the upstream", len(gjson.GetBytes(b, "body").Str))
		}
		if resp.StatusCode != 413 {
			t.Fatalf("3 MB chunked upload: %d %s", resp.StatusCode, b)
		}
	} // a reset while the client still sends is also a refusal
	_ = before

	// A slow upload: half the body, a pause longer than first_byte_timeout,
	// then the rest.
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(bytes.Repeat([]byte("a"), 40<<10))
		time.Sleep(1500 * time.Millisecond)
		_, _ = pw.Write(bytes.Repeat([]byte("b"), 40<<10))
		_ = pw.Close()
	}()
	req, _ := http.NewRequest("POST", h.base+"/files", pr)
	req.ContentLength = 80 << 10
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(gjson.GetBytes(b, "body").Str) != 80<<10 {
		t.Fatalf("slow upload: %d, %d bytes echoed", resp.StatusCode, len(gjson.GetBytes(b, "body").Str))
	}
}

// Operator routes: keyed gateways guard /metrics and /readyz details;
// metrics_listen serves them apart; /v1/models shows only what the tenant
// may use.
func TestOperatorRoutesAndModelListing(t *testing.T) {
	t.Parallel()
	get := func(url, key string) (int, []byte) {
		status, _, b := send(t, "GET", url, key, "")
		return status, b
	}

	h := newHarness(t, tenantConfig, mockllm.Options{})
	root := strings.TrimSuffix(h.base, "/v1")
	if status, _ := get(root+"/metrics", ""); status != 403 {
		t.Errorf("/metrics without an admin key configured: %d", status)
	}
	if status, _ := get(root+"/metrics", "sk-team"); status != 403 {
		t.Errorf("/metrics with a tenant key: %d", status)
	}
	if status, b := get(root+"/readyz", ""); status != 200 || gjson.GetBytes(b, "details").Exists() {
		t.Errorf("/readyz: %d %s", status, b)
	}
	status, b := get(h.base+"/models", "sk-team")
	if status != 200 || gjson.GetBytes(b, "data.#").Int() != 1 || gjson.GetBytes(b, "data.0.id").Str != "gpt-x" {
		t.Errorf("team's /v1/models: %d %s", status, b)
	}
	if status, _ := get(h.base+"/models/secret-model", "sk-team"); status != 404 {
		t.Errorf("team's /v1/models/secret-model: %d", status)
	}
	if status, b := get(h.base+"/models", "sk-ops"); status != 200 || gjson.GetBytes(b, "data.#").Int() != 2 {
		t.Errorf("ops' /v1/models: %d %s", status, b)
	}

	h2 := newHarness(t, strings.Replace(tenantConfig, "[server]", "[server]\nadmin_key = \"sk-admin\"", 1), mockllm.Options{})
	root2 := strings.TrimSuffix(h2.base, "/v1")
	if status, _ := get(root2+"/metrics", "sk-team"); status != 401 {
		t.Errorf("/metrics with a tenant key: %d", status)
	}
	if status, b := get(root2+"/metrics", "sk-admin"); status != 200 || !bytes.Contains(b, []byte("gateway_")) {
		t.Errorf("/metrics with the admin key: %d", status)
	}

	h3 := newHarness(t, strings.Replace(tenantConfig, "[server]", "[server]\nmetrics_listen = \"127.0.0.1:0\"", 1), mockllm.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h3.srv.ServeAdmin(ln) }()
	if status, _ := get(strings.TrimSuffix(h3.base, "/v1")+"/metrics", "sk-ops"); status != 404 {
		t.Errorf("/metrics on the main listener with metrics_listen: %d", status)
	}
	if status, b := get("http://"+ln.Addr().String()+"/metrics", ""); status != 200 || !bytes.Contains(b, []byte("gateway_")) {
		t.Errorf("/metrics on the operator listener: %d", status)
	}
	if status, _ := get("http://"+ln.Addr().String()+"/v1/models", ""); status != 404 {
		t.Errorf("the operator listener serves the API: %d", status)
	}
}

// A multipart body is the gateway's to read, after the caller's key: a
// malformed one is its 400 naming the form (fasthttp's own parse answered
// "not HTTP" and logged no path), and a JSON chat body sent with a
// multipart type is read as JSON, as chat reads any type.
func TestMalformedMultipartIsTheGateways(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+openPassthrough, mockllm.Options{})
	post := func(path, body string) (int, []byte) {
		status, _, b := h.post(path, body, map[string]string{"Content-Type": "multipart/form-data; boundary=x"})
		return status, b
	}
	if status, b := post("/audio/transcriptions", `{"model":"gpt-x"}`); status != 400 || !strings.Contains(gjson.GetBytes(b, "error.message").Str, "multipart") {
		t.Errorf("malformed form: %d %s", status, b)
	}
	if status, b := post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`); status != 200 {
		t.Errorf("chat: %d %s", status, b)
	}
}

// A multipart call of a model (an image edit's or a transcription's
// prompt) passes the tenant's request guardrails as a JSON body does: a
// blocked prompt gets the 400 without an upstream call, a redacted one
// reaches the upstream redacted, the file part untouched. A compressed
// body, which the gateway could not judge, is refused.
func TestGuardrailsPassThroughForms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig+openPassthrough, mockllm.Options{})
	formField := func(field, prompt string) (string, []byte) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		fw, _ := w.CreateFormFile("image", "a.png")
		_, _ = fw.Write([]byte("\x89PNG project falcon jane@example.com"))
		_ = w.WriteField("model", "gpt-x")
		_ = w.WriteField(field, prompt)
		_ = w.Close()
		return w.FormDataContentType(), b.Bytes()
	}
	form := func(prompt string) (string, []byte) { return formField("prompt", prompt) }
	post := func(path, ct string, body []byte, hdr map[string]string) (int, []byte) {
		req, _ := http.NewRequest("POST", h.base+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", "Bearer sk-client")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, path := range []string{"/images/edits", "/audio/transcriptions"} {
		before := h.mock.TotalCalls()
		ct, body := form("draw Project Falcon")
		if status, b := post(path, ct, body, nil); status != 400 || gjson.GetBytes(b, "error.code").Str != "content_blocked" {
			t.Errorf("%s: blocked prompt: %d %s", path, status, b)
		}
		if n := h.mock.TotalCalls() - before; n != 0 {
			t.Errorf("%s: the upstream got %d calls", path, n)
		}
	}
	// A field named in another case is the prompt an upstream that matches
	// names without regard to case reads: judged the same.
	before := h.mock.TotalCalls()
	ct, body := formField("PROMPT", "draw Project Falcon")
	if status, b := post("/images/edits", ct, body, nil); status != 400 || gjson.GetBytes(b, "error.code").Str != "content_blocked" {
		t.Errorf("blocked PROMPT field: %d %s", status, b)
	}
	if n := h.mock.TotalCalls() - before; n != 0 {
		t.Errorf("PROMPT field: the upstream got %d calls", n)
	}
	ct, body = formField("Prompt", "mail jane@example.com")
	status, b := post("/images/edits", ct, body, nil)
	if up := gjson.GetBytes(b, "body").Str; status != 200 || !strings.Contains(up, "name=\"Prompt\"\r\n\r\nmail [REDACTED]") {
		t.Errorf("redacted Prompt field: %d, upstream got %q", status, up)
	}
	ct, body = form("send it to jane@example.com")
	status, b = post("/images/edits", ct, body, nil)
	up := gjson.GetBytes(b, "body").Str
	if status != 200 || !strings.Contains(up, "send it to [REDACTED]") || !strings.Contains(up, "PNG project falcon jane@example.com") {
		t.Errorf("redacted prompt: %d, upstream got %q", status, up)
	}
	// A prompt no guard changes goes as the client sent it, bytes that are
	// not UTF-8 (a Latin-1 "café") included.
	ct, body = form("caf\xe9")
	if status, b := post("/audio/transcriptions", ct, body, nil); status != 200 {
		t.Errorf("latin-1 prompt: %d %s", status, b)
	}
	if rs := h.mock.Requests(); len(rs) == 0 || !bytes.Contains(rs[len(rs)-1].Body, []byte("name=\"prompt\"\r\n\r\ncaf\xe9\r\n")) {
		t.Errorf("the upstream did not get the prompt as sent")
	}
	before = h.mock.TotalCalls()
	ct, body = form("fine")
	if status, b := post("/images/edits", ct, body, map[string]string{"Content-Encoding": "gzip"}); status != 415 {
		t.Errorf("compressed form: %d %s", status, b)
	}
	if n := h.mock.TotalCalls() - before; n != 0 {
		t.Errorf("compressed form: the upstream got %d calls", n)
	}
}

// TestSlowChunkedBodyTimesOut: a chat body sent chunked that stalls past
// read_timeout is answered 408 request_timeout, as a stalled body of a
// known length is, not a 400 about the client's syntax.
func TestSlowChunkedBodyTimesOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(baseConfig, "[server]", "[server]\nread_timeout = \"300ms\"", 1), mockllm.Options{})
	before := h.mock.TotalCalls()
	status, body := rawHTTP(t, hostOf(h.base), "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"model\":")
	if status != 408 || gjson.GetBytes(body, "error.code").Str != "request_timeout" {
		t.Fatalf("a stalled chunked body: %d %s", status, body)
	}
	if h.mock.TotalCalls() != before {
		t.Fatal("the upstream was called")
	}
}
