package toolloop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

// A tool's service that echoes the credentials the gateway sent it, in its
// answer or in an error body the detailed error carries, gives the model
// (and through it the client) the configured secret masked.
func TestToolResultsMaskConfiguredSecrets(t *testing.T) {
	t.Parallel()
	const secret = "tool-header-secret-5f2b9c"
	observe.Secrets.Add(secret)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo := `{"you_sent":"` + strings.Repeat("x", 480) + r.Header.Get("X-Token") + `"}`
		if strings.Contains(r.URL.Path, "fail") {
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = w.Write([]byte(echo))
	}))
	defer srv.Close()
	headers := map[string]string{"X-Token": secret}
	l := newLoop(t, []config.Tool{
		{Name: "echo", Kind: "http", URL: srv.URL, Headers: headers},
		{Name: "echo_fail", Kind: "http", URL: srv.URL + "/fail", Headers: headers},
	}, func(o *Options) { o.Loop.IncludeDetailedErrors = true })
	for _, name := range []string{"echo", "echo_fail"} {
		res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: name, Arguments: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(res.Content), secret[:12]) || !strings.Contains(string(res.Content), observe.Mask) {
			t.Errorf("%s: %s", name, res.Content)
		}
	}
}

// What the model is shown of a tool (its description and parameter schema,
// as an MCP server lists them) has the configured secrets masked, as its
// results do: a listing that spells a server's env value would otherwise
// reach the model on every request, and through it any client.
func TestToolDefinitionMasksConfiguredSecrets(t *testing.T) {
	t.Parallel()
	const secret = "mcp-env-secret-8d1e4a"
	observe.Secrets.Add(secret)
	def, err := toolDef("descleak", "Use token "+secret+" when asked",
		`{"type":"object","properties":{"q":{"type":"string","description":"mentions `+secret+`"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(def), secret[:12]) || strings.Count(string(def), observe.Mask) != 2 {
		t.Fatalf("%s", def)
	}
}

// A secret a schema spells as a number or with \u escapes is masked too,
// and the schema stays JSON (the tool still registers).
func TestToolDefinitionMaskKeepsJSON(t *testing.T) {
	t.Parallel()
	const secret = "4417123456789"
	observe.Secrets.Add(secret)
	observe.Secrets.Add("esc-secret-77a1")
	for _, params := range []string{
		`{"type":"object","properties":{"pin":{"type":"integer","default":` + secret + `}}}`,
		`{"type":"object","properties":{"q":{"type":"string","description":"e\u0073c-secret-77a1"}}}`,
	} {
		def, err := toolDef("t", "", params)
		if err != nil {
			t.Fatalf("%s: %v", params, err)
		}
		if !jsonvalid.Bytes(def) || strings.Contains(string(def), secret) || strings.Contains(string(def), "esc-secret") || strings.Contains(string(def), `e\u0073c`) {
			t.Fatalf("%s: %s", params, def)
		}
	}
}
