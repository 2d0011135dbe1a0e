package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/internal/testredis"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/mockllm"
)

// TestMain removes the gateway binary built for the replica tests.
func TestMain(m *testing.M) {
	code := m.Run()
	testproc.Cleanup()
	os.Exit(code)
}

// startReplica runs the gateway binary as its own OS process with cfg.
func startReplica(t *testing.T, bin, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := testproc.Start(t, bin, path)
	return url
}

// streamMessage streams p through c and returns the accumulated message.
func streamMessage(t *testing.T, c openai.Client, p openai.ChatCompletionNewParams) openai.ChatCompletionMessage {
	t.Helper()
	stream := c.Chat.Completions.NewStreaming(context.Background(), p)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return acc.Choices[0].Message
}

// TestMixedTurnAcrossReplicas: two gateway processes that share nothing but
// one redis-server; a mixed turn starts on one and finishes on the other, in
// both directions.
func TestMixedTurnAcrossReplicas(t *testing.T) {
	t.Parallel()
	redisAddr := testredis.Start(t).Addr()
	bin := testproc.Gateway(t)
	mock := mockllm.New(mockllm.Options{Respond: mixedResponder})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg := strings.ReplaceAll(mixedConfig, "{{MOCK}}", mockURL) + `
[redis]
addr = "` + redisAddr + `"
prefix = "replica-test:"
`
	urls := []string{startReplica(t, bin, cfg), startReplica(t, bin, cfg)}
	clients := make([]openai.Client, 2)
	for i, u := range urls {
		clients[i] = openai.NewClient(option.WithBaseURL(u), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	}
	last := func() []byte { r := mock.Requests(); return r[len(r)-1].Body }

	for _, dir := range []struct {
		name        string
		start, next int
	}{{"A to B", 0, 1}, {"B to A", 1, 0}} {
		t.Run(dir.name, func(t *testing.T) {
			p := userMsg("go " + dir.name)
			p.Tools = cityTool()
			msg := streamMessage(t, clients[dir.start], p)
			if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup_city" {
				t.Fatalf("mixed turn on replica %d returned %+v", dir.start, msg.ToolCalls)
			}
			resp, err := clients[dir.next].Chat.Completions.New(context.Background(), followUp(p, msg))
			if err != nil {
				t.Fatalf("follow-up on replica %d: %v", dir.next, err)
			}
			if got := upstreamShape(last()); got != "user assistant(calculator,lookup_city) tool tool" {
				t.Fatalf("upstream history from replica %d: %q", dir.next, got)
			}
			if c := resp.Choices[0].Message.Content; !strings.Contains(c, `"result":42`) || !strings.Contains(c, "420000") {
				t.Fatalf("answer %q", c)
			}
		})
	}
	// The state lives in Redis under the configured prefix, with a TTL.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "replica-test:turn:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("turn keys in redis: %v %v", keys, err)
	}
	if ttl := rdb.TTL(context.Background(), keys[0]).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("ttl %v", ttl)
	}
}

// TestApprovalAcrossReplicas: a call handed out for approval by one gateway
// process is decided on another that shares only Redis with it (one
// server, or a Redis Cluster); the tool runs once, there, with the kept
// arguments.
func TestApprovalAcrossReplicas(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		redis func(t *testing.T) string // the [redis] section
	}{
		{"single", func(t *testing.T) string { return "[redis]\naddr = \"" + testredis.Start(t).Addr() + "\"\n" }},
		{"cluster", func(t *testing.T) string {
			return "[redis]\nmode = \"cluster\"\naddrs = [\"" + testredis.StartCluster(t).Addrs()[0] + "\"]\ntimeout = \"2s\"\n"
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			approvalAcrossReplicas(t, mode.redis(t))
		})
	}
}

// approvalAcrossReplicas runs the approval round trip between two gateway
// processes configured with redisSection.
func approvalAcrossReplicas(t *testing.T, redisSection string) {
	bin := testproc.Gateway(t)
	se, toolURL := newSideEffects(t)
	mock := mockllm.New(mockllm.Options{Respond: approvalResponder})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg := strings.NewReplacer("{{MOCK}}", mockURL, "{{HTTP}}", toolURL).Replace(approvalConfig) + `
[tool_loop]
approval_secret = "replica-test-secret"
` + redisSection + `prefix = "approval-test:"
`
	urls := []string{startReplica(t, bin, cfg), startReplica(t, bin, cfg)}
	clients := make([]openai.Client, 2)
	for i, u := range urls {
		clients[i] = openai.NewClient(option.WithBaseURL(u), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	}
	for _, dir := range []struct {
		name        string
		start, next int
	}{{"A to B", 0, 1}, {"B to A", 1, 0}} {
		t.Run(dir.name, func(t *testing.T) {
			p := userMsg("clean up " + dir.name)
			msg := streamMessage(t, clients[dir.start], p)
			if len(msg.ToolCalls) != 1 || !strings.HasPrefix(msg.ToolCalls[0].ID, "call_gwa_") {
				t.Fatalf("replica %d handed out %+v", dir.start, msg.ToolCalls)
			}
			before := len(se.runs())
			resp, err := clients[dir.next].Chat.Completions.New(context.Background(), answer(p, msg, `{"decision":"approve"}`))
			if err != nil {
				t.Fatalf("decision on replica %d: %v", dir.next, err)
			}
			if runs := se.runs()[before:]; len(runs) != 1 || runs[0] != `{"path":"/tmp/a"}` {
				t.Fatalf("tool runs %v", runs)
			}
			if c := resp.Choices[0].Message.Content; !strings.Contains(c, `"deleted":"/tmp/a"`) || !strings.Contains(c, `"result":42`) {
				t.Fatalf("answer %q", c)
			}
		})
	}
}
