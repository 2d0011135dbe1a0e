package proxy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// fasthttp's messages, formatted the way it formats them, lose every value
// read from the connection and keep what helps debugging.
func TestFasthttpLoggerRedactsConnectionBytes(t *testing.T) {
	t.Parallel()
	const secret = "gwkey-0123456789abcdef"
	block := "POST /v1/chat/completions?key=" + secret + " HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + secret + "\r\nBad " + secret + "\r\n\r\n"
	long := "POST /v1/chat/completions HTTP/1.1\r\nX-Pad: " + strings.Repeat("p", 170) + "\r\nAuthorization: Bearer " + secret + "\r\n" + strings.Repeat("q", 190) + secret + "\r\n\r\n"
	cases := []struct {
		name       string
		format     string
		args       []any
		kept       []string
		wantSecret bool
	}{
		{
			name:   "header block",
			format: "error when serving connection %q<->%q: %v",
			args:   []any{"127.0.0.1:8080", "[::1]:5555", fmt.Errorf("error when reading request headers: missing colon: buffer size=%d, contents: %q", len(block), block)},
			kept:   []string{`\"127.0.0.1:8080\"<->\"[::1]:5555\"`, `POST /v1/chat/completions?[`, `HTTP/1.1`, `Host: [2 bytes]`, `Authorization: [`},
		},
		{
			name:   "cut header block",
			format: "error: %v",
			args:   []any{fmt.Errorf("contents: %q...%q", long[:200], long[len(long)-200:])},
			kept:   []string{`X-Pad: [`, `"...`},
		},
		{
			name:   "one value",
			format: "error: %v",
			args:   []any{fmt.Errorf("invalid header value %q", "Bearer "+secret+"\x01")},
			kept:   []string{"invalid header value [30 bytes]"},
		},
		{
			name:   "unbalanced quote",
			format: "error: %s",
			args:   []any{`bad "` + secret},
			kept:   []string{"bad [23 bytes]"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var sink bytes.Buffer
			fasthttpLogger{zerolog.New(&sink).Level(zerolog.DebugLevel)}.Printf(c.format, c.args...)
			out := sink.String()
			if strings.Contains(out, secret) || strings.Contains(out, secret[6:16]) {
				t.Errorf("the secret reached the log: %s", out)
			}
			for _, k := range c.kept {
				if !strings.Contains(out, k) {
					t.Errorf("%q is missing: %s", k, out)
				}
			}
		})
	}
	t.Run("off above debug", func(t *testing.T) {
		t.Parallel()
		var sink bytes.Buffer
		fasthttpLogger{zerolog.New(&sink).Level(zerolog.InfoLevel)}.Printf("x %q", "y")
		if sink.Len() != 0 {
			t.Fatalf("logged at info: %s", sink.String())
		}
	})
}

// An unknown method is cut at maxMethod bytes in the access line, as the
// path is bounded: a made-up method of kilobytes filled the lines.
func TestMethodNameBounded(t *testing.T) {
	if got := methodName([]byte("POST")); got != "POST" {
		t.Fatalf("POST: %q", got)
	}
	long := strings.Repeat("X", 3000)
	if got := methodName([]byte(long)); got != long[:maxMethod] {
		t.Fatalf("%d bytes", len(got))
	}
	if got := methodName([]byte(strings.Repeat("é", 100))); got != strings.Repeat("é", maxMethod/2) {
		t.Fatalf("cut inside a character: %q", got)
	}
}
