package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/llmgw/gateway/observe"
)

// Load reads, decodes, expands, defaults and validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// Parse decodes b strictly and returns a validated config with defaults set.
func Parse(b []byte) (*Config, error) {
	var c Config
	dec := toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		if terr := typeErrors(b); terr != nil {
			return nil, withLines(terr, b) // by key, not by Go field
		}
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) && len(strict.Errors) > 0 {
			e := strict.Errors[0]
			row, col := e.Position()
			key := e.Key()
			if n := len(key); n > 0 {
				// The decoder names a key inside an inline table by its
				// table and its own name only: put the inline tables'
				// names between, from the line itself.
				key = append(append(key[:n-1:n-1], inlineTables(lineAt(b, row), col)...), key[n-1])
			}
			return nil, fmt.Errorf("line %d: unknown key %q", row, strings.Join(key, "."))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("line %d, column %d: %s", row, col, de.Error())
		}
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := typeErrors(b); err != nil {
		return nil, withLines(err, b) // a bare duration decodes
	}
	c.expand()
	if err := c.refErrors(b); err != nil {
		return nil, err
	}
	o := newOrigin(&c)
	c.ApplyDefaults()
	o.mapTo(&c)
	if err := c.validate(o); err != nil {
		return nil, c.maskEnv(withLines(err, b))
	}
	return &c, nil
}

// withLines fills in the line of every *KeyError joined in err.
func withLines(err error, b []byte) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	lines := keyLines(b)
	for _, e := range joined.Unwrap() {
		if ke, ok := e.(*KeyError); ok {
			ke.Line = lineOfKey(lines, ke.Key)
		}
	}
	return err
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandURL expands a URL field, keeping each value the environment put in
// its query or user info (an API key, a password) as a secret: the log
// redactor, and what a tool's error shows the model, mask it (Secrets). A
// value in the host or path (an address) stays visible in logs.
func (c *Config) expandURL(s *string) {
	if !strings.Contains(*s, "${") {
		return
	}
	from := len(c.envValues)
	c.expandStr(s)
	vals := c.envValues[from:] // what this field's references put in
	u, err := url.Parse(*s)
	if err != nil {
		return
	}
	// Secret: what is the whole password of the user info, or the whole
	// value of a query parameter named as a credential, or of any query
	// parameter when the variable's name says it holds a secret
	// (?k=${HOOK_KEY}, ?appid=${OWM_APIKEY}). Another value (an
	// api-version, a region) stays readable in logs and tool results.
	whole, query := map[string]bool{}, map[string]bool{}
	if u.User != nil {
		p, _ := u.User.Password()
		whole[p] = true
	}
	for k, vs := range u.Query() {
		for _, v := range vs {
			query[v] = true
			if credentialParam(k) {
				whole[v] = true
			}
		}
	}
	for _, e := range vals {
		if e.value != "" && (whole[e.value] || query[e.value] && secretEnvName(e.name)) {
			c.urlSecrets = append(c.urlSecrets, e.value)
		}
	}
}

// expandStr replaces the ${NAME} references in s with the environment's
// values, noting each (envValues), and notes a "${" that starts no such
// reference (badRefs): ${NAME:-default}, ${}, an unclosed one.
func (c *Config) expandStr(s *string) {
	if !strings.Contains(*s, "${") {
		return
	}
	if bad := malformedRef(*s); bad != "" {
		c.badRefs = append(c.badRefs, badRef{ref: bad, value: *s})
	}
	*s = envRef.ReplaceAllStringFunc(*s, func(m string) string {
		name := m[2 : len(m)-1]
		v := os.Getenv(name)
		c.envValues = append(c.envValues, envValue{name, v})
		return v
	})
}

// badRefStart finds, once the ${NAME} references are taken out, what is
// plainly meant as a reference the gateway does not read: a name after
// "${" (spaces allowed) that something else than "}" follows (the shell's
// ${NAME:-default} and its other operators, "${ NAME }", an unclosed
// "${NAME"), and an empty ${}. Any other "${" in a value (a password may
// hold one: "${%q") is taken as written.
var badRefStart = regexp.MustCompile(`\$\{\s*(?:[A-Za-z_][A-Za-z0-9_]*(?:[^A-Za-z0-9_]|$)|\})`)

// malformedRef returns the start of the first such reference of s
// (badRefStart), up to the first byte after its name, never what follows
// (a default may be a secret), or "" when it has none.
func malformedRef(s string) string {
	return badRefStart.FindString(envRef.ReplaceAllString(s, ""))
}

// badRef is a malformed reference and the value it is in (to find its
// line; never printed: it may hold a secret).
type badRef struct{ ref, value string }

// refErrors is the error of the malformed references expand found: each
// by its line in b (the line of the value as a quoted string, else as
// text; in the file's order), never the value around it.
func (c *Config) refErrors(b []byte) error {
	type found struct {
		line int
		ref  string
	}
	var all []found
	for _, r := range c.badRefs {
		i := bytes.Index(b, []byte(strconv.Quote(r.value)))
		if i < 0 {
			i = bytes.Index(b, []byte(r.value))
		}
		line := 0
		if i >= 0 {
			line = 1 + bytes.Count(b[:i], []byte("\n"))
		}
		all = append(all, found{line, r.ref})
	}
	slices.SortStableFunc(all, func(a, b found) int { return a.line - b.line })
	var errs []error
	for _, f := range all {
		where := ""
		if f.line > 0 {
			where = fmt.Sprintf("line %d: ", f.line)
		}
		errs = append(errs, fmt.Errorf("%s%q starts a shell-style reference, which the gateway does not expand: write ${NAME} alone (letters, digits and _), with no default or operator", where, f.ref))
	}
	return errors.Join(errs...)
}

func (c *Config) expandMap(m map[string]string) {
	for k, v := range m {
		c.expandStr(&v)
		m[k] = v
	}
}

// expandHeaders expands header values and trims the whitespace around
// each, which HTTP does not count as part of a value: a key read from a
// file with its newline (a Kubernetes secret) is the key.
func (c *Config) expandHeaders(m map[string]string) {
	for k, v := range m {
		c.expandStr(&v)
		m[k] = trimOWS(v)
	}
}

// trimOWS trims what HTTP trims around a header value (spaces and tabs)
// and a file's line end: not the other Unicode spaces strings.TrimSpace
// takes, which a request's header keeps (a key with a no-break space is
// another key).
func trimOWS(v string) string {
	return strings.Trim(v, " \t\r\n")
}

// expand resolves the secret-bearing fields; other fields stay literal.
func (c *Config) expand() {
	c.expandStr(&c.Server.AdminKey)
	c.Server.AdminKey = trimOWS(c.Server.AdminKey)
	for i := range c.Providers {
		p := &c.Providers[i]
		c.expandStr(&p.APIKey)
		p.APIKey = trimOWS(p.APIKey) // sent in a header (expandHeaders)
		c.expandURL(&p.BaseURL)
		c.expandHeaders(p.Headers)
	}
	for i := range c.Tools {
		c.expandHeaders(c.Tools[i].Headers)
		c.expandURL(&c.Tools[i].URL)
	}
	for i := range c.MCPServers {
		c.expandMap(c.MCPServers[i].Env)
		c.expandHeaders(c.MCPServers[i].Headers)
		c.expandURL(&c.MCPServers[i].URL)
	}
	for i := range c.Keys {
		c.expandStr(&c.Keys[i].Key)
		c.expandStr(&c.Keys[i].SHA256)
		// Keys are read from headers, whose values HTTP trims.
		c.Keys[i].Key, c.Keys[i].SHA256 = trimOWS(c.Keys[i].Key), trimOWS(c.Keys[i].SHA256)
	}
	if raw := c.ToolLoop.ApprovalSecret; raw != "" {
		c.expandStr(&c.ToolLoop.ApprovalSecret)
		// Trimmed as a key is (a Kubernetes secret file's newline would
		// make replicas disagree); one that expands to nothing is refused
		// (validate), not replaced by a random key per process.
		c.ToolLoop.ApprovalSecret = trimOWS(c.ToolLoop.ApprovalSecret)
		c.approvalUnset = c.ToolLoop.ApprovalSecret == ""
	}
	c.expandURL(&c.Tracing.Endpoint)
	for i := range c.OpenAPI {
		c.expandHeaders(c.OpenAPI[i].Headers)
		c.expandURL(&c.OpenAPI[i].BaseURL)
		c.expandURL(&c.OpenAPI[i].Spec)
	}
	for i := range c.Guardrails {
		c.expandHeaders(c.Guardrails[i].Headers)
		c.expandURL(&c.Guardrails[i].URL)
	}
	c.expandHeaders(c.Tracing.Headers)
	if c.Redis != nil {
		c.expandURL(&c.Redis.Addr)
		for _, f := range []struct {
			key string
			v   *string
		}{{"redis.password", &c.Redis.Password}, {"redis.sentinel_password", &c.Redis.SentinelPassword}} {
			written := *f.v != ""
			c.expandStr(f.v)
			if written && *f.v == "" {
				c.emptied = append(c.emptied, f.key)
			}
		}
		for i := range c.Redis.Addrs {
			c.expandURL(&c.Redis.Addrs[i])
		}
	}
}

// maskEnv masks, in the message of every *KeyError joined in err, the
// secrets ${NAME} gave: a value of a variable named as a credential
// (API_KEY, DB_PASSWORD: credentialParam) or one that went into a secret
// field (Secrets), in every form the log redactor knows (escaped in JSON,
// in a URL). A key put in the wrong field (base_url = "${API_KEY}") is
// then not printed by the error that says so, at start or by -check,
// before the log redactor knows it. Other values (a host) stay readable.
func (c *Config) maskEnv(err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok || len(c.envValues) == 0 {
		return err
	}
	secrets := c.Secrets()
	var r observe.Redactor
	for _, e := range c.envValues {
		if credentialParam(e.name) || slices.Contains(secrets, strings.TrimSpace(e.value)) {
			r.Add(e.value, strings.TrimSpace(e.value)) // keys and header values are kept trimmed
		}
	}
	for _, e := range joined.Unwrap() {
		if ke, ok := e.(*KeyError); ok {
			ke.Msg = string(r.RedactSecrets([]byte(ke.Msg)))
		}
	}
	return err
}

// lineAt returns line row (1-based) of b, or nil.
func lineAt(b []byte, row int) []byte {
	for i := 1; i < row; i++ {
		j := bytes.IndexByte(b, '\n')
		if j < 0 {
			return nil
		}
		b = b[j+1:]
	}
	if j := bytes.IndexByte(b, '\n'); j >= 0 {
		b = b[:j]
	}
	return b
}

// inlineTables returns the keys of the inline tables (a = {...}, or a =
// [{...}]) open at column col (1-based) of a TOML line, outermost first.
func inlineTables(line []byte, col int) []string {
	var open []string
	var key []byte // the last key read, before its =
	var word []byte
	for i := 0; i < len(line) && i < col-1; i++ {
		switch c := line[i]; {
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(line) && line[j] != c {
				if c == '"' && line[j] == '\\' {
					j++
				}
				j++
			}
			word = append(word[:0], line[min(i+1, len(line)):min(j, len(line))]...)
			i = j
		case isBare(c):
			if i == 0 || !isBare(line[i-1]) {
				word = word[:0]
			}
			word = append(word, c)
		case c == '=':
			key = append(key[:0], word...)
		case c == '{':
			open = append(open, string(key))
		case c == '}':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		}
	}
	return open
}

func isBare(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
