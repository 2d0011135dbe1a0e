package observe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// FuzzRedact: whatever a log line holds, redaction keeps it valid JSON and
// a registered secret logged in a message, a string field or an error is
// gone from the decoded line.
func FuzzRedact(f *testing.F) {
	f.Add("sk-secret-123456", "Authorization: Bearer x\r\ncookie: a=\"b\"", "api_key")
	f.Add(`pa"ss\word`, `{"api_key":5,"cookie":{"a":1}}`, "authorization")
	f.Add("nabcdef", `\nabcdef \\nabcdef`, "x-api-key")
	f.Add("ünïcødé-sec", "bearer \\u000a", "set-cookie")
	f.Fuzz(func(t *testing.T, secret, text, field string) {
		r := &Redactor{}
		r.Add(secret)
		var sink bytes.Buffer
		log := zerolog.New(r.Writer(&sink))
		log.Info().Str(field, text+secret).Int("api_key", 1).RawJSON("cookie", []byte(`{"a":[1]}`)).
			Str("authorization", secret).Msg(text + secret + text)
		line := bytes.TrimSpace(sink.Bytes())
		if !json.Valid(line) {
			t.Fatalf("not JSON after redaction: %s", line)
		}
		if len(secret) < MinSecretLen || !utf8.ValidString(secret) || strings.ContainsRune(secret, 0) {
			return // config values are UTF-8 (TOML); an invalid byte can fuse with the next one into a rune
		}
		var v map[string]any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatal(err)
		}
		for k, val := range v {
			// The mask itself may complete a string that looks like the secret
			// ("abcde" + "[REDACTED]" for the secret "abcde["): that is not it.
			if s, ok := val.(string); ok && strings.Contains(strings.ReplaceAll(s, Mask, "\x00"), secret) {
				t.Fatalf("field %q still holds the secret %q: %s", k, secret, line)
			}
		}
	})
}

// FuzzReplaceSkipsOnlyNonCandidates: replace visiting only the positions
// that hold a form's first byte masks exactly what visiting every byte
// masks, for one to five secrets (five first bytes turn the skipping off).
func FuzzReplaceSkipsOnlyNonCandidates(f *testing.F) {
	f.Add("sk-secret-1", "tk_other-22", 3, `{"k":"sk-secret-1tk_other-22 sk-secre sk-secret-1"}`)
	f.Add("aaaaaa", "aaaaab", 2, "aaaaaaaaaaab aaaaa")
	f.Add(`q"uoted`, "ünïcødé", 5, `q\"uoted ünïcødé \u00fc`)
	f.Fuzz(func(t *testing.T, s1, s2 string, n int, line string) {
		secrets := []string{s1, s2}
		for i := range n % 4 {
			secrets = append(secrets, string(rune('v'+i))+s1) // more first bytes
		}
		r := &Redactor{}
		r.Add(secrets...)
		set := r.set.Load()
		if set == nil {
			return
		}
		every := *set
		every.firsts = nil
		got, want := set.replace([]byte(line)), every.replace([]byte(line))
		if !bytes.Equal(got, want) {
			t.Fatalf("secrets %q, line %q: skipping gives %q, every byte %q", secrets, line, got, want)
		}
	})
}
