package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// expectConfig: tenant team's key may send bodies of 2000 bytes at most,
// under the server's default 8 MiB.
const expectConfig = baseConfig + `
[[keys]]
name = "team-key"
tenant = "team"
key = "sk-team"
[[policies]]
tenant = "team"
max_body_bytes = 2000
passthrough = ["/v1/*"]
`

// expectHead sends a request's head with Expect: 100-continue and no byte
// of its body, and returns the connection, its reader and the first
// response the gateway answers with.
func expectHead(t *testing.T, addr, method, path, key string, length int) (net.Conn, *bufio.Reader, *http.Response, []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n",
		method, path, key, length)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s %s: no answer to the head alone: %v", method, path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return c, br, resp, body
}

// A client that sends Expect: 100-continue learns before it sends its body
// what the route would answer from the head alone: a body over its key's
// max_body_bytes is a 413, a key the gateway does not know a 401, both in
// the OpenAI envelope, and the body is never asked for. A good request gets
// 100 Continue and its answer. Only the server-wide limit used to be
// judged before the body: the rest came after the whole upload.
func TestExpectContinueJudgesTheKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, expectConfig, mockllm.Options{})
	addr := strings.TrimSuffix(strings.TrimPrefix(h.base, "http://"), "/v1")
	for _, tc := range []struct {
		name, path, key string
		length, status  int
	}{
		{"chat over the key's limit", "/v1/chat/completions", "sk-team", 49000, 413},
		{"pass-through over the key's limit", "/v1/embeddings", "sk-team", 49000, 413},
		{"a key the gateway does not know", "/v1/chat/completions", "wrong", 8000000, 401},
		{"a key the gateway does not know, pass-through", "/v1/files", "wrong", 8000000, 401},
	} {
		_, _, resp, body := expectHead(t, addr, "POST", tc.path, tc.key, tc.length)
		if resp.StatusCode != tc.status || gjson.GetBytes(body, "error.message").Str == "" || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%s: %d %s, want %d in the error envelope before the body", tc.name, resp.StatusCode, body, tc.status)
		}
	}
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`
	c, br, resp, _ := expectHead(t, addr, "POST", "/v1/chat/completions", "sk-team", len(body))
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("a good request: %d, want 100 Continue", resp.StatusCode)
	}
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || gjson.GetBytes(b, "object").Str != "chat.completion" {
		t.Fatalf("a good request after 100 Continue: %d %s", resp.StatusCode, b)
	}
}

// A reload that changes server.max_body_bytes applies to a client that
// sends Expect: 100-continue as to one that sends its body at once: the
// head is judged by the limit in force, not the one the server started
// with.
func TestExpectContinueFollowsReloadedBodyLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.Replace(baseConfig, "[server]", "[server]\nmax_body_bytes = 1000", 1), mockllm.Options{})
	addr := strings.TrimSuffix(strings.TrimPrefix(h.base, "http://"), "/v1")
	if _, _, resp, body := expectHead(t, addr, "POST", "/v1/chat/completions", "k", 5000); resp.StatusCode != 413 {
		t.Fatalf("before the reload: %d %s, want 413", resp.StatusCode, body)
	}
	h.toml = strings.Replace(h.toml, "max_body_bytes = 1000", "max_body_bytes = 10000", 1)
	h.reload()
	big := `{"model":"gpt-x","messages":[{"role":"user","content":"` + strings.Repeat("a", 4000) + `"}]}`
	c, br, resp, body := expectHead(t, addr, "POST", "/v1/chat/completions", "k", len(big))
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("raised by a reload: %d %s, want 100 Continue", resp.StatusCode, body)
	}
	if _, err := io.WriteString(c, big); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the body under the raised limit: %v %v", resp, err)
	}
	h.toml = strings.Replace(h.toml, "max_body_bytes = 10000", "max_body_bytes = 100", 1)
	h.reload()
	if _, _, resp, body := expectHead(t, addr, "POST", "/v1/chat/completions", "k", 500); resp.StatusCode != 413 ||
		!strings.Contains(gjson.GetBytes(body, "error.message").Str, "100") {
		t.Fatalf("lowered by a reload: %d %s, want 413 naming 100 bytes", resp.StatusCode, body)
	}
}
