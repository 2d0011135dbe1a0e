package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
)

// A reload keeps the [server] settings the server takes at start, and
// warns for each one it changed: a reload that said "config reloaded"
// while a new listen address, idle timeout or log level did nothing misled
// the operator. Settings a reload applies are left as the new file has them.
func TestReloadKeepsStartOnlySettings(t *testing.T) {
	was := config.Server{Listen: "127.0.0.1:8080", MetricsListen: "", ReadTimeout: config.Duration(30 * time.Second),
		IdleTimeout: config.Duration(120 * time.Second), ReadBuffer: 4096, WriteBuffer: 4096, MaxBodyBytes: 1000,
		LogLevel: "info", LogFormat: "json"}
	now := config.Server{Listen: "127.0.0.1:8085", MetricsListen: "127.0.0.1:9", ReadTimeout: config.Duration(time.Second),
		IdleTimeout: config.Duration(time.Second), ReadBuffer: 8192, WriteBuffer: 1024, MaxBodyBytes: 2000,
		LogLevel: "debug", LogFormat: "console"}
	var logs bytes.Buffer
	keepStartOnly(&now, &was, zerolog.New(&logs))
	want := was
	want.MaxBodyBytes = 2000
	if now != want {
		t.Fatalf("after the reload: %+v, want %+v", now, want)
	}
	for _, key := range []string{"listen", "metrics_listen", "read_timeout", "idle_timeout", "read_buffer", "write_buffer", "log_level", "log_format"} {
		if !strings.Contains(logs.String(), `"key":"server.`+key+`"`) {
			t.Errorf("no warning for server.%s: %s", key, logs.String())
		}
	}
	logs.Reset()
	keepStartOnly(&now, &was, zerolog.New(&logs))
	if logs.Len() != 0 {
		t.Fatalf("warnings for a reload that changed none of them: %s", logs.String())
	}
}

// -log-level and -log-format are refused with the values the config file
// refuses, instead of being taken as info and JSON.
func TestCheckFlags(t *testing.T) {
	for _, c := range []struct {
		level, format string
		ok            bool
	}{
		{"", "", true}, {"debug", "console", true}, {"error", "json", true},
		{"bogus", "", false}, {"", "xml", false}, {"INFO", "", false},
	} {
		if err := checkFlags(c.level, c.format); (err == nil) != c.ok {
			t.Errorf("-log-level %q -log-format %q: %v, want ok %v", c.level, c.format, err, c.ok)
		}
	}
}
