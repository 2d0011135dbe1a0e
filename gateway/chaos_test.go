package gateway

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/internal/testredis"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// replicaProc is a gateway process the test can SIGKILL.
type replicaProc struct {
	url string // base URL, ".../v1"
	cmd *exec.Cmd
}

// startReplicaProc is startReplica that keeps the process handle.
func startReplicaProc(t *testing.T, bin, cfg string) *replicaProc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, url := testproc.Start(t, bin, path)
	return &replicaProc{url: url, cmd: cmd}
}

// TestReplicaKilledMidConversations: two gateway processes share a real
// redis-server. Many conversations start mixed turns on replica A (the
// gateway runs the calculator, the client gets lookup_city); A is SIGKILLed
// while some of those turns are still running. Every conversation then
// finishes on B: a turn A completed is resumed from the state A left in
// Redis (the model sees the hidden calculator call and result again), and a
// turn A died in is sent again to B by the client, as an SDK user would.
func TestReplicaKilledMidConversations(t *testing.T) {
	t.Parallel()
	redisAddr := testredis.Start(t).Addr()
	bin := testproc.Gateway(t)
	// The first-byte delay keeps turns in flight on A when it is killed.
	mock := mockllm.New(mockllm.Options{Respond: mixedResponder, FirstByteDelay: 100 * time.Millisecond, ChunkDelay: 5 * time.Millisecond})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg := strings.ReplaceAll(mixedConfig, "{{MOCK}}", mockURL) + `
[redis]
addr = "` + redisAddr + `"
prefix = "chaos:"
`
	a, b := startReplicaProc(t, bin, cfg), startReplicaProc(t, bin, cfg)
	client := func(u string) openai.Client {
		return openai.NewClient(option.WithBaseURL(u), option.WithAPIKey("sk-client"), option.WithMaxRetries(0),
			option.WithRequestTimeout(20*time.Second))
	}
	onA, onB := client(a.url), client(b.url)

	const conversations, killAfter = 24, 8
	var completedOnA, cutOnA atomic.Int32
	kill := make(chan struct{})
	var killOnce sync.Once
	killed := make(chan struct{})
	go func() {
		<-kill
		_ = a.cmd.Process.Signal(os.Kill) // SIGKILL: no shutdown, no flush
		close(killed)
	}()

	// firstTurn runs the mixed turn and returns the assistant message.
	firstTurn := func(c openai.Client, p openai.ChatCompletionNewParams, stream bool) (openai.ChatCompletionMessage, error) {
		if !stream {
			resp, err := c.Chat.Completions.New(context.Background(), p)
			if err != nil {
				return openai.ChatCompletionMessage{}, err
			}
			return resp.Choices[0].Message, nil
		}
		s := c.Chat.Completions.NewStreaming(context.Background(), p)
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			return openai.ChatCompletionMessage{}, err
		}
		if len(acc.Choices) == 0 {
			return openai.ChatCompletionMessage{}, fmt.Errorf("empty stream")
		}
		return acc.Choices[0].Message, nil
	}

	// Should fewer than killAfter turns complete on A, kill it anyway.
	go func() {
		time.Sleep(15 * time.Second)
		killOnce.Do(func() { close(kill) })
	}()
	errs := make(chan error, conversations)
	var wg sync.WaitGroup
	for i := 0; i < conversations; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			stream := i%2 == 0
			p := userMsg(fmt.Sprintf("go conversation-%02d", i))
			p.Tools = cityTool()
			msg, err := firstTurn(onA, p, stream)
			if err != nil {
				select {
				case <-killed:
				case <-time.After(5 * time.Second):
					errs <- fmt.Errorf("conversation %d: first turn on A failed, and A was not being killed: %v", i, err)
					return
				}
				cutOnA.Add(1)
				if msg, err = firstTurn(onB, p, stream); err != nil {
					errs <- fmt.Errorf("conversation %d: first turn sent again to B: %v", i, err)
					return
				}
			} else if completedOnA.Add(1) == killAfter {
				killOnce.Do(func() { close(kill) })
			}
			if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup_city" {
				errs <- fmt.Errorf("conversation %d: mixed turn returned %+v", i, msg.ToolCalls)
				return
			}
			<-killed // every follow-up goes to B, after A is gone
			resp, err := onB.Chat.Completions.New(context.Background(), followUp(p, msg))
			if err != nil {
				errs <- fmt.Errorf("conversation %d: follow-up on B: %v", i, err)
				return
			}
			if c := resp.Choices[0].Message.Content; !strings.Contains(c, `"result":42`) || !strings.Contains(c, "420000") {
				errs <- fmt.Errorf("conversation %d: answer %q lacks the hidden calculator result or the client's result", i, c)
			}
		}(i)
		time.Sleep(15 * time.Millisecond) // staggered, so the kill lands mid-way
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if err := a.cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("replica A was not killed: %v", err)
	}

	// The history each follow-up reached the model with: rebuilt from Redis,
	// whichever replica ran the first turn.
	shapes := map[string]string{}
	for _, r := range mock.Requests() {
		first := gjson.GetBytes(r.Body, `messages.0.content`).String()
		if !strings.Contains(string(r.Body), "inhabitants") {
			continue
		}
		if _, dup := shapes[first]; dup {
			t.Errorf("%s: two follow-up calls upstream", first)
		}
		shapes[first] = upstreamShape(r.Body)
	}
	for i := 0; i < conversations; i++ {
		key := fmt.Sprintf("go conversation-%02d", i)
		if got := shapes[key]; got != "user assistant(calculator,lookup_city) tool tool" {
			t.Errorf("%s: upstream history of the follow-up on B: %q", key, got)
		}
	}
	t.Logf("%d first turns completed on A before or while it was killed, %d cut or refused by the kill and sent again to B",
		completedOnA.Load(), cutOnA.Load())
}
