package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/observe"
)

// lockedBuffer is a log sink tests read after the logger is closed. Safe
// for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// planted returns a secret with a random part, so that a fragment of it in
// a log can be told apart from anything else the log holds.
func planted(t *testing.T, prefix string) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// assertNoSecret fails when log holds a secret or any 10-byte piece of its
// random part (fasthttp cuts long header blocks, which can leave a piece).
func assertNoSecret(t *testing.T, log, name, secret string) {
	t.Helper()
	if i := strings.Index(log, secret); i >= 0 {
		t.Errorf("the log holds the %s: ...%s...", name, excerpt(log, i))
		return
	}
	random := secret[strings.LastIndexByte(secret, '-')+1:]
	for i := 0; i+10 <= len(random); i++ {
		if j := strings.Index(log, random[i:i+10]); j >= 0 {
			t.Errorf("the log holds a piece of the %s (%q): ...%s...", name, random[i:i+10], excerpt(log, j))
			return
		}
	}
}

func excerpt(s string, i int) string {
	from, to := max(0, i-200), min(len(s), i+200)
	return s[from:to]
}

// TestLogsNeverCarrySecrets runs the gateway at debug level with secrets
// planted in every secret field of its config, sends it normal traffic, an
// upstream that answers 401 echoing the key it got, a Redis that is down,
// and raw connections whose malformed requests carry the secrets in
// credential headers (which fasthttp quotes into its error messages), then
// checks that no log line holds any of them.
func TestLogsNeverCarrySecrets(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"gateway key":         planted(t, "gwkey"),
		"admin key":           planted(t, "adminkey"),
		"provider api_key":    planted(t, "sk-prov"),
		"provider header":     planted(t, "orgtok"),
		"redis password":      planted(t, "redispw"),
		"tool header":         planted(t, "tooltok"),
		"mcp header":          planted(t, "mcptok"),
		"client's wrong key":  planted(t, "wrongkey"),
		"client's cookie":     planted(t, "cookie"),
		"client's x-api-key":  planted(t, "xapikey"),
		"key in a bad header": planted(t, "badhdr"),
	}
	// The upstream rejects every call and echoes the credential it got, as
	// some providers do.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s (org %s)","type":"invalid_request_error","code":"invalid_api_key"}}`,
			strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("X-Org"))
	}))
	t.Cleanup(upstream.Close)
	deadRedis := testproc.FreeAddr(t) // nothing listens there
	deadMCP := testproc.FreeAddr(t)
	cfgText := fmt.Sprintf(`
[server]
log_level = "debug"
admin_key = %q
[[providers]]
name = "up"
kind = "openai"
base_url = %q
api_key = %q
headers = { X-Org = %q }
retries = 1
[[models]]
name = "gpt-x"
provider = "up"
[[tools]]
name = "lookup"
kind = "http"
url = "http://127.0.0.1:9/lookup"
headers = { Authorization = "Bearer %s" }
[[mcp_servers]]
name = "m"
url = "http://%s/mcp"
headers = { X-Token = %q }
[[keys]]
tenant = "t"
key = %q
[middleware.cache]
enabled = true
store = "redis"
[redis]
addr = %q
password = %q
timeout = "50ms"
`, secrets["admin key"], upstream.URL+"/v1", secrets["provider api_key"], secrets["provider header"], secrets["tool header"],
		deadMCP, secrets["mcp header"], secrets["gateway key"], deadRedis, secrets["redis password"])
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	sink := &lockedBuffer{}
	log, closeLog := observe.NewLogger("debug", "json", sink)
	srv, ln := serveBuilt(t, cfg, log)
	addr := ln.Addr().String()

	// Normal traffic: a good key (upstream 401, through the Redis cache that
	// is down), streamed too, a wrong key, and a pass-through call.
	body := `{"model":"gpt-x","temperature":0,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct{ path, key, body string }{
		{"/v1/chat/completions", secrets["gateway key"], body},
		{"/v1/chat/completions", secrets["gateway key"], strings.Replace(body, `"temperature"`, `"stream":true,"temperature"`, 1)},
		{"/v1/chat/completions", secrets["client's wrong key"], body},
		{"/v1/embeddings", secrets["gateway key"], `{"model":"gpt-x","input":"hi"}`},
		{"/metrics", secrets["admin key"], ""},
		{"/metrics", secrets["client's wrong key"], ""},
	} {
		method := "POST"
		if c.body == "" {
			method = "GET"
		}
		req, _ := http.NewRequest(method, "http://"+addr+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Cookie", "session="+secrets["client's cookie"])
		req.Header.Set("X-Api-Key", secrets["client's x-api-key"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	// Malformed requests on raw connections. Each carries the secrets in
	// credential headers; fasthttp fails to parse it and logs why.
	creds := "Authorization: Bearer " + secrets["gateway key"] + "\r\n" +
		"X-Api-Key: " + secrets["client's x-api-key"] + "\r\n" +
		"Cookie: a=\"b\"; session=" + secrets["client's cookie"] + "\r\n"
	long := "X-Padding: " + strings.Repeat("p", 150) + "\r\n"
	raw := []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + creds + "Bad Header Without Colon\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + creds + "Authorization: Bearer " + secrets["key in a bad header"] + "\x01\r\n\r\n",
		"POST /v1/chat/completions HTTP/9.9\r\nHost: x\r\n" + creds + "\r\n",
		"P\x01ST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + creds + "\r\n",
		"POST /v1/chat/completions?api_key=" + secrets["gateway key"] + " HTTP/1.1\r\nHost: x\r\n" + creds + "Content-Length: nope\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + secrets["gateway key"] + "\r\n" + creds + "\r\n",
		// Longer than fasthttp's 400-byte snippet: the secrets straddle its cut.
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + long + creds + long + creds + "Bad Header Without Colon\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("x", 170) + creds + strings.Repeat("y", 170) + "\r\n\r\n",
	}
	for _, r := range raw {
		for cut := 0; cut < 3; cut++ { // shift the snippet's cut across the secrets
			sendRaw(t, addr, strings.Repeat("X-Shift: s\r\n", cut), r)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	srv.Runtime().Close()
	closeLog()

	out := sink.String()
	if n := strings.Count(out, "error when serving connection"); n < len(raw) {
		t.Fatalf("%d fasthttp error lines for %d malformed requests: the test did not exercise fasthttp's logger\n%s", n, len(raw), out)
	}
	if !strings.Contains(out, "Incorrect API key provided") && !strings.Contains(out, "401") {
		t.Fatalf("no line about the upstream 401: the test did not exercise upstream errors\n%s", out)
	}
	for name, s := range secrets {
		assertNoSecret(t, out, name, s)
	}
	if !t.Failed() {
		t.Logf("%d log lines, %d bytes, none with a secret", strings.Count(out, "\n"), len(out))
	}
}

// sendRaw writes one request on its own connection (extra headers inserted
// after the request line) and reads until the server closes it.
func sendRaw(t *testing.T, addr, extra, req string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if line, rest, ok := strings.Cut(req, "\r\n"); ok {
		req = line + "\r\n" + extra + rest
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, bufio.NewReader(c))
}
