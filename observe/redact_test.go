package observe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Each case logs through a real zerolog logger (JSON and console) into a
// redacting writer and checks what reaches the sink.
func TestRedactorMasksSecretsAndCredentialHeaders(t *testing.T) {
	t.Parallel()
	const (
		apiKey = "sk-live-0123456789abcdef"
		quoted = `pa"ss\word-with"quotes` // JSON and %q escape it differently
		short  = "abc"                    // below MinSecretLen: not masked
	)
	r := &Redactor{}
	r.Add(apiKey, quoted, short, "")
	cases := []struct {
		name     string
		log      func(zerolog.Logger)
		gone     []string // must not reach the sink
		kept     []string // must reach it
		jsonOnly bool
	}{
		{
			name: "secret in a field",
			log:  func(l zerolog.Logger) { l.Info().Str("key", apiKey).Msg("x") },
			gone: []string{apiKey}, kept: []string{Mask},
		},
		{
			name: "secret inside an error text",
			log: func(l zerolog.Logger) {
				l.Warn().Err(fmt.Errorf("upstream said: Incorrect API key provided: %s.", apiKey)).Msg("x")
			},
			gone: []string{apiKey}, kept: []string{"Incorrect API key provided"},
		},
		{
			name: "secret with quotes and backslashes, plain and %q",
			log: func(l zerolog.Logger) {
				l.Info().Str("a", quoted).Msg(fmt.Sprintf("redis: auth %q failed", quoted))
			},
			gone: []string{"word-with", `pa\"ss`, `pa"ss`}, kept: []string{"redis: auth"},
		},
		{
			name: "short secret is left alone",
			log:  func(l zerolog.Logger) { l.Info().Msg("abc def") },
			kept: []string{"abc def"},
		},
		{
			name: "raw header block quoted by fasthttp",
			log: func(l zerolog.Logger) {
				l.Debug().Msg(fmt.Sprintf("contents: %q", "POST / HTTP/1.1\r\nAuthorization: Bearer tok-unknown-1\r\nX-API-KEY: tok-unknown-2\r\nCookie: a=\"b\"; s=tok-unknown-3\r\nHost: h\r\n\r\n"))
			},
			gone: []string{"tok-unknown-1", "tok-unknown-2", "tok-unknown-3"},
			kept: []string{"Host: h", "POST / HTTP/1.1"},
		},
		{
			name: "header lines in a message",
			log: func(l zerolog.Logger) {
				l.Debug().Msg("Proxy-Authorization: Basic dXNlcjpwYXNz\nset-cookie:sid=tok-unknown-4\napi-key = tok-unknown-5\nnext line")
			},
			gone: []string{"dXNlcjpwYXNz", "tok-unknown-4", "tok-unknown-5"},
			kept: []string{"next line"},
		},
		{
			name: "header map logged as JSON",
			log: func(l zerolog.Logger) {
				l.Debug().RawJSON("headers", []byte(`{"Authorization":"Bearer tok-unknown-6","Accept":"text/plain"}`)).Msg("x")
			},
			gone:     []string{"tok-unknown-6"},
			kept:     []string{`"Accept":"text/plain"`},
			jsonOnly: true,
		},
		{
			name: "bare bearer token",
			log:  func(l zerolog.Logger) { l.Info().Msg("got bearer tok-unknown-7") },
			gone: []string{"tok-unknown-7"},
		},
		{
			name: "words that are not headers",
			log:  func(l zerolog.Logger) { l.Info().Msg("authorization failed; cookies disabled; api-key missing") },
			kept: []string{"authorization failed; cookies disabled; api-key missing"},
		},
	}
	for _, c := range cases {
		for _, format := range []string{"json", "console"} {
			if c.jsonOnly && format == "console" {
				continue
			}
			t.Run(c.name+"/"+format, func(t *testing.T) {
				t.Parallel()
				var sink bytes.Buffer
				var w = r.Writer(&sink)
				if format == "console" {
					w = zerolog.ConsoleWriter{Out: w, NoColor: true}
				}
				c.log(zerolog.New(w))
				out := sink.String()
				for _, s := range c.gone {
					if strings.Contains(out, s) {
						t.Errorf("%q reached the sink: %s", s, out)
					}
				}
				for _, s := range c.kept {
					if !strings.Contains(out, s) {
						t.Errorf("%q is missing: %s", s, out)
					}
				}
				if format == "json" && !json.Valid(bytes.TrimSpace(sink.Bytes())) {
					t.Errorf("the line is no longer JSON: %s", out)
				}
			})
		}
	}
}

// NewLogger's writers redact with Secrets: a secret added after the logger
// was made is masked too.
func TestNewLoggerRedactsRegisteredSecrets(t *testing.T) {
	t.Parallel()
	const secret = "gw-registered-after-start-4242"
	var sink lockedSink
	log, closeLog := NewLogger("info", "json", &sink)
	Secrets.Add(secret)
	log.Info().Str("k", secret).Msg("Authorization: Bearer " + secret)
	closeLog()
	if out := sink.String(); strings.Contains(out, secret) || !strings.Contains(out, Mask) {
		t.Fatalf("got %s", out)
	}
}

// Redact neither changes its input nor allocates when there is nothing to
// mask. (Not parallel: AllocsPerRun refuses to run beside other tests.)
func TestRedactLeavesInputAlone(t *testing.T) {
	r := &Redactor{}
	r.Add("secret-value-1")
	line := []byte(`{"message":"secret-value-1 and Authorization: x"}`)
	orig := string(line)
	if out := r.Redact(line); string(line) != orig || bytes.Contains(out, []byte("secret-value-1")) {
		t.Fatalf("input %s, output %s", line, out)
	}
	clean := []byte(`{"level":"info","message":"request","status":200}` + "\n")
	if n := testing.AllocsPerRun(100, func() { _ = r.Redact(clean) }); n != 0 {
		t.Fatalf("%v allocations for a line with nothing to mask", n)
	}
}

func BenchmarkRedactAccessLine(b *testing.B) {
	r := &Redactor{}
	for i := range 20 {
		r.Add(fmt.Sprintf("sk-secret-number-%02d-abcdef", i))
	}
	line := []byte(`{"level":"info","request_id":"req_0123456789ab1","method":"POST","path":"/v1/chat/completions","model":"gpt-x","status":200,"latency":12.5,"bytes":1234,"time":"2026-11-23T18:57:59Z","message":"request"}` + "\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		_ = r.Redact(line)
	}
}

// lockedSink is a buffer safe for concurrent use.
type lockedSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSafeCut: the cut moves back to where a secret (or a possible start
// of one, at the end of the bytes) begins before it, and nowhere else.
func TestSafeCut(t *testing.T) {
	var r Redactor
	const secret = "sk-safecut-secret-42"
	if got := r.SafeCut([]byte("x"+secret), 5); got != 5 {
		t.Errorf("no secrets registered: cut %d, want 5", got)
	}
	r.Add(secret)
	for _, c := range []struct {
		p    string
		n    int
		want int
	}{
		{"abc" + secret + "def", 8, 3},                // splits the secret
		{"abc" + secret + "def", 3, 3},                // before it
		{"abc" + secret + "def", 3 + len(secret), 23}, // right after it
		{"abcdef", 6, 6},                              // nothing like one
		{"abcsk-safe", 10, 3},                         // the start of one, at the end
		{"abcsk-safx", 10, 10},                        // not one
		{"abcs", 4, 3},                                // one byte that may begin one
	} {
		if got := r.SafeCut([]byte(c.p), c.n); got != c.want {
			t.Errorf("SafeCut(%q, %d) = %d, want %d", c.p, c.n, got, c.want)
		}
	}
}

// FuzzSafeCut: the cut is never after n nor further back than a secret's
// length, and no secret in the bytes spans it.
func FuzzSafeCut(f *testing.F) {
	var r Redactor
	const secret = "sk-fuzz-safecut-secret"
	r.Add(secret)
	f.Add([]byte("abc"+secret+"def"), uint16(8))
	f.Add([]byte("sk-fuzz"), uint16(7))
	f.Fuzz(func(t *testing.T, p []byte, at uint16) {
		n := int(at) % (len(p) + 1)
		m := r.SafeCut(p, n)
		if m > n || m < n-r.set.Load().longest {
			t.Fatalf("SafeCut(%q, %d) = %d", p, n, m)
		}
		for i := 0; ; {
			j := bytes.Index(p[i:], []byte(secret))
			if j < 0 {
				break
			}
			if s := i + j; s < m && m < s+len(secret) {
				t.Fatalf("SafeCut(%q, %d) = %d splits the secret at %d", p, n, m, s)
			}
			i += j + 1
		}
	})
}

// A service that echoes the credentials it was sent writes them in its
// JSON encoder's way: '/' escaped (PHP's json_encode), characters past
// ASCII as \u escapes (Python's ensure_ascii, in either case of hex), <,
// > and & as \u escapes (Go's encoding/json), '+' and those as upper-case
// \u escapes (.NET's System.Text.Json). Each decodes to the secret,
// so each is masked.
func TestRedactSecretsInEveryJSONEncoding(t *testing.T) {
	t.Parallel()
	const slashy, wide = "k3y/With+slash/Secret==", "pässwörd<&>-secret-🔑"
	r := &Redactor{}
	r.Add(slashy, wide)
	goJSON, _ := json.Marshal(map[string]string{"k": wide})
	for _, echoed := range []string{
		`{"X-Key":"k3y\/With+slash\/Secret=="}`,
		`{"X-Key":"p\u00e4ssw\u00f6rd<&>-secret-\ud83d\udd11"}`,
		`{"X-Key":"p\u00E4ssw\u00F6rd<&>-secret-\uD83D\uDD11"}`,
		`{"X-Key":"p\u00e4ssw\u00f6rd\u003c\u0026\u003e-secret-\ud83d\udd11"}`,
		`{"X-Key":"k3y/With\u002Bslash/Secret=="}`, // .NET's System.Text.Json
		`{"X-Key":"p\u00E4ssw\u00F6rd\u003C\u0026\u003E-secret-\uD83D\uDD11"}`,
		string(goJSON),
	} {
		var v map[string]string
		if err := json.Unmarshal([]byte(echoed), &v); err != nil || (v["X-Key"] != slashy && v["X-Key"] != wide && v["k"] != wide) {
			t.Fatalf("%s is not an encoding of a secret: %v %q", echoed, err, v)
		}
		if got := string(r.RedactSecrets([]byte(echoed))); !strings.Contains(got, Mask) || strings.Contains(got, "secret") || strings.Contains(got, "Secret") {
			t.Errorf("%s → %s", echoed, got)
		}
	}
}

// A secret in a URL (a key in a base_url's query) is masked in the forms a
// URL carries it in: query- and path-escaped, and as a query parser that
// read its '+' as a space sends it and writes it back; an error that
// quotes the URL, or an API that echoes its request, shows none of it.
func TestRedactSecretsInURLForms(t *testing.T) {
	t.Parallel()
	const key = "s3cr+t/K3y=zz"
	r := &Redactor{}
	r.Add(key)
	u, _ := url.Parse("http://api.test/x?code=" + key) // as base_url is read
	for _, echoed := range []string{
		`Get "http://api.test/x?code=` + url.QueryEscape(key) + `": connection refused`,
		`{"uri":"/x/` + url.PathEscape(key) + `"}`,
		`{"uri":"/x?` + u.Query().Encode() + `"}`,
		`{"code":["` + u.Query().Get("code") + `"]}`,
	} {
		if got := string(r.RedactSecrets([]byte(echoed))); !strings.Contains(got, Mask) || strings.Contains(got, "K3y") {
			t.Errorf("%s → %s", echoed, got)
		}
	}
}

// A secret in a JSON string written with escapes the registered encodings
// do not cover (every character \u-escaped, or '=' escaped beside .NET's
// '+') is masked too, in the decoded text of that string; the rest of the
// document is left as it was, and nothing changes without a secret.
func TestRedactEscaped(t *testing.T) {
	t.Parallel()
	const key = "hk/Zq8+Rt/Wm3="
	r := &Redactor{}
	r.Add(key)
	esc := func(s string) string {
		var b strings.Builder
		for _, c := range s {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
		return b.String()
	}
	for _, doc := range []string{
		`{"k":"Bearer ` + esc(key) + `","n":1}`,
		`{"k":"Bearer hk/Zq8\u002BRt/Wm3\u003D"}`,
		`HTTP 500: {"k":"` + esc(key) + `"}`,
		`["a\"b", "x ` + esc(key) + ` y"]`,
	} {
		got := string(r.RedactEscaped([]byte(doc)))
		var v any
		decoded := got
		if strings.HasPrefix(doc, "{") || strings.HasPrefix(doc, "[") {
			if json.Unmarshal([]byte(got), &v) != nil {
				t.Errorf("%s → %s: no longer JSON", doc, got)
			}
			b, _ := json.Marshal(v)
			decoded = string(b)
		}
		if !strings.Contains(got, Mask) || strings.Contains(decoded, "Zq8") || strings.Contains(got, esc("Zq8")) {
			t.Errorf("%s → %s", doc, got)
		}
	}
	for _, doc := range []string{`{"k":"\u0041bc"}`, `plain "\n" text`, `{"k":"unclosed \u0041`} {
		if got := string(r.RedactEscaped([]byte(doc))); got != doc {
			t.Errorf("%s changed: %s", doc, got)
		}
	}
}

// FuzzRedactEscaped: any bytes never panic, a JSON document stays JSON,
// and no escaped form of the secret survives in a string that decodes.
func FuzzRedactEscaped(f *testing.F) {
	r := &Redactor{}
	r.Add("fz/Zq8+Rt/Wm3=")
	f.Add([]byte(`{"k":"\u0066\u007a/Zq8\u002BRt/Wm3\u003D"}`))
	f.Add([]byte(`["\"", "\\", "\ud83d\ude00", "unclosed`))
	f.Fuzz(func(t *testing.T, p []byte) {
		out := r.RedactEscaped(p)
		if json.Valid(p) && !json.Valid(out) {
			t.Fatalf("%q → %q: no longer JSON", p, out)
		}
		var v any
		if json.Unmarshal(out, &v) == nil {
			b, _ := json.Marshal(v)
			if strings.Contains(string(b), "fz/Zq8+Rt/Wm3=") {
				t.Fatalf("%q → %q: the secret survives", p, out)
			}
		}
	})
}
