package main

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// TestAccessLine: -log writes one JSON line per request with the fields of
// the gateway's access line, and only once it is flushed (every
// millisecond, or when the buffer fills).
func TestAccessLine(t *testing.T) {
	var out bytes.Buffer
	bw := &batchWriter{w: bufio.NewWriterSize(&out, 64<<10)}
	log := zerolog.New(bw).With().Timestamp().Logger()
	x := access{log: &log, start: time.Now(), method: []byte("POST"), path: []byte("/v1/chat/completions"), model: "chat"}
	x.write(200, true, 4242, 7, 3)
	if out.Len() != 0 {
		t.Fatalf("a line reached the file before a flush: %q", out.String())
	}
	_ = bw.w.Flush()
	line := out.String()
	if strings.Count(line, "\n") != 1 || !gjson.Valid(line) {
		t.Fatalf("not one JSON line: %q", line)
	}
	for k, want := range map[string]string{"method": "POST", "path": "/v1/chat/completions", "model": "chat", "status": "200",
		"stream": "true", "bytes": "4242", "prompt_tokens": "7", "completion_tokens": "3", "message": "request"} {
		if got := gjson.Get(line, k).String(); got != want {
			t.Errorf("%s = %q, want %q in %s", k, got, want, line)
		}
	}
	if !strings.HasPrefix(gjson.Get(line, "request_id").String(), "req-") || !gjson.Get(line, "latency").Exists() || !gjson.Get(line, "time").Exists() {
		t.Errorf("request_id, latency or time missing: %s", line)
	}
	var none access // without -log, nothing is written and nothing panics
	none.write(200, false, 1, 0, 0)
}
