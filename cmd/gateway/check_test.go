package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testproc"
)

// -check's error line masks a spec URL's credentials (token=, sig=) as the
// start's log line does: it lands in CI logs.
func TestOpenAPICheckMasksSpecURL(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "spec.toml")
	body := checkConfig + `[[openapi]]
name = "t"
spec = "` + srv.URL + `/spec?token=LITERALTOK123&sig=SIGVAL999&x=1"
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-check", "-config", path).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "token=[REDACTED]&sig=[REDACTED]&x=1): status 404") ||
		strings.Contains(string(out), "LITERALTOK123") || strings.Contains(string(out), "SIGVAL999") {
		t.Fatalf("-check: exit %d, %q", code, out)
	}
}
