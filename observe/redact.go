package observe

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/llmgw/gateway/jsonstring"
)

// Mask replaces every secret the log redactor finds.
const Mask = "[REDACTED]"

// MinSecretLen is the shortest secret Redactor.Add registers: masking every
// occurrence of a shorter string would mangle ordinary log text, and a
// secret that short protects nothing anyway.
const MinSecretLen = 6

// Secrets is the process's log redactor: every writer NewLogger returns
// masks its secrets and credential header values before bytes reach the
// sink. gateway.Build adds the secrets of each config it builds. A secret
// stays registered for the life of the process (lines about an old config
// may still be logged after a reload).
var Secrets = &Redactor{}

// UpstreamAddrs holds the configured providers' base URLs and hosts
// (config.Config.UpstreamAddrs): an upstream's error message the gateway
// forwards to a client has them masked (RedactSecrets), as a secret is, so
// that a provider that names its own address (an internal proxy's host,
// a deployment's URL) does not show the client where the gateway's
// upstreams are. Logs keep them. gateway.Build adds each config's.
var UpstreamAddrs = &Redactor{}

// Redactor masks registered secret values and the values of credential
// headers (Authorization, Proxy-Authorization, X-Api-Key, Api-Key, Cookie,
// Set-Cookie, and "Bearer <token>") in log lines. Safe for concurrent use;
// Add is rare, Redact lock-free.
type Redactor struct {
	mu  sync.Mutex                // serializes Add
	set atomic.Pointer[secretSet] // replaced whole by Add
}

// secretSet is every registered form of every secret, indexed by its first
// two bytes so that a line is scanned once however many secrets there are.
// Immutable once built.
type secretSet struct {
	forms    map[string]bool
	bits     [1 << 16 / 64]uint64 // a bit per two-byte prefix some form starts with
	byPrefix map[uint16][][]byte  // the forms with that prefix, longest first
	// firsts is every first byte a form starts with, when there are at most
	// maxFirsts (the usual case: a key's forms differ after their first
	// byte); nil when there are more. replace then visits only the
	// positions that hold one, found by bytes.IndexByte, instead of every
	// byte of the line.
	firsts []byte
	// longest is the length of the longest form.
	longest int
}

const maxFirsts = 4

func prefix(b []byte) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }

// Add registers secrets. Each is matched as written, JSON-escaped (as
// zerolog writes it) and Go-quoted (as %q writes it), so that it is found in
// a JSON line, in a console line and in a quoted error text; and in the
// other JSON encodings services echo it in (a tool's answer quoting the
// credentials it was sent): with '/' escaped (PHP), with every character
// past ASCII as \u escapes (Python's ensure_ascii, PHP; either case of hex
// digit), with <, > and & as \u escapes (Go's encoding/json), and as
// .NET's System.Text.Json writes it (jsonEncodings); and as a URL carries
// it (urlForms). Secrets shorter than
// MinSecretLen are ignored.
func (r *Redactor) Add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := &secretSet{forms: map[string]bool{}, byPrefix: map[uint16][][]byte{}}
	if cur := r.set.Load(); cur != nil {
		for f := range cur.forms {
			next.forms[f] = true
		}
	}
	for _, s := range secrets {
		if len(s) < MinSecretLen {
			continue
		}
		quoted := strconv.Quote(s)
		quoted = quoted[1 : len(quoted)-1]
		for _, form := range []string{s, jsonEscape(s), quoted, jsonEscape(quoted)} {
			next.forms[form] = true
		}
		for _, e := range jsonEncodings {
			next.forms[e.escape(s)] = true
		}
		for _, u := range urlForms(s) {
			next.forms[u] = true
		}
	}
	for f := range next.forms {
		k := prefix([]byte(f))
		next.bits[k/64] |= 1 << (k % 64)
		next.byPrefix[k] = append(next.byPrefix[k], []byte(f))
		if bytes.IndexByte(next.firsts, f[0]) < 0 {
			next.firsts = append(next.firsts, f[0])
		}
		next.longest = max(next.longest, len(f))
	}
	if len(next.firsts) > maxFirsts {
		next.firsts = nil
	}
	// Longest first, so that a secret that contains another is masked whole.
	for _, forms := range next.byPrefix {
		sort.Slice(forms, func(i, j int) bool {
			if len(forms[i]) != len(forms[j]) {
				return len(forms[i]) > len(forms[j])
			}
			return bytes.Compare(forms[i], forms[j]) < 0
		})
	}
	r.set.Store(next)
}

// urlForms returns the forms s takes in a URL (a key in a base_url's query,
// quoted back by an error or an API that echoes its request): query- and
// path-escaped, a space as %20 too, and, when s itself reads as
// query-escaped ('+' a space, %XX a byte), what a parser that decoded it
// sends and writes back.
func urlForms(s string) []string {
	q := url.QueryEscape(s)
	forms := []string{q, url.PathEscape(s), strings.ReplaceAll(q, "+", "%20")}
	if d, err := url.QueryUnescape(s); err == nil && d != s && len(d) >= MinSecretLen {
		dq := url.QueryEscape(d)
		forms = append(forms, d, jsonEscape(d), dq, url.PathEscape(d), strings.ReplaceAll(dq, "+", "%20"))
	}
	return forms
}

// jsonEscape returns s escaped the way zerolog escapes a string value
// (without the quotes): only what JSON requires.
func jsonEscape(s string) string { return jsonEncoding{}.escape(s) }

// jsonEncoding is one way a JSON encoder may write a string: which
// characters it writes as \u escapes beyond those JSON requires.
type jsonEncoding struct {
	slash    bool   // '/' as \/ (PHP)
	nonASCII bool   // every character past ASCII (Python's ensure_ascii, PHP, .NET)
	upper    bool   // upper-case hex digits
	extra    string // these too (Go's encoding/json: <>&; .NET's: "+'`<>&)
}

// jsonEncodings are the encodings a secret is matched in besides
// jsonEscape's: each combination of '/' escaped, Go's <>&, every
// character past ASCII and the case of the hex digits, and .NET's
// System.Text.Json default (JavaScriptEncoder.Default).
var jsonEncodings = func() []jsonEncoding {
	var out []jsonEncoding
	for _, slash := range []bool{false, true} {
		for _, extra := range []string{"", "<>&"} {
			for _, nonASCII := range []bool{false, true} {
				for _, upper := range []bool{false, true} {
					out = append(out, jsonEncoding{slash: slash, nonASCII: nonASCII, upper: upper, extra: extra})
				}
			}
		}
	}
	return append(out, jsonEncoding{nonASCII: true, upper: true, extra: "\"+'`<>&"})
}()

// escape returns s as e writes it (without the quotes). An invalid byte
// is U+FFFD, written as an escape.
func (e jsonEncoding) escape(s string) string {
	hex := "0123456789abcdef"
	if e.upper {
		hex = "0123456789ABCDEF"
	}
	u := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	var b []byte
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		invalid := r == utf8.RuneError && size == 1
		i += size
		switch {
		case strings.ContainsRune(e.extra, r):
			b = u(b, r)
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r < 0x20 || r == 0x7f || invalid:
			b = u(b, r)
		case r == '/' && e.slash:
			b = append(b, '\\', '/')
		case r > 0xffff && e.nonASCII:
			hi, lo := utf16.EncodeRune(r)
			b = u(u(b, hi), lo)
		case r >= utf8.RuneSelf && e.nonASCII:
			b = u(b, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

// RedactSecrets returns p with the registered secrets masked, and nothing
// else: for what is not a log line (an answer relayed to a client), whose
// credential-looking values are data. p itself when there is none.
func (r *Redactor) RedactSecrets(p []byte) []byte {
	if set := r.set.Load(); set != nil {
		return set.replace(p)
	}
	return p
}

// Any reports whether a secret is registered: a caller may skip work that
// only finds them.
func (r *Redactor) Any() bool { return r.set.Load() != nil }

// SafeCut returns the largest cut m <= n of p at which no registered
// secret is split: where a secret (or, at p's end, what may be the start
// of one) begins before n and ends after it, m is where it begins. A caller
// that writes p[:m] masked and holds the rest until more bytes come never
// writes part of a secret unmasked.
func (r *Redactor) SafeCut(p []byte, n int) int {
	set := r.set.Load()
	if set == nil {
		return n
	}
	for i := max(0, n-set.longest+1); i < n; i++ {
		if i+1 >= len(p) {
			// One byte left: it may begin a secret.
			if set.firsts == nil || bytes.IndexByte(set.firsts, p[i]) >= 0 {
				return i
			}
			continue
		}
		k := prefix(p[i:])
		if set.bits[k/64]&(1<<(k%64)) == 0 {
			continue
		}
		for _, f := range set.byPrefix[k] {
			if i+len(f) <= n {
				continue // ends before the cut
			}
			rest := p[i:]
			if len(rest) > len(f) {
				rest = rest[:len(f)]
			}
			if bytes.HasPrefix(f, rest) {
				return i // the earliest start wins
			}
		}
	}
	return n
}

// Redact returns p with secrets masked. It returns p itself when there is
// nothing to mask, else a new slice; p is not modified.
func (r *Redactor) Redact(p []byte) []byte {
	out := p
	if set := r.set.Load(); set != nil {
		out = set.replace(p)
	}
	return maskCredentials(out)
}

// replace returns b with every registered form masked: b itself when there
// is none, else a new slice. A match that starts or ends inside an escape
// sequence is not the secret (see insideEscape).
func (set *secretSet) replace(b []byte) []byte {
	var out []byte // nil until the first change
	last := 0      // b[last:] is not yet copied to out
	var next candidates
	if set.firsts != nil {
		next.start(b, set.firsts)
	}
	for i := 0; i+1 < len(b); i++ {
		if set.firsts != nil {
			// Skip to the next byte a form may start with: the bits
			// below are clear everywhere else.
			if i = next.from(b, i); i+1 >= len(b) {
				break
			}
		}
		k := prefix(b[i:])
		if set.bits[k/64]&(1<<(k%64)) == 0 {
			continue
		}
		for _, s := range set.byPrefix[k] {
			if !bytes.HasPrefix(b[i:], s) || insideEscape(b, i) || insideEscape(b, i+len(s)) {
				continue
			}
			if out == nil {
				out = make([]byte, 0, len(b))
			}
			out = append(out, b[last:i]...)
			out = append(out, Mask...)
			last = i + len(s)
			i = last - 1
			break
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// candidates finds, in order, the positions of a line that hold one of a
// few bytes: for each byte, where it next occurs.
type candidates struct {
	bytes []byte
	at    [maxFirsts]int // where bytes[k] next occurs at or after the last from; len(b) when it does not
}

func (c *candidates) start(b, firsts []byte) {
	c.bytes = firsts
	for k, f := range firsts {
		c.at[k] = indexFrom(b, 0, f)
	}
}

// from returns the first position at or after i that holds one of the
// bytes, or len(b).
func (c *candidates) from(b []byte, i int) int {
	first := len(b)
	for k, f := range c.bytes {
		if c.at[k] < i {
			c.at[k] = indexFrom(b, i, f)
		}
		first = min(first, c.at[k])
	}
	return first
}

// indexFrom returns the index of the first c in b[i:], counted from the
// start of b, or len(b).
func indexFrom(b []byte, i int, c byte) int {
	if j := bytes.IndexByte(b[i:], c); j >= 0 {
		return i + j
	}
	return len(b)
}

// escaped reports whether b[i] follows an odd number of backslashes.
func escaped(b []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// insideEscape reports whether b[i] continues an escape sequence that
// starts before i (\x or \uXXXX): a match that starts or ends there is
// not the secret, and masking it would break the line's JSON.
func insideEscape(b []byte, i int) bool {
	if i >= len(b) {
		return false
	}
	if escaped(b, i) {
		return true
	}
	for p := i - 2; p >= 0 && p >= i-5; p-- {
		if b[p] == '\\' && b[p+1] == 'u' && !escaped(b, p) {
			for _, c := range b[p+2 : i] {
				if !isHex(c) {
					return false
				}
			}
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// credentialNames are matched case-insensitively; a name ending in one of
// them counts too (x-api-key, proxy-authorization, set-cookie). "bearer"
// catches a token printed without its header name.
var credentialNames = [...][][]byte{
	1: {[]byte("authorization"), []byte("api-key"), []byte("api_key"), []byte("apikey")},
	2: {[]byte("bearer")},
	3: {[]byte("cookie")},
}

// credentialStart maps the first two bytes of a credential name, either
// case, to its credentialNames entry: credentialStart[0][c] is the entry
// of the names starting with c (0: none), and credentialStart[k][c2] is k
// when a name of entry k goes on with c2. Two table reads a byte, in place
// of a comparison of each byte with every start.
var credentialStart = func() (t [len(credentialNames)][256]uint8) {
	for k, names := range credentialNames {
		for _, n := range names {
			for _, c := range []byte{n[0], n[0] &^ 0x20} {
				t[0][c] = uint8(k)
			}
			for _, c := range []byte{n[1], n[1] &^ 0x20} {
				t[k][c] = uint8(k)
			}
		}
	}
	return t
}()

// maskCredentials masks the value after a credential header name: the name,
// then optional quote, spaces and one of ':' or '=' (or, for "bearer", a
// space) start the value; it runs to the end of the header line, whether the
// line break is raw, JSON-escaped or escaped twice (a %q text inside a JSON
// string), or to the end of the enclosing JSON string.
func maskCredentials(b []byte) []byte {
	var out []byte // nil until the first change
	last := 0      // b[last:] is not yet copied to out
	for i := 0; i+1 < len(b); i++ {
		// Two bytes pick the candidate names: most letters start none.
		k := credentialStart[0][b[i]]
		if k == 0 || credentialStart[k][b[i+1]] != k {
			continue
		}
		for _, name := range credentialNames[k] {
			if i+len(name) > len(b) || !bytes.EqualFold(b[i:i+len(name)], name) {
				continue
			}
			jsonLine := bytes.HasPrefix(b[bytes.LastIndexByte(b[:i], '\n')+1:], []byte("{"))
			start := valueStart(b, i+len(name), name[0] == 'b', jsonLine)
			if start < 0 {
				continue
			}
			end := valueEnd(b, start)
			if end == start {
				continue
			}
			if out == nil {
				out = make([]byte, 0, len(b))
			}
			out = append(out, b[last:start]...)
			out = append(out, Mask...)
			last = end
			i = end - 1
			break
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// valueStart returns where the value after a credential name at b[:j]
// starts, or -1 when no separator follows the name. In a JSON line an
// unescaped quote after the separator opens the value only when the name is
// a key of the line's object; otherwise it closes the string the name is
// in. In a console line it opens a quoted value.
func valueStart(b []byte, j int, bearer, jsonLine bool) int {
	if bearer {
		if j < len(b) && b[j] == ' ' {
			for j < len(b) && b[j] == ' ' {
				j++
			}
			return j
		}
		return -1
	}
	jsonKey := false                                   // the name is a key of the line's own JSON object
	if j+1 < len(b) && b[j] == '\\' && b[j+1] == '"' { // "authorization\":... inside a JSON string
		j += 2
	} else if j < len(b) && b[j] == '"' {
		jsonKey = true
		j++
	}
	for j < len(b) && b[j] == ' ' {
		j++
	}
	if j >= len(b) || (b[j] != ':' && b[j] != '=') {
		return -1
	}
	j++
	for j < len(b) && (b[j] == ' ' || b[j] == '\t') {
		j++
	}
	switch {
	case j+1 < len(b) && b[j] == '\\' && b[j+1] == '"':
		j += 2
	case j < len(b) && b[j] == '"':
		if jsonLine && !jsonKey {
			return -1
		}
		j++
	case jsonKey:
		return -1 // a number, object or array: masking it up to the next quote would break the line's JSON
	}
	return j
}

// valueEnd returns the end of a value that starts at b[i]: a raw CR or LF,
// an escaped one (\r, \n, \u000a, \u000d, or \\r, \\n), or an unescaped
// quote. Other escapes are part of the value.
func valueEnd(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case '\r', '\n', '"':
			return i
		case '\\':
			if i+1 >= len(b) {
				return len(b)
			}
			switch n := b[i+1]; {
			case n == 'r' || n == 'n':
				return i
			case n == 'u' && i+5 < len(b) && (bytes.EqualFold(b[i+2:i+6], []byte("000a")) || bytes.EqualFold(b[i+2:i+6], []byte("000d"))):
				return i
			case n == '\\' && i+2 < len(b) && (b[i+2] == 'r' || b[i+2] == 'n'):
				return i
			}
			i += 2
		default:
			i++
		}
	}
	return len(b)
}

// Writer returns w wrapped so that every Write is redacted before it
// reaches w. A Write must hold whole log lines (zerolog writes one line per
// call; observe's queue writes whole lines in a batch), so that no secret is
// split across two writes. The wrapper adds no locking of its own.
func (r *Redactor) Writer(w io.Writer) io.Writer { return redactWriter{r: r, w: w} }

type redactWriter struct {
	r *Redactor
	w io.Writer
}

func (rw redactWriter) Write(p []byte) (int, error) {
	if _, err := rw.w.Write(rw.r.Redact(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// RedactEscaped is RedactSecrets, and then, in each JSON string of p
// written with escapes (a service's answer quoting a credential as
// "\u0042\u0065…", or .NET's "\u002B" for '+'), the secrets of its
// decoded text: such a string is written again, masked. A registered
// encoding (Add) covers the usual escapes; an answer may escape any
// character. For what a tool returns to the model and the client. p
// itself when nothing is masked.
func (r *Redactor) RedactEscaped(p []byte) []byte {
	return r.MaskEscapedStrings(r.RedactSecrets(p))
}

// MaskEscapedStrings masks the secrets in the decoded text of each JSON
// string of p written with escapes: such a string is written again,
// decoded, masked and encoded. Strings are found line by line (a JSON
// string holds no raw newline), so p may be the lines of a stream: a
// quote a line leaves open starts nothing past it. p itself when nothing
// is masked.
func (r *Redactor) MaskEscapedStrings(p []byte) []byte {
	if r.set.Load() == nil || bytes.IndexByte(p, '\\') < 0 {
		return p
	}
	var out []byte // nil until a string is rewritten
	last := 0
	for i := 0; i < len(p); i++ {
		if p[i] != '"' {
			continue
		}
		end, closed, escaped := stringEnd(p, i)
		if closed && escaped {
			if s, ok := unquoteJSON(p[i : end+1]); ok {
				if masked := r.RedactSecrets([]byte(s)); string(masked) != s {
					out = append(out, p[last:i]...)
					out = jsonstring.Append(out, string(masked))
					last = end + 1
				}
			}
		}
		i = end
	}
	if out == nil {
		return p
	}
	return append(out, p[last:]...)
}

// stringEnd returns where the JSON string opening at p[i] stops: the
// index of its closing quote (closed), else of the line's end or len(p);
// and whether the string holds an escape.
func stringEnd(p []byte, i int) (end int, closed, escaped bool) {
	for j := i + 1; j < len(p); j++ {
		switch p[j] {
		case '\\':
			if j+1 < len(p) && p[j+1] != '\n' {
				escaped = true
				j++
			}
		case '"':
			return j, true, escaped
		case '\n':
			return j, false, escaped
		}
	}
	return len(p), false, escaped
}

// unquoteJSON decodes the JSON string q (quotes included).
func unquoteJSON(q []byte) (string, bool) {
	var s string
	if json.Unmarshal(q, &s) != nil {
		return "", false
	}
	return s, true
}
