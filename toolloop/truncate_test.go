package toolloop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

var truncNote = regexp.MustCompile(`^result truncated to (\d+) of (\d+) bytes$`)

// checkTruncated asserts that out (a truncated result) fits max, is valid
// JSON, keeps a prefix of orig, and that its note reports the real kept and
// original sizes.
func checkTruncated(t *testing.T, out []byte, max int, orig string) {
	t.Helper()
	if len(out) > max || !gjson.ValidBytes(out) || !utf8.Valid(out) {
		t.Fatalf("%d bytes (max %d), valid %v: %.200s", len(out), max, gjson.ValidBytes(out), out)
	}
	r := gjson.ParseBytes(out)
	m := truncNote.FindStringSubmatch(r.Get("note").Str)
	if !r.Get("truncated").Bool() || m == nil {
		t.Fatalf("note %q", r.Get("note").Str)
	}
	kept, total := atoi(t, m[1]), atoi(t, m[2])
	text := r.Get("data").Str
	if r.Get("status").Str == "error" {
		text = r.Get("error.message").Str
	}
	if total != len(orig) || kept != len(text) || !strings.HasPrefix(orig, text) || kept == 0 {
		t.Fatalf("note %q: kept %d bytes (a prefix: %v), original %d bytes", r.Get("note").Str, len(text), strings.HasPrefix(orig, text), len(orig))
	}
	// Nearly the whole budget is used: at most one rune or escape short.
	if max-len(out) > 16 {
		t.Fatalf("%d bytes of a %d budget used", len(out), max)
	}
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTruncateResultReportsRealSizes(t *testing.T) {
	t.Parallel()
	quotes := `{"rows":[` + strings.Repeat(`{"k":"v\"q"},`, 3000) + `{}]}` // JSON whose text escapes to more bytes
	ctl := strings.Repeat("a\x01\n", 2000)                                 // control characters: 6 bytes each once escaped
	for _, tc := range []struct {
		name    string
		orig    string
		content []byte
	}{
		{"string data", strings.Repeat("é", 5000), okContent([]byte(strings.Repeat("é", 5000)))},
		{"json data with escapes", quotes, okContent([]byte(quotes))},
		{"control characters", ctl, okContent([]byte(ctl))},
		{"error message", strings.Repeat("x", 9000), errContent(&ToolError{Kind: "x", Message: strings.Repeat("x", 9000)}, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkTruncated(t, truncateResult(tc.content, 1000, nil), 1000, tc.orig)
		})
	}
}

// An http tool reads at most a few times max_result_bytes, yet the note
// names the size the service really sent (the bug: "truncated to 3936 of
// 17436 bytes" for a 200,011-byte answer), with or without a
// Content-Length.
func TestHTTPToolTruncationReportsRealSize(t *testing.T) {
	t.Parallel()
	body := `{"items":"` + strings.Repeat("0123456789", 20000)[:199999] + `"}` // 200,011 bytes
	for _, tc := range []struct {
		name   string
		length bool
	}{
		{"content-length", true},
		{"chunked", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.length {
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				}
				for i := 0; i < len(body); i += 4096 {
					_, _ = w.Write([]byte(body[i:min(i+4096, len(body))]))
					if !tc.length {
						w.(http.Flusher).Flush()
					}
				}
			}))
			defer srv.Close()
			l := newLoop(t, []config.Tool{{Name: "big", Kind: "http", URL: srv.URL}}, func(o *Options) { o.Loop.MaxResultBytes = 4096 })
			res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "big", Arguments: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			checkTruncated(t, res.Content, 4096, body)
		})
	}
}
