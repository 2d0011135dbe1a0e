package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/proxy"
	"github.com/llmgw/gateway/wiretest"
)

// harness runs a mockllm upstream and a gateway in front of it, both on
// loopback ports, and an openai-go client pointed at the gateway that keeps
// the raw bytes of the last response for the wire checker.
type harness struct {
	t       testing.TB
	mockURL string
	mock    *mockllm.Server
	srv     *proxy.Server
	base    string // gateway base URL, ".../v1"
	client  openai.Client

	mu   sync.Mutex
	last *bytes.Buffer
	hdr  http.Header

	toml string // the config, {{MOCK}} replaced (newHarnessAt)
	path string // the file it is read from; "" = none

	logs   *lockedBuffer   // the gateway's log, at every level; nil = discarded
	logger *zerolog.Logger // the gateway's logger when set (logs is then unused)
}

// baseConfig is a gateway config with one provider "up" at the mock and a
// few models; {{MOCK}} is replaced by the mock's base URL.
const baseConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{MOCK}}"
api_key = "sk-upstream-secret"
retries = 0
[[models]]
name = "gpt-x"
provider = "up"
upstream = "up-model"
context_window = 1000
`

// openPassthrough lets every tenant use every /v1 pass-through path, for
// tests of the pass-through mechanics rather than of its allow-list.
const openPassthrough = `
[[policies]]
tenant = "*"
passthrough = ["/v1/*"]
`

func newHarness(t testing.TB, toml string, opts mockllm.Options) *harness {
	t.Helper()
	return newHarnessAt(t, "", toml, opts)
}

// newHarnessAt is newHarness with the config as read from the file path
// (config.Config.Path; "" = not from a file), which h.reload reads again.
func newHarnessAt(t testing.TB, path, toml string, opts mockllm.Options) *harness {
	t.Helper()
	mock := mockllm.New(opts)
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	h := &harness{t: t, mock: mock, mockURL: mockURL, toml: strings.ReplaceAll(toml, "{{MOCK}}", mockURL), path: path}
	h.srv = h.start(h.config())
	return h
}

// config parses h's config, as read from h.path.
func (h *harness) config() *config.Config {
	h.t.Helper()
	cfg, err := config.Parse([]byte(h.toml))
	if err != nil {
		h.t.Fatalf("config: %v", err)
	}
	cfg.Path = h.path
	return cfg
}

// reload is what cmd/gateway does on SIGHUP: it builds a runtime of the
// config read again, serves new requests with it and closes the old one.
func (h *harness) reload() {
	h.t.Helper()
	rt, err := Build(h.config(), zerolog.Nop())
	if err != nil {
		h.t.Fatalf("reload: %v", err)
	}
	h.srv.Swap(rt).Close()
}

// newLoggedHarness is newHarness with the gateway's log kept in h.logs.
func newLoggedHarness(t testing.TB, toml string, opts mockllm.Options) *harness {
	t.Helper()
	mock := mockllm.New(opts)
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg, err := config.Parse([]byte(strings.ReplaceAll(toml, "{{MOCK}}", mockURL)))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	h := &harness{t: t, mock: mock, mockURL: mockURL, logs: &lockedBuffer{}}
	h.srv = h.start(cfg)
	return h
}

func (h *harness) start(cfg *config.Config) *proxy.Server {
	t := h.t
	log := zerolog.New(io.Discard)
	if testing.Verbose() {
		log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	}
	if h.logs != nil {
		log = zerolog.New(h.logs)
	}
	if h.logger != nil {
		log = *h.logger
	}
	rt, err := Build(cfg, log)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	srv := proxy.NewServer(rt, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		srv.Runtime().Close()
	})
	h.base = "http://" + ln.Addr().String() + "/v1"
	h.client = openai.NewClient(
		option.WithBaseURL(h.base),
		option.WithAPIKey("sk-client"),
		option.WithMaxRetries(0),
		option.WithMiddleware(h.capture),
	)
	return srv
}

// capture tees the response body so tests can check the exact bytes.
func (h *harness) capture(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err != nil || resp == nil {
		return resp, err
	}
	buf := &bytes.Buffer{}
	h.mu.Lock()
	h.last, h.hdr = buf, resp.Header.Clone()
	h.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, buf), resp.Body}
	return resp, nil
}

// lastRaw returns the raw body of the last response and its headers.
func (h *harness) lastRaw() ([]byte, http.Header) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		return nil, nil
	}
	return append([]byte(nil), h.last.Bytes()...), h.hdr
}

// post sends a raw JSON body and returns status, headers and body.
func (h *harness) post(path, body string, header map[string]string) (int, http.Header, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// streamChat runs a streaming request through the SDK accumulator and the
// wire checker; it returns the accumulated completion, the checker's summary and
// the stream error.
func (h *harness) streamChat(params openai.ChatCompletionNewParams, opt wiretest.Options, schema *wiretest.Schema, opts ...option.RequestOption) (openai.ChatCompletion, *wiretest.Summary, error) {
	h.t.Helper()
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), params, opts...)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			h.t.Errorf("accumulator refused chunk %s", stream.Current().RawJSON())
		}
	}
	err := stream.Err()
	_ = stream.Close()
	raw, _ := h.lastRaw()
	sum := wiretest.CheckStreamAll(h.t, raw, opt, schema)
	return acc.ChatCompletion, sum, err
}

func userMsg(s string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-x",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(s)},
	}
}

// metrics reads the gateway's /metrics page (the process's registry).
func (h *harness) metrics() map[string]*dto.MetricFamily {
	h.t.Helper()
	resp, err := http.Get(strings.TrimSuffix(h.base, "/v1") + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		h.t.Fatalf("metrics do not parse: %v", err)
	}
	return families
}
