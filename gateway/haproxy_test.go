package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/gateway/internal/testhaproxy"
	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
)

// lbConfig: gpt-x (with the calculator as a server tool, for mixed turns),
// and "primary", whose deployment always fails and falls back to gpt-x;
// one failure opens its circuit, shared through Redis.
var lbConfig = strings.Replace(mixedConfig, "[server]", "[server]\nmetrics_listen = \"{{METRICS}}\"", 1) + `
[[models]]
name = "primary"
provider = "up"
upstream = "up-primary"
context_window = 1000
fallbacks = ["gpt-x"]
[middleware.fallback]
breaker_failures = 1
breaker_cooldown = "1m"
shared_breakers = true
[redis]
addr = "{{REDIS}}"
prefix = "lb-test:"
` + slowMachine

// lbAnswer is the streamed answer of a plain request: 25 deltas, 20 ms apart.
var lbAnswer = "streamed " + strings.Repeat("abcd", 25)

// TestReplicasBehindHAProxy: three gateway processes behind a real HAProxy
// (round robin, /readyz checks), sharing one Redis. A mixed turn continues
// on another replica; a circuit one replica opens is honoured by the
// others; kill -9 of a replica in the middle of streams ends only its own
// streams, and every request after it is served by the others.
func TestReplicasBehindHAProxy(t *testing.T) {
	t.Parallel()
	redisAddr := testredis.Start(t).Addr()
	bin := testproc.Gateway(t)
	mock := mockllm.New(mockllm.Options{ChunkDelay: 20 * time.Millisecond, Respond: func(c *mockllm.Call) mockllm.Turn {
		switch {
		case c.Model == "up-primary":
			return mockllm.Turn{Fault: mockllm.StatusFault(500, "", "")}
		case strings.Contains(string(c.Body), "lookup_city"):
			return mixedResponder(c)
		}
		return mockllm.Turn{Text: lbAnswer}
	}})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })

	var procs []*exec.Cmd
	var backends, metrics []string
	for i := range 3 {
		m := testproc.FreeAddr(t)
		cfg := strings.NewReplacer("{{MOCK}}", mockURL, "{{REDIS}}", redisAddr, "{{METRICS}}", m).Replace(lbConfig)
		path := filepath.Join(t.TempDir(), fmt.Sprintf("r%d.toml", i))
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, base := testproc.Start(t, bin, path)
		u, _ := url.Parse(base)
		procs, backends, metrics = append(procs, cmd), append(backends, u.Host), append(metrics, m)
	}
	lb := testhaproxy.Start(t, backends)
	client := openai.NewClient(option.WithBaseURL(lb), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	ctx := context.Background()

	t.Run("mixed turn continues on another replica", func(t *testing.T) {
		var first, next *http.Response
		p := userMsg("go via the load balancer")
		p.Tools = cityTool()
		stream := client.Chat.Completions.NewStreaming(ctx, p, option.WithResponseInto(&first))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil || len(acc.Choices) == 0 {
			t.Fatalf("first turn: %v", err)
		}
		resp, err := client.Chat.Completions.New(ctx, followUp(p, acc.Choices[0].Message), option.WithResponseInto(&next))
		if err != nil {
			t.Fatal(err)
		}
		a, b := first.Header.Get(testhaproxy.ServedBy), next.Header.Get(testhaproxy.ServedBy)
		if a == "" || a == b {
			t.Fatalf("served by %q then %q, want two replicas", a, b)
		}
		if c := resp.Choices[0].Message.Content; !strings.Contains(c, `"result":42`) || !strings.Contains(c, "420000") {
			t.Fatalf("answer on %s: %q", b, c)
		}
	})

	t.Run("shared breaker honoured by every replica", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, primaryParams())
		if err != nil || resp.Choices[0].Message.Content != lbAnswer {
			t.Fatalf("first request: %v", err)
		}
		for i, m := range metrics {
			if !primaryOpen(m) {
				t.Fatalf("replica r%d does not hold up-primary's circuit open within a second", i)
			}
		}
		for i := range 6 {
			if resp, err := client.Chat.Completions.New(ctx, primaryParams()); err != nil || resp.Choices[0].Message.Content != lbAnswer {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if n := mock.Calls("up-primary"); n != 1 {
			t.Fatalf("up-primary called %d times through the load balancer, want 1", n)
		}
	})

	t.Run("kill -9 of a replica during streams", func(t *testing.T) {
		const n = 6
		type result struct {
			by, text string
			err      error
		}
		results := make([]result, n)
		started := make(chan struct{}, n)
		kill := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				var hr *http.Response
				stream := client.Chat.Completions.NewStreaming(ctx, userMsg(fmt.Sprint("stream ", i)), option.WithResponseInto(&hr))
				var b strings.Builder
				first := true
				for stream.Next() {
					if ch := stream.Current(); len(ch.Choices) > 0 {
						b.WriteString(ch.Choices[0].Delta.Content)
					}
					if first {
						first = false
						started <- struct{}{}
						<-kill
					}
				}
				if first {
					started <- struct{}{}
				}
				results[i] = result{text: b.String(), err: stream.Err()}
				if hr != nil {
					results[i].by = hr.Header.Get(testhaproxy.ServedBy)
				}
			})
		}
		for range n {
			<-started
		}
		if err := procs[1].Process.Kill(); err != nil { // SIGKILL: no drain
			t.Fatal(err)
		}
		close(kill)
		wg.Wait()
		var survived, onVictim int
		for i, r := range results {
			switch r.by {
			case "r1":
				onVictim++
				if r.err == nil && r.text == lbAnswer {
					t.Errorf("stream %d on the killed replica completed", i)
				}
			default:
				if r.err != nil || r.text != lbAnswer {
					t.Errorf("stream %d on %q: %v, %q", i, r.by, r.err, r.text)
				}
				survived++
			}
		}
		if onVictim == 0 || survived == 0 {
			t.Fatalf("streams per replica: %+v", results)
		}
		// Every request after the kill is served: a refused connection is
		// retried on another replica, and the health check takes r1 out.
		for i := range 9 {
			var hr *http.Response
			resp, err := client.Chat.Completions.New(ctx, userMsg(fmt.Sprint("after ", i)), option.WithResponseInto(&hr))
			if err != nil || resp.Choices[0].Message.Content != lbAnswer {
				t.Fatalf("request %d after the kill: %v", i, err)
			}
			if by := hr.Header.Get(testhaproxy.ServedBy); by == "r1" {
				t.Fatalf("request %d served by the killed replica", i)
			}
		}
	})
}
