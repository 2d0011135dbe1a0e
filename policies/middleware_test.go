package policies

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// recorder is the next handler: it records the request it was given.
type recorder struct {
	called bool
	body   []byte
	tenant *pipeline.Tenant
}

func (r *recorder) Chat(_ context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	r.called, r.body, r.tenant = true, req.Body, req.Tenant
	return &pipeline.Response{Body: []byte(`{}`)}, nil
}

func middlewareConfig() *config.Config {
	return &config.Config{
		Keys: []config.Key{
			{Name: "c", Tenant: "clamp", Key: "k-clamp"},
			{Name: "r", Tenant: "reject", Key: "k-reject"},
			{Name: "s", Tenant: "small", Key: "k-small"},
			{Name: "n", Tenant: "nocap", Key: "k-nocap"},
		},
		Policies: []config.Policy{
			{Tenant: "*", Models: []string{"demo", "gpt-*"}, MaxTokens: 100, MaxTokensMode: ModeClamp},
			{Tenant: "reject", MaxTokensMode: ModeReject},
			{Tenant: "small", MaxBodyBytes: 64},
			{Tenant: "nocap", Models: []string{"*"}, MaxTokens: 1 << 30},
		},
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	e := mustNew(t, middlewareConfig())
	const messages = `"messages":[{"role":"user","content":"max_tokens: 9999"}]`
	tests := []struct {
		name  string
		key   string
		model string
		body  string

		status int    // 0 = next called
		code   string // envelope code on a denial
		param  string
		want   map[string]string // gjson path → raw value in the body next sees
		same   bool              // next sees the very slice it was given
	}{
		{name: "under the cap passes untouched", key: "k-clamp", model: "demo",
			body: `{"model":"demo",` + messages + `,"max_tokens":50}`, same: true,
			want: map[string]string{"max_tokens": "50", "max_completion_tokens": ""}},
		{name: "at the cap passes untouched", key: "k-clamp", model: "demo",
			body: `{"model":"demo","max_completion_tokens":100,` + messages + `}`, same: true,
			want: map[string]string{"max_completion_tokens": "100"}},
		{name: "clamp max_tokens", key: "k-clamp", model: "gpt-4o",
			body: `{"model":"gpt-4o",` + messages + `,"max_tokens":5000,"temperature":0.5}`,
			want: map[string]string{"max_tokens": "100", "temperature": "0.5", "messages.0.content": `"max_tokens: 9999"`, "max_completion_tokens": ""}},
		{name: "clamp max_completion_tokens", key: "k-clamp", model: "gpt-4o",
			body: `{"model":"gpt-4o","max_completion_tokens":101,` + messages + `,"stream":true}`,
			want: map[string]string{"max_completion_tokens": "100", "stream": "true", "max_tokens": ""}},
		{name: "clamp both fields", key: "k-clamp", model: "demo",
			body: `{"model":"demo","max_tokens":1e6,` + messages + `,"max_completion_tokens":200}`,
			want: map[string]string{"max_tokens": "100", "max_completion_tokens": "100"}},
		{name: "clamp only the field over the cap", key: "k-clamp", model: "demo",
			body: `{"model":"demo","max_tokens":7,"max_completion_tokens":200,` + messages + `}`,
			want: map[string]string{"max_tokens": "7", "max_completion_tokens": "100"}},
		{name: "absent fields get the cap", key: "k-clamp", model: "demo",
			body: `{"model":"demo",` + messages + `}`,
			want: map[string]string{"max_completion_tokens": "100", "max_tokens": ""}},
		{name: "null field gets the cap", key: "k-reject", model: "demo",
			body: `{"model":"demo","max_tokens":null,` + messages + `}`,
			want: map[string]string{"max_completion_tokens": "100", "max_tokens": "null"}},
		{name: "reject max_tokens", key: "k-reject", model: "demo",
			body:   `{"model":"demo",` + messages + `,"max_tokens":101}`,
			status: 400, code: "integer_above_max_value", param: "max_tokens"},
		{name: "reject max_completion_tokens", key: "k-reject", model: "demo",
			body:   `{"model":"demo","max_tokens":5,"max_completion_tokens":4096,` + messages + `}`,
			status: 400, code: "integer_above_max_value", param: "max_completion_tokens"},
		{name: "reject mode under the cap passes", key: "k-reject", model: "demo",
			body: `{"model":"demo","max_tokens":100,` + messages + `}`, same: true,
			want: map[string]string{"max_tokens": "100"}},
		{name: "numeric string is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_tokens":"5000",` + messages + `}`,
			status: 400, param: "max_tokens"},
		// A literal that only rounds to an integer in a float64 is no
		// integer (a probe saw it pass the cap's check unchanged).
		{name: "a fraction that rounds away is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_tokens":50.000000000000000000001,` + messages + `}`,
			status: 400, param: "max_tokens"},
		{name: "n that rounds to an integer is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","n":2.0000000000000000001,` + messages + `}`,
			status: 400, param: "n"},
		{name: "a whole float is an integer", key: "k-clamp", model: "demo",
			body: `{"model":"demo","max_tokens":50.0,` + messages + `}`, same: true,
			want: map[string]string{"max_tokens": "50.0"}},
		{name: "negative max_tokens is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_tokens":-1,` + messages + `}`,
			status: 400, code: "integer_below_min_value", param: "max_tokens"},
		{name: "zero max_completion_tokens is refused", key: "k-reject", model: "demo",
			body:   `{"model":"demo","max_completion_tokens":0,` + messages + `}`,
			status: 400, code: "integer_below_min_value", param: "max_completion_tokens"},
		{name: "fractional max_tokens is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_tokens":50.5,` + messages + `}`,
			status: 400, param: "max_tokens"},
		{name: "duplicate field is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_tokens":5,` + messages + `,"max_tokens":5000}`,
			status: 400, param: "max_tokens"},
		{name: "escaped field name is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_completion\u005ftokens":5000,` + messages + `}`,
			status: 400, param: "max_completion_tokens"},
		{name: "field name in another case is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_tokens":5,"MAX_TOKENS":5000,` + messages + `}`,
			status: 400, param: "max_tokens"},
		{name: "field name with a long s is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","max_tokenſ":5000,` + messages + `}`,
			status: 400, param: "max_tokens"},
		{name: "nested max_tokens is not the field", key: "k-clamp", model: "demo",
			body: `{"model":"demo","metadata":{"max_tokens":"x"},"max_tokens":5,` + messages + `}`, same: true,
			want: map[string]string{"metadata.max_tokens": `"x"`, "max_tokens": "5"}},
		// max_tokens is per choice: n choices share the cap (100 here).
		{name: "n shares the cap: clamp", key: "k-clamp", model: "demo",
			body: `{"model":"demo","n":8,` + messages + `,"max_tokens":100}`,
			want: map[string]string{"max_tokens": "12", "n": "8", "max_completion_tokens": ""}},
		{name: "n shares the cap: set when absent", key: "k-clamp", model: "demo",
			body: `{"model":"demo",` + messages + `,"n":3}`,
			want: map[string]string{"max_completion_tokens": "33", "n": "3", "max_tokens": ""}},
		{name: "n shares the cap: under it passes", key: "k-reject", model: "demo",
			body: `{"model":"demo","n":2,"max_tokens":50,` + messages + `}`, same: true,
			want: map[string]string{"max_tokens": "50", "n": "2"}},
		{name: "n shares the cap: reject", key: "k-reject", model: "demo",
			body:   `{"model":"demo","n":2,"max_tokens":51,` + messages + `}`,
			status: 400, code: "integer_above_max_value", param: "max_tokens"},
		{name: "n of 1 keeps the cap", key: "k-clamp", model: "demo",
			body: `{"model":"demo","n":1,"max_tokens":100,` + messages + `}`, same: true,
			want: map[string]string{"max_tokens": "100", "n": "1"}},
		{name: "null n is one choice", key: "k-clamp", model: "demo",
			body: `{"model":"demo","n":null,"max_tokens":100,` + messages + `}`, same: true,
			want: map[string]string{"max_tokens": "100", "n": "null"}},
		{name: "n above the cap is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","n":101,` + messages + `}`,
			status: 400, code: "integer_above_max_value", param: "n"},
		{name: "zero n is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","n":0,` + messages + `}`,
			status: 400, code: "integer_below_min_value", param: "n"},
		{name: "n as a string is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","n":"8",` + messages + `}`,
			status: 400, param: "n"},
		{name: "n in another case is refused", key: "k-clamp", model: "demo",
			body:   `{"model":"demo","n":1,"N":8,` + messages + `}`,
			status: 400, param: "n"},
		{name: "model not allowed", key: "k-clamp", model: "claude-3",
			body:   `{"model":"claude-3",` + messages + `}`,
			status: 404, code: "model_not_found", param: "model"},
		{name: "star allows any model", key: "k-nocap", model: "vendor/any",
			body: `{"model":"vendor/any","max_tokens":5000,` + messages + `}`, same: true,
			want: map[string]string{"max_tokens": "5000"}},
		{name: "body over the tenant limit", key: "k-small", model: "demo",
			body:   `{"model":"demo",` + messages + `,"max_tokens":1}`,
			status: 413, code: "request_too_large"},
		{name: "body at the tenant limit", key: "k-small", model: "demo",
			body: `{"model":"demo","max_tokens":1,"messages":[{"content":"abcde"}]}`, same: true,
			want: map[string]string{"max_tokens": "1"}},
		{name: "missing key", key: "", model: "demo", body: `{"model":"demo"}`,
			status: 401, code: "invalid_api_key"},
		{name: "wrong key", key: "k-nope", model: "demo", body: `{"model":"demo"}`,
			status: 401, code: "invalid_api_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.name == "body at the tenant limit" && len(tt.body) != 64 {
				t.Fatalf("fixture is %d bytes, want 64", len(tt.body))
			}
			orig := []byte(tt.body)
			in := bytes.Clone(orig)
			rec := &recorder{}
			req := &pipeline.Request{Body: in, Model: tt.model, Credential: tt.key}
			resp, err := pipeline.Chain(rec, e.Middleware()).Chat(context.Background(), req)
			if !bytes.Equal(in, orig) {
				t.Fatalf("the original body was written: %s", in)
			}
			if tt.status != 0 {
				var pe *pipeline.Error
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want *pipeline.Error %d", err, tt.status)
				}
				if rec.called || resp != nil {
					t.Fatal("next called on a denial")
				}
				if pe.Status != tt.status || pe.Type != "invalid_request_error" || pe.Code != tt.code || pe.Param != tt.param {
					t.Fatalf("envelope = %d %q code %q param %q, want %d code %q param %q",
						pe.Status, pe.Type, pe.Code, pe.Param, tt.status, tt.code, tt.param)
				}
				if pe.Message == "" {
					t.Fatal("empty message")
				}
				return
			}
			if err != nil || !rec.called {
				t.Fatalf("err = %v, called = %v", err, rec.called)
			}
			if rec.tenant == nil || req.Tenant != rec.tenant || PolicyOf(rec.tenant) == nil {
				t.Fatalf("tenant not set: %+v", rec.tenant)
			}
			if tt.same != (&rec.body[0] == &in[0]) {
				t.Fatalf("body replaced = %v, want %v", tt.same, !tt.same)
			}
			if !gjson.ValidBytes(rec.body) {
				t.Fatalf("invalid JSON: %s", rec.body)
			}
			for path, raw := range tt.want {
				if got := gjson.GetBytes(rec.body, path).Raw; got != raw {
					t.Errorf("%s = %q, want %q in %s", path, got, raw, rec.body)
				}
			}
			// Every field not named in want is untouched.
			gjson.ParseBytes(orig).ForEach(func(k, v gjson.Result) bool {
				if _, named := tt.want[k.Str]; !named {
					if got := gjson.GetBytes(rec.body, gjson.Escape(k.Str)).Raw; got != v.Raw {
						t.Errorf("%s changed: %s → %s", k.Str, v.Raw, got)
					}
				}
				return true
			})
		})
	}
}

func TestMiddlewareUsesRouteNameWithoutModel(t *testing.T) {
	t.Parallel()
	e := mustNew(t, middlewareConfig())
	tests := []struct {
		name  string
		route string
		ok    bool
	}{
		{name: "allowed route", route: "demo", ok: true},
		{name: "denied route", route: "claude", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &pipeline.Request{Body: []byte(`{"max_tokens":1}`), Route: &pipeline.Route{Name: tt.route}, Credential: "k-clamp"}
			_, err := pipeline.Chain(&recorder{}, e.Middleware()).Chat(context.Background(), req)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// FuzzCapTokens: Admit never panics, never writes the original body, and in
// clamp mode never lets a token field above the cap through.
func FuzzCapTokens(f *testing.F) {
	for _, s := range []string{
		`{"max_tokens":5000}`, `{"max_completion_tokens":1e9,"max_tokens":-1}`, `{}`, `[]`, ``, `{"max_tokens":`,
		`{"a":{"max_tokens":1},"max_tokens":null}`, `{"max_tokens":"9"}`, `{"max_tokens":1,"max_tokens":2}`,
		`{"n":8,"max_tokens":100}`, `{"n":3}`, `{"N":3,"n":1}`,
	} {
		f.Add([]byte(s))
	}
	p, err := merge("t", &config.Policy{MaxTokens: 100}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		req := &pipeline.Request{Body: body, Model: "m"}
		err := p.Admit(req)
		if !bytes.Equal(body, orig) {
			t.Fatal("original body written")
		}
		if err != nil || !gjson.ValidBytes(orig) || !strings.HasPrefix(strings.TrimSpace(string(orig)), "{") {
			return
		}
		n := max(1, gjson.GetBytes(req.Body, fieldN).Num) // max_tokens is per choice
		for _, f := range []string{fieldMaxTokens, fieldMaxCompletionTokens} {
			// Below 1 is unbounded to some upstreams (llama.cpp, Ollama: -1).
			if v := gjson.GetBytes(req.Body, f); v.Type == gjson.Number && (v.Num*n > 100 || v.Num < 1) {
				t.Fatalf("%s = %s after clamp: %s", f, v.Raw, req.Body)
			}
		}
	})
}

func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name   string
		policy []config.Policy
	}{
		{name: "models", policy: []config.Policy{{Tenant: "*", Models: []string{"gpt-*", "demo"}}}},
		{name: "models+cap", policy: []config.Policy{{Tenant: "*", Models: []string{"gpt-*", "demo"}, MaxTokens: 4096}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e, err := New(&config.Config{
				Keys:     []config.Key{{Name: "bench", Tenant: "t", Key: "sk-bench-0123456789abcdef0123456789abcdef"}},
				Policies: bc.policy,
			}, zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			h := pipeline.Chain(pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
				return nil, nil
			}), e.Middleware())
			body := []byte(`{"model":"demo","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in three words."}],"max_tokens":256,"stream":true}`)
			req := &pipeline.Request{Body: body, Model: "demo", Credential: "sk-bench-0123456789abcdef0123456789abcdef"}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				req.Body, req.Tenant = body, nil
				if _, err := h.Chat(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Under a max_tokens cap, a field that bounds the output under another
// name is refused: llama.cpp reads n_predict before max_tokens, so
// {"max_tokens":50,"n_predict":100000} would run to 100,000 tokens behind a
// cap of 100. Without a cap the body is the upstream's business.
func TestCapRefusesOtherTokenFields(t *testing.T) {
	t.Parallel()
	e, err := New(middlewareConfig(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	clamp, _ := e.Authenticate("k-clamp")
	for _, c := range []struct{ endpoint, body, param string }{
		{"", `{"model":"gpt-x","messages":[],"max_tokens":50,"n_predict":100000}`, "n_predict"},
		{"", `{"model":"gpt-x","messages":[],"N_Predict":-1}`, "N_Predict"},
		{"/v1/completions", `{"model":"gpt-x","prompt":"x","num_predict":100000}`, "num_predict"},
		{"/v1/responses", `{"model":"gpt-x","input":"x","max_new_tokens":100000}`, "max_new_tokens"},
		// Another endpoint's OpenAI field, which a lenient upstream reads.
		{"/v1/completions", `{"model":"gpt-x","prompt":"x","max_tokens":50,"max_completion_tokens":100000}`, "max_completion_tokens"},
		{"/v1/completions", `{"model":"gpt-x","prompt":"x","Max_Output_Tokens":100000}`, "Max_Output_Tokens"},
		{"/v1/responses", `{"model":"gpt-x","input":"x","max_output_tokens":50,"max_tokens":100000}`, "max_tokens"},
		{"", `{"model":"gpt-x","messages":[],"max_completion_tokens":50,"max_output_tokens":100000}`, "max_output_tokens"},
	} {
		r := &pipeline.Request{Body: []byte(c.body), Model: "gpt-x", Endpoint: c.endpoint}
		err := e.Admit(clamp, r)
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != c.param {
			t.Errorf("%s %s: %v, want a 400 naming %s", c.endpoint, c.body, err, c.param)
		}
	}
	open := &config.Config{Keys: []config.Key{{Tenant: "free", Key: "k-free"}}}
	e2, err := New(open, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	free, _ := e2.Authenticate("k-free")
	r := &pipeline.Request{Body: []byte(`{"model":"gpt-x","messages":[],"n_predict":5}`), Model: "gpt-x"}
	if err := e2.Admit(free, r); err != nil {
		t.Errorf("without a cap: %v", err)
	}
}
