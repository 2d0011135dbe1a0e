package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// secretKey matches the TOML keys whose values are secrets or may hold
// them (headers and env carry tokens).
var secretKey = regexp.MustCompile(`(^|_)(key|password|token|secret|headers|env)$`)

// Every config field whose key looks secret is in Secrets: the test walks
// the schema, so a secret field added later without updating Secrets fails
// here instead of reaching a log.
func TestSecretsCoversEverySecretField(t *testing.T) {
	t.Parallel()
	var paths [][]reflect.StructField
	var walk func(reflect.Type, []reflect.StructField)
	walk = func(typ reflect.Type, at []reflect.StructField) {
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			path := append(slices.Clone(at), f)
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() == reflect.Struct:
				walk(ft, path)
			case secretKey.MatchString(tag) && (ft.Kind() == reflect.String || ft.Kind() == reflect.Map):
				paths = append(paths, path)
			}
		}
	}
	// Keys that look secret but are not: these name a [[keys]] entry.
	notSecret := map[string]bool{"Limits.Key": true, "Budgets.Key": true}
	walk(reflect.TypeFor[Config](), nil)
	if len(paths) < 7 {
		t.Fatalf("only %d secret fields found: the walk is broken", len(paths))
	}
	for _, path := range paths {
		names := make([]string, len(path))
		for i, f := range path {
			names[i] = f.Name
		}
		name := strings.Join(names, ".")
		if notSecret[name] {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const secret = "planted-secret-value"
			var c Config
			set(reflect.ValueOf(&c).Elem(), path, secret)
			if !slices.Contains(c.Secrets(), secret) {
				t.Fatalf("config.Secrets does not return %s", name)
			}
		})
	}
	// A header with an auth scheme gives its token too; a URL its password.
	c := Config{
		Tools:      []Tool{{Headers: map[string]string{"Authorization": "Bearer tok-123456"}}},
		Redis:      &Redis{Addr: "127.0.0.1:6379"},
		MCPServers: []MCPServer{{URL: "https://user:url-pass-99@mcp.example/x"}},
	}
	for _, want := range []string{"Bearer tok-123456", "tok-123456", "url-pass-99"} {
		if !slices.Contains(c.Secrets(), want) {
			t.Errorf("Secrets %q lacks %q", c.Secrets(), want)
		}
	}
	// An MCP server's env value is a secret under a credential's name
	// only: NODE_ENV = "production" would be masked in every tool result.
	env := map[string]string{"NODE_ENV": "production", "LOG_LEVEL": "verbose", "PATH": "/usr/local/bin", "HOME": "/home/app",
		"DATABASE_URL": "postgres://app:url-secret@db:5432/app", "REPO": "https://ghp-user-secret@github.com/o/r.git"}
	secret := []string{"GITHUB_TOKEN", "dbPassword", "PGPASSWORD", "DB_PASS", "GITHUB_PAT", "GPG_PASSPHRASE", "SECRET_KEY_BASE",
		"API_KEYS", "AUTH_HEADER", "PRIVATE_KEY_PEM", "SENTRY_DSN", "DB_CONNECTION_STRING", "SLACK_WEBHOOK_URL", "AWS_SECRET_ACCESS_KEY"}
	for _, n := range secret {
		env[n] = "value-of-" + n
	}
	c = Config{MCPServers: []MCPServer{{Env: env}}}
	s := c.Secrets()
	for _, n := range secret {
		if !slices.Contains(s, "value-of-"+n) {
			t.Errorf("MCP env %s is not a secret", n)
		}
	}
	for _, v := range []string{"production", "verbose", "/usr/local/bin", "/home/app"} {
		if slices.Contains(s, v) {
			t.Errorf("MCP env value %q is a secret", v)
		}
	}
	if !slices.Contains(s, "url-secret") || !slices.Contains(s, "ghp-user-secret") {
		t.Errorf("a URL's password in an MCP env value is not a secret: %q", s)
	}
	// A hash of a key is not a secret, and neither are names.
	c = Config{Keys: []Key{{Name: "team-a", SHA256: strings.Repeat("ab", 32)}}}
	if s := c.Secrets(); len(s) != 0 {
		t.Fatalf("Secrets of a config without secrets: %q", s)
	}
}

// set stores v at path in root, making the slices, pointers and maps on
// the way.
func set(root reflect.Value, path []reflect.StructField, v string) {
	cur := root
	for _, f := range path {
		cur = cur.FieldByIndex(f.Index)
		for cur.Kind() == reflect.Pointer || cur.Kind() == reflect.Slice {
			if cur.Kind() == reflect.Pointer {
				cur.Set(reflect.New(cur.Type().Elem()))
				cur = cur.Elem()
			} else {
				cur.Set(reflect.MakeSlice(cur.Type(), 1, 1))
				cur = cur.Index(0)
			}
		}
	}
	switch cur.Kind() {
	case reflect.String:
		cur.SetString(v)
	case reflect.Map:
		cur.Set(reflect.MakeMap(cur.Type()))
		cur.SetMapIndex(reflect.ValueOf("X-Api-Key"), reflect.ValueOf(v)) // a credential's name: an env value is a secret only under one
	}
}

// An OpenAPI base_url (and spec) reads ${NAME} as the other URL fields do,
// and a credential in a URL's query, whether the environment put it there
// or the file wrote it under a credential's name, is a secret: a tool's
// error shown to the model masks it. An address the environment names is
// not.
func TestURLQueryCredentialsAreSecrets(t *testing.T) {
	t.Setenv("GW_TEST_TOK", "tok-from-env-123")
	t.Setenv("GW_TEST_HOST", "api.internal.example")
	t.Setenv("GW_TEST_VER", "2024-10-21")
	t.Setenv("GW_HOOK_KEY", "hook-key-from-env-456")   // a secret's name, under a parameter that names none
	t.Setenv("GW_SORTKEYS", "created_at")              // no word of a secret's in the name: readable
	t.Setenv("GW_OWM_TOKEN", "owm-token-from-env-789") // the same
	c, err := Parse([]byte(`
[[tools]]
name = "hook"
kind = "http"
url = "http://h/hook?k=${GW_HOOK_KEY}&appid=${GW_OWM_TOKEN}&v=${GW_TEST_VER}&sort=${GW_SORTKEYS}"
parameters = '{"type":"object"}'
[[openapi]]
name = "o"
spec = "https://${GW_TEST_HOST}/spec.json?x=${GW_TEST_TOK}"
base_url = "https://${GW_TEST_HOST}/api?api_key=${GW_TEST_TOK}"
[[openapi]]
name = "p"
spec = "https://h/spec.json"
base_url = "https://h/api?token=literal-token-456&v=2024-01-01&apiToken=camel-token-789&oauth_signature_method=HMAC-SHA256"
[[openapi]]
name = "q"
spec = "https://h/spec.json"
base_url = "https://h/api?api-version=${GW_TEST_VER}"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.OpenAPI[0].BaseURL != "https://api.internal.example/api?api_key=tok-from-env-123" || !strings.Contains(c.OpenAPI[0].Spec, "x=tok-from-env-123") {
		t.Fatalf("not expanded: %q %q", c.OpenAPI[0].BaseURL, c.OpenAPI[0].Spec)
	}
	secrets := c.Secrets()
	for _, want := range []string{"tok-from-env-123", "literal-token-456", "camel-token-789", "hook-key-from-env-456", "owm-token-from-env-789"} {
		if !slices.Contains(secrets, want) {
			t.Errorf("%q is not a secret: %q", want, secrets)
		}
	}
	for _, not := range []string{"api.internal.example", "2024-01-01", "2024-10-21", "HMAC-SHA256", "created_at"} {
		if slices.Contains(secrets, not) {
			t.Errorf("%q is taken for a secret: %q", not, secrets)
		}
	}
}

// A URL in a config error shows no password, no query (it may hold a key
// the environment put there) and nothing of a URL that does not parse.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://user:pw-secret@h/api?api_key=k-secret&v=1": "https://user:xxxxx@h/api?...",
		"https://h/api":   "https://h/api",
		"http://[::1:x/a": "(a URL that does not parse)",
	} {
		if got := redactURL(in); got != want || strings.Contains(got, "secret") {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
