package proxy

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
)

// base_url's own query (Azure's api-version) goes with every request: the
// chat URI carries it, and a pass-through request's query has it first,
// the client's parameters after it and never one of the same name (a
// tenant does not choose what the operator set).
func TestPassthroughQuery(t *testing.T) {
	t.Parallel()
	pc, err := newProviderClient(config.Provider{Name: "az", Kind: "openai", BaseURL: "https://az.example.com/openai/deployments/d?api-version=2024-10-21"})
	if err != nil {
		t.Fatal(err)
	}
	if pc.chatURI != "https://az.example.com/openai/deployments/d/chat/completions?api-version=2024-10-21" {
		t.Errorf("chat URI %s", pc.chatURI)
	}
	for client, want := range map[string]string{
		"":                              "api-version=2024-10-21",
		"limit=2&after=x%26y":           "api-version=2024-10-21&limit=2&after=x%26y",
		"api-version=evil&limit=2":      "api-version=2024-10-21&limit=2",
		"api%2Dversion=evil&&limit=2":   "api-version=2024-10-21&limit=2",
		"api-version&api-version=2&x=1": "api-version=2024-10-21&x=1",
		"Api-Version=evil&x=1":          "api-version=2024-10-21&x=1",
	} {
		if got := pc.query([]byte(client)); got != want {
			t.Errorf("query(%q) = %q, want %q", client, got, want)
		}
	}
	plain, err := newProviderClient(config.Provider{Name: "o", Kind: "openai", BaseURL: "https://api.example.com/v1"})
	if err != nil || plain.query([]byte("a=%2F&b")) != "a=%2F&b" || strings.Contains(plain.chatURI, "?") {
		t.Errorf("without a base query: %v %q %s", err, plain.query([]byte("a=%2F&b")), plain.chatURI)
	}
	// A method override in the query (Rails' and Laravel's _method, the
	// override headers' names) never reaches the provider, with or without
	// a base query.
	for client, want := range map[string]string{
		"_method=DELETE":                          "",
		"limit=2&_METHOD=delete&x=1":              "limit=2&x=1",
		"%5Fmethod=DELETE&x=1":                    "x=1",
		"X-HTTP-Method-Override=DELETE&after=a":   "after=a",
		"x-http-method=PUT&x-method-override=PUT": "",
		".method=DELETE&%2Emethod=PUT&x=1":        "x=1", // PHP reads both as _method
		"x_http_method_override=DELETE":           "",
		"+_method=DELETE&_method%00x=PUT&y=2":     "y=2", // PHP: leading spaces dropped, a name ends at a NUL
	} {
		if got := plain.query([]byte(client)); got != want {
			t.Errorf("plain query(%q) = %q, want %q", client, got, want)
		}
		if got, wantAz := pc.query([]byte(client)), strings.TrimSuffix("api-version=2024-10-21&"+want, "&"); got != wantAz {
			t.Errorf("base query(%q) = %q, want %q", client, got, wantAz)
		}
	}
	an, err := newProviderClient(config.Provider{Name: "a", Kind: "anthropic", BaseURL: "https://api.example.com/v1?beta=1"})
	if err != nil || an.chatURI != "https://api.example.com/v1/messages?beta=1" {
		t.Errorf("anthropic: %v %s", err, an.chatURI)
	}
}
