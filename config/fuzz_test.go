package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: decoding, defaults and validation never panic on any input;
// a config Parse accepts passes validation again unchanged, has its
// defaults set, and every reference in it resolves; every validation error
// names a key and a line inside the file.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../config.toml"); err == nil {
		f.Add(string(b))
	}
	f.Add(positionConfig)
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		lines := strings.Count(src, "\n") + 1
		_ = keyLines([]byte(src))
		c, err := Parse([]byte(src))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			var joined interface{ Unwrap() []error }
			if errors.As(err, &joined) {
				for _, e := range joined.Unwrap() {
					var ke *KeyError
					if errors.As(e, &ke) && (ke.Key == "" || ke.Line < 0 || ke.Line > lines) {
						t.Fatalf("key %q, line %d of %d: %v", ke.Key, ke.Line, lines, ke)
					}
				}
			}
			return
		}
		if err := c.validate(nil); err != nil {
			t.Fatalf("accepted, but fails validation again: %v", err)
		}
		again := clone(c)
		again.ApplyDefaults()
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("defaults are not idempotent:\n%+v\n%+v", c, again)
		}
		providers := map[string]bool{}
		for _, p := range c.Providers {
			providers[p.Name] = true
			if p.Retries == nil || p.MaxConns <= 0 || p.TotalTimeout <= 0 {
				t.Fatalf("provider %q lacks defaults: %+v", p.Name, p)
			}
		}
		models := map[string]bool{}
		for _, m := range c.Models {
			models[m.Name] = true
		}
		for _, m := range c.Models {
			if len(m.Deployments) == 0 || m.Upstream == "" || m.Encoding == "" {
				t.Fatalf("model %q lacks defaults: %+v", m.Name, m)
			}
			for _, d := range m.Deployments {
				if !providers[d.Provider] || d.Weight < 0 || d.Upstream == "" {
					t.Fatalf("model %q: deployment %+v", m.Name, d)
				}
			}
			for _, fb := range m.Fallbacks {
				if !models[fb] {
					t.Fatalf("model %q: fallback %q unknown", m.Name, fb)
				}
			}
		}
		if c.Server.Listen == "" || c.Server.MaxBodyBytes < 0 || c.ToolLoop.MaxIterations == 0 || c.ToolLoop.Parallel == nil {
			t.Fatalf("server or tool loop lacks defaults: %+v %+v", c.Server, c.ToolLoop)
		}
		if c.Server.DefaultProvider != "" && !providers[c.Server.DefaultProvider] {
			t.Fatalf("default provider %q unknown", c.Server.DefaultProvider)
		}
	})
}

// clone copies every part of c that ApplyDefaults may change.
func clone(c *Config) *Config {
	d := *c
	d.Providers = cloneSlice(c.Providers)
	for i := range d.Providers {
		if r := d.Providers[i].Retries; r != nil {
			v := *r
			d.Providers[i].Retries = &v
		}
		if m := d.Providers[i].Mock; m != nil {
			v := *m
			d.Providers[i].Mock = &v
		}
	}
	d.Models = cloneSlice(c.Models)
	for i := range d.Models {
		m := &d.Models[i]
		m.Deployments = cloneSlice(m.Deployments)
		m.Fallbacks = cloneSlice(m.Fallbacks)
		m.Middleware = cloneSlice(m.Middleware)
		if m.Price != nil {
			p := *m.Price
			m.Price = &p
		}
	}
	d.Budgets = cloneSlice(c.Budgets)
	d.Limits = cloneSlice(c.Limits)
	d.Tools = cloneSlice(c.Tools)
	d.Policies = cloneSlice(c.Policies)
	d.Middleware.Request = cloneSlice(c.Middleware.Request)
	if c.Redis != nil {
		r := *c.Redis
		d.Redis = &r
	}
	return &d
}

// cloneSlice copies s, keeping nil apart from empty (an empty list in the
// file turns a default off).
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T{}, s...)
}

// fuzzSeeds are small configs that reach each part of validation.
var fuzzSeeds = []string{
	"[server]\nlisten = \"127.0.0.1:0\"\nlog_level = \"debug\"\n",
	"[[providers]]\nname=\"p\"\nkind=\"mock\"\n[providers.mock]\nchunk_size=3\n[[models]]\nname=\"m\"\nprovider=\"p\"\nfallbacks=[\"n\"]\n[[models]]\nname=\"n\"\ndeployments=[{provider=\"p\",weight=2,upstream=\"u\"}]\nmiddleware=[\"fallback\"]\n",
	"[[providers]]\nname=\"o\"\nkind=\"openai\"\nbase_url=\"https://u:pw@x.example/v1\"\napi_key=\"${NOPE}\"\noptional=true\nretries=3\n[[models]]\nname=\"m\"\nprovider=\"o\"\n[[models]]\nname=\"k\"\n",
	"[[tools]]\nname=\"t\"\nkind=\"http\"\nurl=\"http://127.0.0.1:1/x\"\nheaders={Authorization=\"Bearer x\"}\nparameters='{\"type\":\"object\"}'\nmodels=[\"*\"]\n[[tools]]\nname=\"a\"\nkind=\"agent\"\nmodel=\"m\"\n",
	"[[mcp_servers]]\nname=\"m\"\ncommand=\"x\"\nargs=[\"a\"]\nenv={K=\"v\"}\nallow=[\"a*\"]\ndeny=[\"[\"]\nprefix=\"p\"\ntimeout=\"1s\"\n",
	"[[keys]]\ntenant=\"a\"\nkey=\"k\"\n[[keys]]\ntenant=\"b\"\nsha256=\"" + strings.Repeat("ab", 32) + "\"\n[[policies]]\ntenant=\"*\"\nmodels=[\"x\"]\nmax_tokens_mode=\"reject\"\ncache=false\n",
	"[middleware]\nrequest=[\"cache\",\"policy\"]\n[middleware.cache]\nenabled=true\nstore=\"redis\"\n[middleware.fallback]\nbase_backoff=\"1ms\"\n[middleware.context_edit]\ntrigger=0.5\nlast_resort=\"drop_turns\"\n[redis]\naddr=\"127.0.0.1:6379\"\npassword=\"pw\"\n",
	"[tool_loop]\nmax_iterations=2\nparallel=false\nwall_time=\"1m\"\n",
	"[server]\nadmin_key=\"${NOPE}x\"\n[middleware.limits]\nfail=\"closed\"\n[[limits]]\ntenant=\"t*\"\nrequests_per_minute=5\n[[budgets]]\nkey=\"k\"\namount=1.5\nperiod=\"day\"\nwarn_at=0.5\n[[providers]]\nname=\"p\"\nkind=\"mock\"\n[[models]]\nname=\"m\"\nprovider=\"p\"\nprice={input=1.0,output=2.0}\n",
	"[[providers]]\nname=\"p\"\nkind=\"mock\"\n[[models]]\nname=\"m\"\nprovider=\"p\"\nmiddleware=[]\n[middleware]\nrequest=[]\n",
}
