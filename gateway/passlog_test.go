package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// A pass-through request's access line says what a chat request's does:
// its path (not the route's metric label), its tenant, whether the answer
// was a stream, and the token usage the answer reported, which the tenant
// is charged. They used to log "/v1/*", no tenant, no stream and no tokens.
// Every other authenticated request's line names the tenant too.
func TestPassthroughAccessLine(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/completions") {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"hi\"}]}\n\n"+
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[],"usage":{"prompt_tokens":7,"total_tokens":7}}`)
	}))
	t.Cleanup(up.Close)
	cfg := strings.ReplaceAll(strings.Replace(limitsConfig, `log_level = "warn"`, `log_level = "info"`, 1), "{{MOCK}}", up.URL+"/v1") + openPassthrough
	h := newLoggedHarness(t, cfg, mockllm.Options{})
	if status, _, body := send(t, "POST", h.base+"/embeddings", "sk-team", `{"model":"gpt-x","input":"hi"}`); status != 200 {
		t.Fatalf("embeddings: %d %s", status, body)
	}
	if status, _, body := send(t, "POST", h.base+"/completions", "sk-team", `{"model":"gpt-x","prompt":"hi","stream":true}`); status != 200 {
		t.Fatalf("completions: %d %s", status, body)
	}
	// A refused one names its tenant too.
	if status, _, body := send(t, "POST", h.base+"/moderations", "sk-team", `{"model":`); status != 400 {
		t.Fatalf("moderations: %d %s", status, body)
	}
	// So do the other routes a tenant's key opens, answered or refused
	// (a probe saw no tenant on these: an operator could not tell who
	// probed other tenants' response ids or model names).
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/models", ""},
		{"GET", "/responses/resp_probe", ""},
		{"POST", "/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`},
	} {
		if status, _, body := send(t, r.method, h.base+r.path, "sk-team", r.body); status != 200 && status != 404 {
			t.Fatalf("%s %s: %d %s", r.method, r.path, status, body)
		}
	}
	// The usage API refuses a tenant's key without the admin role, and its
	// line names who asked.
	if status, _, body := send(t, "GET", h.base+"/gateway/usage", "sk-team", ""); status != 403 {
		t.Fatalf("usage with a tenant's key: %d %s", status, body)
	}
	line := func(path string) gjson.Result {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			for l := range strings.SplitSeq(h.logs.String(), "\n") {
				if gjson.Get(l, "message").Str == "request" && gjson.Get(l, "path").Str == path {
					return gjson.Parse(l)
				}
			}
		}
		t.Fatalf("no access line for %s:\n%s", path, h.logs.String())
		return gjson.Result{}
	}
	for _, c := range []struct {
		path           string
		stream         bool
		prompt, output int64
	}{
		{"/v1/embeddings", false, 7, 0},
		{"/v1/completions", true, 4, 2},
	} {
		l := line(c.path)
		if l.Get("tenant").Str != "team" || !l.Get("stream").Exists() || l.Get("stream").Bool() != c.stream ||
			l.Get("prompt_tokens").Int() != c.prompt || l.Get("completion_tokens").Int() != c.output || !l.Get("prompt_tokens").Exists() {
			t.Errorf("%s: %s", c.path, l.Raw)
		}
	}
	if l := line("/v1/moderations"); l.Get("tenant").Str != "team" || l.Get("status").Int() != 400 {
		t.Errorf("refused: %s", l.Raw)
	}
	for _, p := range []string{"/v1/models", "/v1/responses/resp_probe", "/v1/chat/completions", "/v1/gateway/usage"} {
		if l := line(p); l.Get("tenant").Str != "team" {
			t.Errorf("%s: no tenant: %s", p, l.Raw)
		}
	}
}

// A chat request's access line says whether the response cache answered
// it (hit, miss, bypass): a hit's tokens are the stored answer's, which no
// call spent now, and summing the lines would count them twice.
func TestAccessLineCache(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(baseConfig, `log_level = "warn"`, `log_level = "info"`, 1) + "[middleware.cache]\nenabled = true\nstore = \"memory\"\n"
	h := newLoggedHarness(t, cfg, mockllm.Options{})
	body := `{"model":"gpt-x","temperature":0,"messages":[{"role":"user","content":"cache me"}]}`
	for range 2 {
		if status, _, b := send(t, "POST", h.base+"/chat/completions", "", body); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = got[:0]
		for l := range strings.SplitSeq(h.logs.String(), "\n") {
			if gjson.Get(l, "message").Str == "request" && gjson.Get(l, "path").Str == "/v1/chat/completions" {
				got = append(got, gjson.Get(l, "cache").Str)
			}
		}
	}
	if strings.Join(got, ",") != "miss,hit" {
		t.Fatalf("cache fields %q:\n%s", got, h.logs.String())
	}
}
