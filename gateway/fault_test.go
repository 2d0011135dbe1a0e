package gateway

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// Fault injection with a real TCP fault proxy (toxiproxy, see
// toxics_test.go) between the gateway and each of its dependencies: the
// model upstream (mockllm), Redis, an MCP server and an http tool. Each case
// asserts the documented outcome; the whole set then asserts that nothing
// was left running and no descriptor stayed open.

// TestFaultInjection runs every fault case in parallel, then checks for
// leaked goroutines and descriptors. It does not call t.Parallel: the leak
// check counts the whole process, so no other test may run meanwhile (Go
// runs the top-level tests that are not parallel one at a time, before the
// parallel ones resume).
func TestFaultInjection(t *testing.T) {
	check := leakCheck(t, 4)
	t.Run("cases", func(t *testing.T) {
		t.Run("upstream", upstreamFaults)
		t.Run("redis", redisFaults)
		t.Run("mcp", mcpFaults)
		t.Run("http tool", httpToolFaults)
		t.Run("shutdown mid-streams", shutdownMidStreams)
	})
	check()
}

// faultUpstreamConfig: "primary" reaches the mock through the fault proxy
// and falls back to "backup", which reaches it directly; "solo" has no
// fallback; "retrying" retries on the same proxied provider.
const faultUpstreamConfig = `
[server]
log_level = "warn"
[[providers]]
name = "flaky"
kind = "openai"
base_url = "{{PROXY}}"
retries = 0
first_byte_timeout = "1s"
stream_idle_timeout = "1s"
total_timeout = "1s"
[[providers]]
name = "flaky-retry"
kind = "openai"
base_url = "{{PROXY}}"
retries = 2
first_byte_timeout = "1s"
total_timeout = "1s"
[[providers]]
name = "patient"
kind = "openai"
base_url = "{{PROXY}}"
retries = 0
[[providers]]
name = "steady"
kind = "openai"
base_url = "{{MOCK}}"
retries = 0
[[models]]
name = "primary"
provider = "flaky"
upstream = "up-primary"
fallbacks = ["backup"]
[[models]]
name = "solo"
provider = "flaky"
upstream = "up-primary"
[[models]]
name = "slow"
provider = "patient"
upstream = "up-primary"
[[models]]
name = "retrying"
provider = "flaky-retry"
upstream = "up-primary"
[[models]]
name = "backup"
provider = "steady"
upstream = "up-backup"
[middleware.fallback]
base_backoff = "10ms"
max_backoff = "50ms"
breaker_failures = 1000
`

const (
	primaryText = "The primary model answers at some length, so that its stream has many events and a fault can land in the middle of it."
	backupText  = "The backup model's complete answer."
)

// faultHarness starts a mock, a fault proxy in front of it and a gateway
// whose config may name {{PROXY}} (the mock's base URL through the proxy)
// and {{MOCK}} (direct); vars are more old, new pairs to replace.
func faultHarness(t *testing.T, toml string, opts mockllm.Options, vars ...string) (*harness, *faultProxy) {
	t.Helper()
	mock := mockllm.New(opts)
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	u, _ := url.Parse(mockURL)
	fp := newFaultProxy(t, t.Name(), u.Host)
	proxied := "http://" + fp.addr() + u.Path
	cfg, err := config.Parse([]byte(strings.NewReplacer(append([]string{"{{PROXY}}", proxied, "{{MOCK}}", mockURL}, vars...)...).Replace(toml)))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	h := &harness{t: t, mock: mock, mockURL: mockURL}
	h.srv = h.start(cfg)
	return h, fp
}

func upstreamMock(chunkDelay time.Duration) mockllm.Options {
	return mockllm.Options{
		Respond: byModel(map[string]func(int) mockllm.Turn{
			"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Text: primaryText} },
			"up-backup":  func(int) mockllm.Turn { return mockllm.Turn{Text: backupText} },
		}),
		Chunking:   mockllm.Chunking{TextRunes: 4},
		ChunkDelay: chunkDelay,
	}
}

func modelParams(model string) openai.ChatCompletionNewParams {
	p := userMsg("hello")
	p.Model = model
	return p
}

// streamResult is what a streaming client saw.
type streamResult struct {
	content string // accumulated by openai-go
	err     error  // the SDK stream's error
	raw     []byte
	header  http.Header
	sum     *wiretest.Summary
}

// streamWith streams params through openai-go's accumulator; once the
// accumulated content is non-empty it calls midway (once), so a fault can be
// injected after content reached the client.
func streamWith(t *testing.T, h *harness, params openai.ChatCompletionNewParams, wantErr bool, midway func()) streamResult {
	t.Helper()
	var hr *http.Response
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&hr))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Errorf("accumulator refused chunk %s", stream.Current().RawJSON())
		}
		if midway != nil && len(acc.Choices) > 0 && acc.Choices[0].Message.Content != "" {
			midway()
			midway = nil
		}
	}
	r := streamResult{err: stream.Err()}
	_ = stream.Close()
	if len(acc.Choices) > 0 {
		r.content = acc.Choices[0].Message.Content
	}
	r.raw, _ = h.lastRaw()
	if hr != nil {
		r.header = hr.Header
	}
	r.sum = wiretest.CheckStreamAll(t, r.raw, wiretest.Options{WantError: wantErr}, nil)
	return r
}

// wantCutAfterContent asserts the documented outcome of an upstream that
// fails after the first content: the client's SDK raises, the stream's last
// event is "event: error" with no [DONE], the content is a strict prefix of
// the answer, and no fallback was spliced in.
func wantCutAfterContent(t *testing.T, h *harness, r streamResult) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("the SDK stream ended without an error; the client holds %q as a complete answer", r.content)
	}
	if bytes.Contains(r.raw, []byte("[DONE]")) || !bytes.HasPrefix(lastEvent(r.raw), []byte("event: error\n")) {
		t.Fatalf("the stream does not end with an error event:\n%s", r.raw)
	}
	if r.content == "" || r.content == primaryText || !strings.HasPrefix(primaryText, r.content) {
		t.Fatalf("content %q is not a strict prefix of the answer", r.content)
	}
	if n := h.mock.Calls("up-backup"); n != 0 {
		t.Fatalf("the fallback was called %d times after content reached the client", n)
	}
}

// wantFallback asserts a transparent fallback: the backup's whole answer,
// no error, x-gateway-model naming the backup.
func wantFallback(t *testing.T, content string, err error, hdr http.Header) {
	t.Helper()
	if err != nil {
		t.Fatalf("the client got an error instead of the fallback's answer: %v", err)
	}
	if content != backupText || hdr.Get("X-Gateway-Model") != "backup" {
		t.Fatalf("client got %q from %q, want the backup's answer", content, hdr.Get("X-Gateway-Model"))
	}
}

func complete(h *harness, model string) (string, http.Header, error) {
	var hr *http.Response
	resp, err := h.client.Chat.Completions.New(context.Background(), modelParams(model), option.WithResponseInto(&hr))
	if err != nil {
		return "", nil, err
	}
	return resp.Choices[0].Message.Content, hr.Header, nil
}

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != status {
		t.Fatalf("got %v, want HTTP %d", err, status)
	}
}

// upstreamFaults puts the fault proxy between the gateway and the model.
func upstreamFaults(t *testing.T) {
	latency := func(ms int) toxic {
		return toxic{Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": ms}}
	}
	halfOpen := toxic{Type: "timeout", Stream: "downstream", Attributes: map[string]any{"timeout": 0}}
	resetNow := toxic{Type: "reset_peer", Stream: "downstream", Attributes: map[string]any{"timeout": 0}}
	// A client that leaves while the upstream is slow: the gateway must close
	// its upstream connection (README: a client that disconnects cancels the
	// upstream call), long before the delayed answer would arrive.
	leaves := func(stream bool) func(t *testing.T, h *harness, fp *faultProxy) {
		return func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(latency(3000))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				if stream {
					s := h.client.Chat.Completions.NewStreaming(ctx, modelParams("slow"))
					for s.Next() {
					}
					_ = s.Close()
				} else {
					_, _ = h.client.Chat.Completions.New(ctx, modelParams("slow"))
				}
			}()
			deadline := time.Now().Add(5 * time.Second)
			for upstreamConns(t, fp) == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if upstreamConns(t, fp) == 0 {
				t.Fatal("the request never reached the upstream")
			}
			cancel()
			<-done
			deadline = time.Now().Add(1500 * time.Millisecond) // the delayed answer comes at 3 s
			for upstreamConns(t, fp) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the client left 1.5 s ago and the gateway still holds %d upstream connection(s) waiting for the answer", upstreamConns(t, fp))
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	cases := []struct {
		name       string
		chunkDelay time.Duration
		run        func(t *testing.T, h *harness, fp *faultProxy)
	}{
		{name: "latency under the timeouts: the stream completes", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(latency(150))
			r := streamWith(t, h, modelParams("primary"), false, nil)
			if r.err != nil || r.content != primaryText || r.header.Get("X-Gateway-Model") != "primary" {
				t.Fatalf("got %q from %q, err %v", r.content, r.header.Get("X-Gateway-Model"), r.err)
			}
		}},
		{name: "latency past the first-byte timeout: the stream falls back", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(latency(3000))
			r := streamWith(t, h, modelParams("primary"), false, nil)
			wantFallback(t, r.content, r.err, r.header)
		}},
		{name: "latency past the total timeout: 504 without a fallback", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(latency(3000))
			_, _, err := complete(h, "solo")
			wantStatus(t, err, 504)
		}},
		{name: "bandwidth limit: the stream arrives whole, split anywhere", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(toxic{Type: "bandwidth", Stream: "downstream", Attributes: map[string]any{"rate": 64}}) // KB/s; the whole stream must fit in total_timeout
			fp.add(toxic{Type: "slicer", Stream: "downstream", Attributes: map[string]any{"average_size": 7, "size_variation": 6, "delay": 0}})
			r := streamWith(t, h, modelParams("primary"), false, nil)
			if r.err != nil || r.content != primaryText || r.sum.Content != primaryText {
				t.Fatalf("got %q, err %v", r.content, r.err)
			}
			content, _, err := complete(h, "primary")
			if err != nil || content != primaryText {
				t.Fatalf("non-stream: %q, %v", content, err)
			}
		}},
		{name: "reset before the first byte: the stream falls back", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(resetNow)
			r := streamWith(t, h, modelParams("primary"), false, nil)
			wantFallback(t, r.content, r.err, r.header)
		}},
		{name: "reset before the body: the request falls back", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(resetNow)
			content, hdr, err := complete(h, "primary")
			wantFallback(t, content, err, hdr)
		}},
		{name: "reset before the body without a fallback: 502", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(resetNow)
			_, _, err := complete(h, "solo")
			wantStatus(t, err, 502)
		}},
		{name: "reset mid-body: event: error after content", chunkDelay: 15 * time.Millisecond, run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.resetOnClose()
			r := streamWith(t, h, modelParams("primary"), true, func() { fp.add(resetNow) })
			wantCutAfterContent(t, h, r)
		}},
		{name: "data limit mid-body: event: error after content", chunkDelay: 15 * time.Millisecond, run: func(t *testing.T, h *harness, fp *faultProxy) {
			r := streamWith(t, h, modelParams("primary"), true, func() {
				fp.add(toxic{Type: "limit_data", Stream: "downstream", Attributes: map[string]any{"bytes": 40}})
			})
			wantCutAfterContent(t, h, r)
		}},
		{name: "data limit inside the headers: the stream falls back", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(toxic{Type: "limit_data", Stream: "downstream", Attributes: map[string]any{"bytes": 60}})
			r := streamWith(t, h, modelParams("primary"), false, nil)
			wantFallback(t, r.content, r.err, r.header)
		}},
		{name: "data limit inside the JSON body: the request falls back", run: func(t *testing.T, h *harness, fp *faultProxy) {
			// Far enough to be past the headers, short of the body's end.
			fp.add(toxic{Type: "limit_data", Stream: "downstream", Attributes: map[string]any{"bytes": 300}})
			content, hdr, err := complete(h, "primary")
			wantFallback(t, content, err, hdr)
		}},
		{name: "half-open before the first byte: the stream falls back", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(halfOpen)
			r := streamWith(t, h, modelParams("primary"), false, nil)
			wantFallback(t, r.content, r.err, r.header)
		}},
		{name: "half-open without a fallback: 504", run: func(t *testing.T, h *harness, fp *faultProxy) {
			fp.add(halfOpen)
			_, _, err := complete(h, "solo")
			wantStatus(t, err, 504)
		}},
		{name: "half-open mid-body: event: error after the idle timeout", chunkDelay: 15 * time.Millisecond, run: func(t *testing.T, h *harness, fp *faultProxy) {
			r := streamWith(t, h, modelParams("primary"), true, func() { fp.add(halfOpen) })
			wantCutAfterContent(t, h, r)
		}},
		{name: "half-open on the first attempt: the retry succeeds", run: func(t *testing.T, h *harness, fp *faultProxy) {
			name := fp.add(halfOpen)
			type result struct {
				content string
				hdr     http.Header
				err     error
			}
			done := make(chan result, 1)
			go func() { c, hdr, err := complete(h, "retrying"); done <- result{c, hdr, err} }()
			// The first attempt reached the mock and its answer is being
			// swallowed; heal the link before the 1 s timeout ends it.
			deadline := time.Now().Add(5 * time.Second)
			for h.mock.Calls("up-primary") == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			fp.remove(name)
			r := <-done
			n, _ := strconv.Atoi(r.hdr.Get("X-Gateway-Attempts"))
			if r.err != nil || r.content != primaryText || n < 2 || h.mock.Calls("up-primary") != n {
				t.Fatalf("got %q, attempts %q, upstream calls %d, err %v", r.content, r.hdr.Get("X-Gateway-Attempts"), h.mock.Calls("up-primary"), r.err)
			}
		}},
		{name: "client leaves a stream before its first byte: the upstream call is cancelled", run: leaves(true)},
		{name: "client leaves a slow request: the upstream call is cancelled", run: leaves(false)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, fp := faultHarness(t, faultUpstreamConfig, upstreamMock(tc.chunkDelay))
			tc.run(t, h, fp)
		})
	}
}

// shutdownMidStreams: the gateway shuts down with streams still running
// past its grace period; every client must see "event: error" as the last
// event (never a clean end without [DONE] that an SDK could take for a
// complete answer), and the shut-down server must close those connections.
func shutdownMidStreams(t *testing.T) {
	t.Parallel()
	h, _ := faultHarness(t, faultUpstreamConfig, mockllm.Options{
		Respond:    func(*mockllm.Call) mockllm.Turn { return mockllm.Turn{Text: strings.Repeat("a long answer ", 100)} },
		Chunking:   mockllm.Chunking{TextRunes: 4},
		ChunkDelay: 50 * time.Millisecond,
	})
	const streams = 4
	type result struct {
		raw []byte
		err error
	}
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	results := make(chan result, streams)
	started := make(chan struct{}, streams)
	body := `{"model":"backup","stream":true,"messages":[{"role":"user","content":"go"}]}`
	for i := 0; i < streams; i++ {
		go func() {
			resp, err := client.Post(h.base+"/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{err: err}
				started <- struct{}{}
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 4096)
			var raw []byte
			once := false
			for {
				n, err := resp.Body.Read(buf)
				raw = append(raw, buf[:n]...)
				if !once && bytes.Contains(raw, []byte(`"content":"`)) {
					once = true
					started <- struct{}{}
				}
				if err != nil {
					if !once {
						started <- struct{}{}
					}
					results <- result{raw: raw}
					return
				}
			}
		}()
	}
	for i := 0; i < streams; i++ {
		<-started
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
	for i := 0; i < streams; i++ {
		r := <-results
		if r.err != nil {
			t.Fatalf("stream %d: %v", i, r.err)
		}
		if bytes.Contains(r.raw, []byte("[DONE]")) || !bytes.HasPrefix(lastEvent(r.raw), []byte("event: error\n")) {
			t.Errorf("stream %d cut by shutdown does not end with event: error; last event %q", i, lastEvent(r.raw))
		}
	}
	// The client keeps its connections; the server, shut down, must not.
	u, _ := url.Parse(h.base)
	_, port, _ := net.SplitHostPort(u.Host)
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := tcpConns(t, port, true)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("2 s after Shutdown returned and the cut streams ended, the server still holds %d of their connections open (keep-alive), each with a goroutine and a descriptor", n)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}
