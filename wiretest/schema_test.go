package wiretest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestSchemaValidates(t *testing.T) {
	t.Parallel()
	s := LoadSchema(t)
	tests := []struct {
		name    string
		check   func([]byte) error
		doc     string
		wantErr string // "" = must validate
	}{
		{name: "chunk", check: s.Chunk, doc: role},
		{name: "tool chunk", check: s.Chunk, doc: tc0},
		{name: "finish chunk", check: s.Chunk, doc: stop},
		{name: "usage chunk", check: s.Chunk, doc: usageCh},
		{name: "completion", check: s.Completion, doc: `{"id":"chatcmpl-1","object":"chat.completion","created":1767225600,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`},
		{name: "completion with tool calls", check: s.Completion, doc: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}]}`},
		{name: "error", check: s.ErrorBody, doc: errorEnv},
		{name: "models", check: s.Models, doc: `{"object":"list","data":[{"id":"gpt-x","object":"model","created":1767225600,"owned_by":"gateway"}]}`},
		{name: "model", check: s.Model, doc: `{"id":"gpt-x","object":"model","created":1767225600,"owned_by":"gateway"}`},
		{name: "request", check: s.Request, doc: `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "chunk without finish_reason key", check: s.Chunk, doc: ch(`{"index":0,"delta":{"content":"x"}}`), wantErr: "finish_reason"},
		{name: "chunk with completion object", check: s.Chunk, doc: strings.Replace(role, "chat.completion.chunk", "chat.completion", 1), wantErr: "object"},
		{name: "tool chunk without index", check: s.Chunk, doc: strings.Replace(tc0, `"index":0,"id"`, `"id"`, 1), wantErr: "index"},
		{name: "null system_fingerprint", check: s.Chunk, doc: strings.Replace(role, `"model":"m"`, `"model":"m","system_fingerprint":null`, 1), wantErr: "system_fingerprint"},
		{name: "completion without refusal", check: s.Completion, doc: `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":"stop"}]}`, wantErr: "refusal"},
		{name: "error without code", check: s.ErrorBody, doc: `{"error":{"message":"m","type":"t","param":null}}`, wantErr: "code"},
		{name: "model without owned_by", check: s.Model, doc: `{"id":"gpt-x","object":"model","created":1}`, wantErr: "owned_by"},
		{name: "not JSON", check: s.Chunk, doc: `{"id":`, wantErr: "invalid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.check([]byte(tt.doc))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("valid document rejected: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatal("invalid document accepted")
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestSchemaConcurrentCompile(t *testing.T) {
	t.Parallel()
	s := LoadSchema(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		wg.Go(func() {
			errs <- s.Validate("CompletionUsage", []byte(`{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}`))
			errs <- s.Validate("NoSuchDef", []byte(`{}`))
		})
	}
	wg.Wait()
	close(errs)
	var ok, bad int
	for err := range errs {
		if err == nil {
			ok++
		} else if strings.Contains(err.Error(), "compile NoSuchDef") {
			bad++
		}
	}
	if ok != 8 || bad != 8 {
		t.Fatalf("ok %d, compile errors %d; want 8 and 8", ok, bad)
	}
	if LoadSchema(t) != s {
		t.Fatal("LoadSchema did not reuse the loaded schema")
	}
}

// fakeTB records Fatalf/Skipf instead of ending the real test.
type fakeTB struct {
	testing.TB
	mu      sync.Mutex
	fatal   string
	skipped string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped = sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn with f on its own goroutine so that Goexit ends only fn.
func (f *fakeTB) run(fn func(tb testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
}

func TestLoadSchemaLocation(t *testing.T) {
	schemaFile := "openapi/chat-schemas.json"
	t.Run("env points at file", func(t *testing.T) {
		t.Setenv(SchemaEnv, schemaFile)
		f := &fakeTB{TB: t}
		var s *Schema
		f.run(func(tb testing.TB) { s = LoadSchema(tb) })
		if s == nil || f.fatal != "" || f.skipped != "" {
			t.Fatalf("schema %v, fatal %q, skipped %q", s, f.fatal, f.skipped)
		}
	})
	t.Run("env points at missing file", func(t *testing.T) {
		t.Setenv(SchemaEnv, filepath.Join(t.TempDir(), "none.json"))
		f := &fakeTB{TB: t}
		f.run(func(tb testing.TB) { LoadSchema(tb) })
		if !strings.Contains(f.fatal, SchemaEnv) {
			t.Fatalf("fatal %q, want a message naming %s", f.fatal, SchemaEnv)
		}
	})
	t.Run("no env: the embedded copy, from any directory", func(t *testing.T) {
		t.Setenv(SchemaEnv, "")
		t.Chdir(t.TempDir())
		f := &fakeTB{TB: t}
		var s *Schema
		f.run(func(tb testing.TB) { s = LoadSchema(tb) })
		if s == nil || f.fatal != "" || f.skipped != "" {
			t.Fatalf("schema %v, fatal %q, skipped %q", s, f.fatal, f.skipped)
		}
		if err := s.Validate("CompletionUsage", []byte(`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}`)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("broken file fails", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "bad.json")
		if err := os.WriteFile(p, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv(SchemaEnv, p)
		f := &fakeTB{TB: t}
		f.run(func(tb testing.TB) { LoadSchema(tb) })
		if f.fatal == "" {
			t.Fatal("a broken schema file did not fail the test")
		}
	})
}
