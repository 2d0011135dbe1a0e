package policies

import (
	"errors"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

func TestPassthroughPolicy(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{
		Keys: []config.Key{{Tenant: "plain", Key: "k-plain"}, {Tenant: "files", Key: "k-files"}, {Tenant: "narrow", Key: "k-narrow"}},
		Policies: []config.Policy{
			{Tenant: "files", Passthrough: []string{"/v1/files/*", "/v1/files"}},
			{Tenant: "narrow", Models: []string{"gpt-x"}, MaxTokens: 50, MaxTokensMode: ModeClamp},
		},
	}
	e, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tenant := func(k string) *pipeline.Tenant {
		tt, err := e.Authenticate(k)
		if err != nil {
			t.Fatal(err)
		}
		return tt
	}
	plain, files, narrow := tenant("k-plain"), tenant("k-files"), tenant("k-narrow")
	paths := []struct {
		t     *pipeline.Tenant
		path  string
		allow bool
	}{
		{plain, "/v1/embeddings", true},
		{plain, "/v1/responses", true},
		{plain, "/v1/audio/transcriptions", true},
		{plain, "/v1/files", false},
		{plain, "/v1/organization/admin_api_keys", false},
		{plain, "/v1/batches", false},
		{files, "/v1/files", true},
		{files, "/v1/files/file-1/content", true},
		{files, "/v1/embeddings", false}, // its own list replaces the default
	}
	for _, p := range paths {
		if got := e.AllowsPath(p.t, p.path); got != p.allow {
			t.Errorf("%s on %s: allowed %v, want %v", p.t.Name, p.path, got, p.allow)
		}
	}

	// Token caps follow the endpoint's own fields.
	caps := []struct {
		endpoint, body, field string
		want                  int64
	}{
		{"/v1/responses", `{"model":"gpt-x","input":"x","max_output_tokens":900}`, "max_output_tokens", 50},
		{"/v1/responses", `{"model":"gpt-x","input":"x"}`, "max_output_tokens", 50},
		{"/v1/completions", `{"model":"gpt-x","prompt":"x","max_tokens":900}`, "max_tokens", 50},
		// n and best_of candidates share the cap (each may run to max_tokens).
		{"/v1/completions", `{"model":"gpt-x","prompt":"x","n":2,"best_of":5}`, "max_tokens", 10},
		{"", `{"model":"gpt-x","messages":[],"n":4,"max_tokens":900}`, "max_tokens", 12},
		{"/v1/responses", `{"model":"gpt-x","input":"x","n":4}`, "max_output_tokens", 50}, // no n on responses
		{"", `{"model":"gpt-x","messages":[]}`, "max_completion_tokens", 50},
		{"/v1/embeddings", `{"model":"gpt-x","input":"x"}`, "max_tokens", 0},
	}
	for _, c := range caps {
		r := &pipeline.Request{Body: []byte(c.body), Model: "gpt-x", Endpoint: c.endpoint}
		if err := e.Admit(narrow, r); err != nil {
			t.Fatalf("%s: %v", c.endpoint, err)
		}
		if got := gjson.GetBytes(r.Body, c.field).Int(); got != c.want {
			t.Errorf("%s: %s = %d, want %d (%s)", c.endpoint, c.field, got, c.want, r.Body)
		}
	}

	// A capped endpoint takes JSON: a form's max_tokens would go up unread.
	for _, endpoint := range []string{"/v1/completions", "/v1/responses"} {
		var pe *pipeline.Error
		form := "--b\r\nContent-Disposition: form-data; name=\"max_tokens\"\r\n\r\n100000\r\n--b--\r\n"
		err := e.Admit(narrow, &pipeline.Request{Body: []byte(form), Model: "gpt-x", Endpoint: endpoint})
		if !errors.As(err, &pe) || pe.Status != 415 {
			t.Errorf("%s with a form: %v, want a 415", endpoint, err)
		}
	}
	if err := e.Admit(narrow, &pipeline.Request{Body: []byte("--b--\r\n"), Model: "gpt-x", Endpoint: "/v1/audio/transcriptions"}); err != nil {
		t.Errorf("a form to an endpoint without a cap: %v", err)
	}

	// A restricted tenant must name its model on a model endpoint.
	var pe *pipeline.Error
	err = e.Admit(narrow, &pipeline.Request{Body: []byte(`{"input":"x"}`), Endpoint: "/v1/embeddings"})
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "model" {
		t.Fatalf("no model: %v", err)
	}
	err = e.Admit(narrow, &pipeline.Request{Body: []byte(`{"input":"x"}`), Model: "secret"})
	if !errors.As(err, &pe) || pe.Status != 404 || pe.Code != pipeline.CodeModelNotFound {
		t.Fatalf("secret model: %v", err)
	}
	if err := e.Admit(plain, &pipeline.Request{Body: []byte(`{"input":"x"}`), Endpoint: "/v1/embeddings"}); err != nil {
		t.Fatalf("unrestricted tenant without a model: %v", err)
	}
}

// A pass-through body that names no model still has its endpoint's token
// cap applied: an upstream that serves one model answers it with that
// model, and the tenant's max_tokens would otherwise not bound it.
func TestPassthroughCapsBodyWithoutModel(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{
		Keys:     []config.Key{{Tenant: "capped", Key: "k-capped"}},
		Policies: []config.Policy{{Tenant: "capped", MaxTokens: 50, MaxTokensMode: ModeClamp}},
	}
	e, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	capped, err := e.Authenticate("k-capped")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ endpoint, body, field string }{
		{"/v1/completions", `{"prompt":"x","max_tokens":5000}`, "max_tokens"},
		{"/v1/completions", `{"prompt":"x"}`, "max_tokens"},
		{"/v1/responses", `{"input":"x","max_output_tokens":5000}`, "max_output_tokens"},
	} {
		r := &pipeline.Request{Body: []byte(c.body), Endpoint: c.endpoint}
		if err := e.Admit(capped, r); err != nil {
			t.Fatalf("%s %s: %v", c.endpoint, c.body, err)
		}
		if got := gjson.GetBytes(r.Body, c.field).Int(); got != 50 {
			t.Errorf("%s %s: %s = %d, want 50 (%s)", c.endpoint, c.body, c.field, got, r.Body)
		}
	}
	// A form's token fields cannot be read: refused, as with a model.
	r := &pipeline.Request{Body: []byte("--b\r\n"), Endpoint: "/v1/completions"}
	if err := e.Admit(capped, r); err == nil {
		t.Error("a non-JSON body without a model passed the token cap")
	}
	// Endpoints without token fields are untouched.
	r = &pipeline.Request{Body: []byte(`{"input":"x"}`), Endpoint: "/v1/embeddings"}
	if err := e.Admit(capped, r); err != nil || string(r.Body) != `{"input":"x"}` {
		t.Errorf("embeddings: %v %s", err, r.Body)
	}
}
