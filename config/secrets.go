package config

import (
	"net/url"
	"slices"
	"strings"
)

// Secrets returns every secret value in c, expanded, for the log redactor:
// provider api_keys and header values, gateway keys, the admin key and the
// tool loop's approval_secret, the
// Redis password, tool, MCP server, guardrail and tracing exporter header values, MCP
// server env values named as secrets (secretEnvName: GITHUB_TOKEN,
// PGPASSWORD; not NODE_ENV = "production", which would be masked in every
// tool result) and the user info of a URL in any,
// the password of any URL that carries one, the values
// of URL query parameters named as credentials (key=, token=, sig=, ...),
// and what ${NAME} put in a URL's query or user info. A header
// value with an auth scheme ("Bearer xyz") is returned whole and without
// its scheme. The result is a new slice; empty values are left out.
func (c *Config) Secrets() []string {
	var out []string
	add := func(vs ...string) {
		for _, v := range vs {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			out = append(out, v)
			if scheme, rest, ok := strings.Cut(v, " "); ok && !strings.ContainsAny(scheme, "=:") {
				if rest = strings.TrimSpace(rest); rest != "" {
					out = append(out, rest)
				}
			}
		}
	}
	addMap := func(m map[string]string) {
		for _, v := range m {
			add(v)
		}
	}
	addURL := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		if u.User != nil {
			p, _ := u.User.Password()
			add(p)
		}
		for k, vs := range u.Query() {
			if credentialParam(k) {
				add(vs...)
			}
		}
	}
	add(c.urlSecrets...)
	for _, p := range c.Providers {
		add(p.APIKey)
		addMap(p.Headers)
		addURL(p.BaseURL)
	}
	add(c.Server.AdminKey, c.ToolLoop.ApprovalSecret)
	for _, k := range c.Keys {
		add(k.Key)
	}
	for _, t := range c.Tools {
		addMap(t.Headers)
		addURL(t.URL)
	}
	for _, s := range c.MCPServers {
		addMap(s.Headers)
		for k, v := range s.Env {
			if secretEnvName(k) {
				add(v)
			}
			addURL(v) // DATABASE_URL = "postgres://user:password@..."
			if u, err := url.Parse(v); err == nil && u.User != nil {
				if _, hasPassword := u.User.Password(); !hasPassword {
					add(u.User.Username()) // https://ghp_token@github.com/..., a Sentry DSN's key
				}
			}
		}
		addURL(s.URL)
	}
	for _, s := range c.OpenAPI {
		addMap(s.Headers)
		addURL(s.BaseURL)
		addURL(s.Spec)
	}
	for _, g := range c.Guardrails {
		addMap(g.Headers)
		addURL(g.URL)
	}
	addMap(c.Tracing.Headers)
	addURL(c.Tracing.Endpoint)
	if c.Redis != nil {
		add(c.Redis.Password)
		add(c.Redis.SentinelPassword)
		addURL(c.Redis.Addr)
	}
	return out
}

// credentialParam reports whether a URL query parameter's name says it
// carries a credential: its last word (split at '_', '-', '.' and a
// lower-to-upper case change) is one (key=, api_key=, access-token=,
// apiToken=, sig=, code=), or it is a run-together one (apikey=). A name
// whose credential word comes earlier (token_type=,
// oauth_signature_method=) names something else.
func credentialParam(name string) bool {
	if slices.Contains(credentialNames, strings.ToLower(name)) {
		return true
	}
	last := name
	for i := len(name) - 1; i > 0; i-- {
		c := name[i]
		if c == '_' || c == '-' || c == '.' {
			last = name[i+1:]
			break
		}
		if 'A' <= c && c <= 'Z' && 'a' <= name[i-1] && name[i-1] <= 'z' {
			last = name[i:]
			break
		}
	}
	return slices.Contains(credentialWords, strings.ToLower(last))
}

// secretEnvName reports whether an environment variable's name says its
// value is a secret: a word of it is a credential's (GITHUB_PAT, DB_PASS,
// SENTRY_DSN, SECRET_KEY_BASE, API_KEYS, AUTH_HEADER, PRIVATE_KEY_PEM), or
// it runs one together (PGPASSWORD, GPG_PASSPHRASE). NODE_ENV, LOG_LEVEL
// or PATH say nothing of the kind.
func secretEnvName(name string) bool {
	lower := strings.ToLower(name)
	for _, w := range secretRuns {
		if strings.Contains(lower, w) {
			return true
		}
	}
	for _, w := range strings.FieldsFunc(lower, func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		if slices.Contains(secretEnvWords, w) {
			return true
		}
	}
	return credentialParam(name)
}

var (
	secretRuns     = []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "privatekey", "credential"}
	secretEnvWords = []string{"key", "keys", "pass", "pwd", "pat", "dsn", "auth", "private", "sig", "signature", "webhook",
		"cookie", "session", "cert", "connection", "conn"}
	credentialWords = []string{"key", "token", "secret", "password", "passwd", "pwd", "sig", "signature", "auth", "code", "credential", "credentials"}
	credentialNames = []string{"apikey", "accesstoken", "authtoken", "sessiontoken", "clientsecret", "secretkey", "accesskey"}
)

// UpstreamAddrs returns what names the providers' addresses in an error
// text: each base_url as written and without its path, and its host with
// and without the port.
func (c *Config) UpstreamAddrs() []string {
	var out []string
	for _, p := range c.Providers {
		u, err := url.Parse(strings.TrimSpace(p.BaseURL))
		if err != nil || u.Host == "" {
			continue
		}
		out = append(out, strings.TrimRight(p.BaseURL, "/"), u.Scheme+"://"+u.Host, u.Host, u.Hostname())
	}
	return out
}
