package toolloop

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// Each tool call waits in the handler until the other one is there too
// (up to 5 s, within the tools' 10 s timeout, so that the handler, not the
// loop, gives up): run together, they meet however late either is
// scheduled; run one after the other, each waits alone and the test fails.
func TestParallelServerToolsOverlap(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		waiting int
		arrived []string
		apart   []string // calls that waited alone
		met     = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, r.URL.Path)
		if waiting++; waiting == 2 {
			close(met)
		}
		mu.Unlock()
		together := false
		select {
		case <-met:
			together = true
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		waiting--
		if !together {
			apart = append(apart, r.URL.Path)
		}
		mu.Unlock()
		io.WriteString(w, `{"done":true}`)
	}))
	defer srv.Close()
	timeout := config.Duration(10 * time.Second)
	tools := []config.Tool{{Name: "slow_a", Kind: "http", URL: srv.URL + "/a", Timeout: timeout}, {Name: "slow_b", Kind: "http", URL: srv.URL + "/b", Timeout: timeout}}
	m := &fakeModel{turns: []turnFn{
		always(nil, completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"slow_a","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"slow_b","arguments":"{}"}}]`, "tool_calls", 1, 1)),
		always(nil, completion("up-2", "both done", "", "stop", 1, 1)),
	}}
	l := newLoop(t, tools, nil)
	if _, err := l.Chat(context.Background(), request(m, false, userBody+`}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ok := len(arrived) == 2 && len(apart) == 0
	mu.Unlock()
	if !ok {
		t.Fatalf("tool calls did not overlap: %v arrived, %v waited alone", arrived, apart)
	}
	tm := toolMessages(m.body(1))
	calls := gjson.GetBytes(m.body(1), `messages.#(role=="assistant").tool_calls.#.id`).Array()
	if len(tm) != 2 || len(calls) != 2 || tm[0].Get("tool_call_id").String() != calls[0].String() || tm[1].Get("tool_call_id").String() != calls[1].String() {
		t.Fatalf("results not in call order: %v (calls %v)", tm, calls)
	}
}

func TestToolTimeoutIsAResult(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer srv.Close()
	tools := []config.Tool{{Name: "hang", Kind: "http", URL: srv.URL, Timeout: config.Duration(50 * time.Millisecond)}}
	m := &fakeModel{turns: []turnFn{
		always(toolRound("up-1", "c1", "hang", `{"x":1}`, 1, 1), ""),
		always(textRound("up-2", "It timed out.", 1, 1), ""),
	}}
	l := newLoop(t, tools, nil)
	resp, err := l.Chat(context.Background(), request(m, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := checkStream(t, sse(t, resp.Stream), false).Content; c != "It timed out." {
		t.Fatalf("content %q", c)
	}
	res := gjson.Parse(toolMessages(m.body(1))[0].Get("content").String())
	if res.Get("status").String() != "error" || res.Get("error.type").String() != "timeout" {
		t.Fatalf("result %s", res.Raw)
	}
}

func TestHTTPTool(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/ok":
			b, _ := io.ReadAll(r.Body)
			if r.Method != http.MethodPost || r.Header.Get("X-Key") != "k1" || r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(400)
				return
			}
			io.WriteString(w, `{"echo":`+string(b)+`}`)
		case "/text":
			io.WriteString(w, "plain words")
		case "/fail":
			w.WriteHeader(503)
			io.WriteString(w, "secret internals")
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		default:
			t.Errorf("unexpected call to %s", r.URL.Path)
		}
	}))
	t.Cleanup(srv.Close) // subtests run in parallel, after this function returns
	for _, tc := range []struct {
		name, path, args string
		status, data     string
		errContains      string
	}{
		{"json result", "/ok", `{"city":"Oslo"}`, "ok", `{"echo":{"city":"Oslo"}}`, ""},
		{"text result", "/text", `{}`, "ok", `"plain words"`, ""},
		{"non-2xx is an error result", "/fail", `{}`, "error", "", "HTTP 503"},
		{"redirect is not followed", "/redirect", `{}`, "error", "", "HTTP 302"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLoop(t, []config.Tool{{Name: "svc", Kind: "http", URL: srv.URL + tc.path, Headers: map[string]string{"X-Key": "k1"}}}, nil)
			res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "svc", Arguments: []byte(tc.args)})
			if err != nil {
				t.Fatal(err)
			}
			r := gjson.ParseBytes(res.Content)
			if r.Get("status").String() != tc.status || (tc.data != "" && r.Get("data").Raw != tc.data) ||
				!strings.Contains(r.Get("error.message").String(), tc.errContains) || strings.Contains(string(res.Content), "secret") {
				t.Fatalf("result %s", res.Content)
			}
		})
	}
}

func TestIdempotentToolRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		idempotent bool
		wantHits   int32
		wantStatus string
	}{
		{"idempotent: two more attempts", true, 3, "ok"},
		{"not idempotent: one attempt", false, 1, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if hits.Add(1) < 3 {
					w.WriteHeader(500)
					return
				}
				io.WriteString(w, `1`)
			}))
			defer srv.Close()
			l := newLoop(t, []config.Tool{{Name: "flaky", Kind: "http", URL: srv.URL, Idempotent: tc.idempotent}}, nil)
			res, _ := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "flaky", Arguments: []byte(`{}`)})
			if hits.Load() != tc.wantHits || gjson.GetBytes(res.Content, "status").String() != tc.wantStatus {
				t.Fatalf("hits %d result %s", hits.Load(), res.Content)
			}
		})
	}
}

func TestAgentTool(t *testing.T) {
	t.Parallel()
	var seen []byte
	answer, refusal := "42", ""
	expert := &pipeline.Route{Name: "expert", ModelLayer: pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		seen = r.Body
		if r.Stream || r.Model != "expert" {
			t.Errorf("agent call must be non-streaming to its own model, got %v %q", r.Stream, r.Model)
		}
		if refusal != "" {
			return &pipeline.Response{Body: []byte(`{"id":"e1","object":"chat.completion","created":1,"model":"expert","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":` +
				strconv.Quote(refusal) + `},"finish_reason":"stop"}]}`)}, nil
		}
		return &pipeline.Response{Body: []byte(completion("e1", answer, "", "stop", 1, 1))}, nil
	})}
	l := newLoop(t, []config.Tool{{Name: "ask_expert", Kind: "agent", Model: "expert", System: "You are an expert."}}, func(o *Options) {
		o.Lookup = func(m string) *pipeline.Route {
			if m == "expert" {
				return expert
			}
			return nil
		}
	})
	res, err := l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "ask_expert", Arguments: []byte(`{"instruction":"What is six times seven?"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if d := gjson.GetBytes(res.Content, "data"); d.Type != gjson.String || d.Str != "42" {
		t.Fatalf("result %s", res.Content)
	}
	msgs := gjson.GetBytes(seen, "messages")
	if msgs.Get("0.role").String() != "system" || msgs.Get("0.content").String() != "You are an expert." ||
		msgs.Get("1.role").String() != "user" || msgs.Get("1.content").String() != "What is six times seven?" {
		t.Fatalf("agent request %s", seen)
	}
	// An expert that gives no text (tool calls it was offered none of) is
	// an error result, never an empty answer taken for one.
	answer = ""
	res, _ = l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "ask_expert", Arguments: []byte(`{"instruction":"x"}`)})
	if gjson.GetBytes(res.Content, "status").Str != "error" || !strings.Contains(gjson.GetBytes(res.Content, "error.message").Str, "no text") {
		t.Fatalf("an empty expert answer: %s", res.Content)
	}
	// A refusal is the expert's answer, an error result saying so.
	refusal = "I can't help with that."
	res, _ = l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "ask_expert", Arguments: []byte(`{"instruction":"x"}`)})
	if gjson.GetBytes(res.Content, "error.type").Str != "refused" || !strings.Contains(gjson.GetBytes(res.Content, "error.message").Str, "can't help") {
		t.Fatalf("a refusal: %s", res.Content)
	}
	// Missing instruction: a validation error naming the field.
	res, _ = l.Tools().CallTool(context.Background(), &pipeline.ToolCall{ID: "c", Name: "ask_expert", Arguments: []byte(`{}`)})
	if !strings.Contains(gjson.GetBytes(res.Content, "error.message").String(), "instruction") {
		t.Fatalf("result %s", res.Content)
	}
}

func TestCancelMidTool(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	toolCtxDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server notices a closed connection only after the body
		close(started)
		<-r.Context().Done()
		close(toolCtxDone)
	}))
	defer srv.Close()
	m := &fakeModel{turns: []turnFn{always(toolRound("up-1", "c1", "block", `{}`, 1, 1), "")}}
	l := newLoop(t, []config.Tool{{Name: "block", Kind: "http", URL: srv.URL}}, func(o *Options) {
		o.Loop.KeepAliveInterval = config.Duration(20 * time.Millisecond)
	})
	resp, err := l.Chat(context.Background(), request(m, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	s := resp.Stream
	go func() {
		<-started
		s.Close() // the proxy closes from another goroutine when the client goes
	}()
	var nextErr error
	for nextErr == nil {
		_, nextErr = s.Next()
	}
	if nextErr == io.EOF {
		t.Fatal("a cancelled loop must not end like a complete answer")
	}
	select {
	case <-toolCtxDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the running tool was not cancelled")
	}
	s.Close()
	if m.calls() != 1 || m.closed != m.opened {
		t.Fatalf("model calls %d, closed %d of %d", m.calls(), m.closed, m.opened)
	}
}

func TestKeepAlivesWhileToolRuns(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, `"slow"`)
	}))
	defer srv.Close()
	m := &fakeModel{turns: []turnFn{
		always(toolRound("up-1", "c1", "slow", `{}`, 1, 1), ""),
		always(textRound("up-2", "ok", 1, 1), ""),
	}}
	l := newLoop(t, []config.Tool{{Name: "slow", Kind: "http", URL: srv.URL}}, func(o *Options) {
		o.Loop.KeepAliveInterval = config.Duration(40 * time.Millisecond)
	})
	resp, err := l.Chat(context.Background(), request(m, true, userBody+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := checkStream(t, sse(t, resp.Stream), false)
	if sum.KeepAlives < 2 || sum.Content != "ok" {
		t.Fatalf("keep-alives %d content %q", sum.KeepAlives, sum.Content)
	}
}

func TestUnknownToolAndTerminate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		terminate bool
		wantCalls int
	}{
		{"error result, loop continues", false, 2},
		{"terminate_on_unknown_calls ends the loop", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &fakeModel{turns: []turnFn{
				always(nil, completion("up-1", "", `[{"id":"c1","type":"function","function":{"name":"teleport","arguments":"{}"}}]`, "tool_calls", 1, 1)),
				always(nil, completion("up-2", "sorry", "", "stop", 1, 1)),
			}}
			l := newLoop(t, []config.Tool{calcTool}, func(o *Options) { o.Loop.TerminateOnUnknownCalls = tc.terminate })
			resp, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
			if err != nil {
				t.Fatal(err)
			}
			if m.calls() != tc.wantCalls {
				t.Fatalf("model calls %d", m.calls())
			}
			if tc.terminate && !strings.Contains(gjson.GetBytes(resp.Body, "choices.0.message.content").String(), "unknown tool") {
				t.Fatalf("body %s", resp.Body)
			}
		})
	}
}

func TestConsecutiveErrorsBudget(t *testing.T) {
	t.Parallel()
	m := &fakeModel{turns: []turnFn{func(r *pipeline.Request) ([]string, string) {
		if gjson.GetBytes(r.Body, "tool_choice").String() == "none" {
			return nil, completion("up", "giving up", "", "stop", 1, 1)
		}
		return nil, completion("up", "", `[{"id":"c","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1/0\"}"}}]`, "tool_calls", 1, 1)
	}}}
	l := newLoop(t, []config.Tool{calcTool}, func(o *Options) { o.Loop.MaxConsecutiveErrors = 2 })
	resp, err := l.Chat(context.Background(), request(m, false, userBody+`}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.calls() != 3 || gjson.GetBytes(resp.Body, "choices.0.message.content").String() != "giving up" {
		t.Fatalf("calls %d body %s", m.calls(), resp.Body)
	}
}
