package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
)

// circuitGauge is the metrics line of an open circuit on up-primary.
const circuitGauge = `gateway_fallback_circuit_state{provider="up",upstream="up-primary"} 1`

// primaryOpen reports whether the replica whose metrics listen on addr
// holds up-primary's circuit open within a second.
func primaryOpen(addr string) bool {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		_ = resp.Body.Close()
		if strings.Contains(string(b), circuitGauge) {
			return true
		}
	}
	return false
}

// TestSharedBreakersAcrossReplicas: two gateway processes share only
// Redis; the one that sees up-primary fail opens its circuit, the other
// holds it open within a second without sending it a request, and a third
// started afterwards starts with it open.
func TestSharedBreakersAcrossReplicas(t *testing.T) {
	t.Parallel()
	redisAddr := testredis.Start(t).Addr()
	bin := testproc.Gateway(t)
	mock := mockllm.New(mockllm.Options{Respond: byModel(map[string]func(int) mockllm.Turn{
		"up-primary": func(int) mockllm.Turn { return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")} },
	})})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg := strings.ReplaceAll(strings.Replace(fallbackConfig, `retries = 1`, `retries = 0`, 1), "{{MOCK}}", mockURL)
	cfg = strings.Replace(cfg, `breaker_cooldown = "300ms"`, "breaker_cooldown = \"1m\"\nshared_breakers = true", 1) +
		"[redis]\naddr = \"" + redisAddr + "\"\nprefix = \"breaker-test:\"\n" + slowMachine
	replica := func() (openai.Client, string) {
		metrics := testproc.FreeAddr(t)
		url := startReplica(t, bin, strings.Replace(cfg, "[server]", "[server]\nmetrics_listen = \""+metrics+"\"", 1))
		return openai.NewClient(option.WithBaseURL(url), option.WithAPIKey("sk-client"), option.WithMaxRetries(0)), metrics
	}
	a, _ := replica()
	b, bMetrics := replica()
	for i := range 3 {
		resp, err := a.Chat.Completions.New(context.Background(), primaryParams())
		if err != nil || resp.Choices[0].Message.Content != "answer from up-small" {
			t.Fatalf("request %d on a: %v", i, err)
		}
	}
	if n := mock.Calls("up-primary"); n != 3 {
		t.Fatalf("up-primary called %d times, want 3 (then a's circuit opens)", n)
	}
	if !primaryOpen(bMetrics) {
		t.Fatal("b does not hold up-primary's circuit open a second after a opened it")
	}
	c, cMetrics := replica()
	if !primaryOpen(cMetrics) {
		t.Fatal("c, started after the circuit opened, does not hold it open")
	}
	for name, cl := range map[string]openai.Client{"b": b, "c (joined later)": c} {
		resp, err := cl.Chat.Completions.New(context.Background(), primaryParams())
		if err != nil || resp.Choices[0].Message.Content != "answer from up-small" {
			t.Fatalf("request on %s: %v", name, err)
		}
	}
	if n := mock.Calls("up-primary"); n != 3 {
		t.Fatalf("up-primary called %d times; the other replicas should honour a's open circuit", n)
	}
}
