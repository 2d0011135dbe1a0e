package mockllm

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

func TestNonStreamShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		turn  Turn
		check func(t *testing.T, c gjson.Result)
	}{
		{
			name: "text",
			turn: Turn{Text: "Hi \"there\" ✓"},
			check: func(t *testing.T, c gjson.Result) {
				m := c.Get("choices.0.message")
				if m.Get("content").Str != "Hi \"there\" ✓" || m.Get("tool_calls").Exists() ||
					c.Get("choices.0.finish_reason").Str != "stop" {
					t.Fatalf("%s", c.Raw)
				}
				if c.Get("usage.prompt_tokens_details.cache_write_tokens").Exists() {
					t.Fatal("cache_write_tokens without CacheWrite")
				}
			},
		},
		{
			name: "tool calls with cached usage",
			turn: Turn{ToolCalls: []ToolCall{{Name: "f", Arguments: `{"a":1}`}, {ID: "x", Name: "g"}},
				Usage: &Usage{Prompt: 2100, Completion: 18, Cached: 1920, CacheWrite: 5}},
			check: func(t *testing.T, c gjson.Result) {
				m := c.Get("choices.0.message")
				tc := m.Get("tool_calls")
				if m.Get("content").Type != gjson.Null || len(tc.Array()) != 2 ||
					tc.Get("0.type").Str != "function" || tc.Get("0.function.name").Str != "f" ||
					tc.Get("0.function.arguments").Str != `{"a":1}` || !strings.HasPrefix(tc.Get("0.id").Str, "call_") ||
					tc.Get("1.id").Str != "x" || c.Get("choices.0.finish_reason").Str != "tool_calls" {
					t.Fatalf("%s", c.Raw)
				}
				u := c.Get("usage")
				if u.Get("total_tokens").Int() != 2118 || u.Get("prompt_tokens_details.cached_tokens").Int() != 1920 ||
					u.Get("prompt_tokens_details.cache_write_tokens").Int() != 5 {
					t.Fatalf("usage %s", u.Raw)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{Respond: func(*Call) Turn { return tc.turn }})
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("gpt-x", false, false, userHi))
			if r.status != 200 || r.header["content-type"] != "application/json" || !gjson.ValidBytes(r.body) {
				t.Fatalf("status %d %v %s", r.status, r.header, r.body)
			}
			c := gjson.ParseBytes(r.body)
			if c.Get("object").Str != "chat.completion" || c.Get("model").Str != "gpt-x" ||
				!strings.HasPrefix(c.Get("id").Str, "chatcmpl-mock-") || c.Get("created").Int() == 0 ||
				c.Get("choices.0.message.role").Str != "assistant" || c.Get("choices.0.message.refusal").Type != gjson.Null ||
				c.Get("choices.0.logprobs").Type != gjson.Null || c.Get("choices.0.index").Int() != 0 ||
				c.Get("system_fingerprint").Str != "fp_mock" {
				t.Fatalf("%s", r.body)
			}
			tc.check(t, c)
		})
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	_, addr := start(t, Options{ContextWindow: map[string]int{"b": 1, "a": 1}})
	tests := []struct {
		name, method, path, body string
		status                   int
		check                    func(t *testing.T, r *rawResp)
	}{
		{name: "models", method: "GET", path: "/v1/models", status: 200, check: func(t *testing.T, r *rawResp) {
			ids := gjson.GetBytes(r.body, "data.#.id").String()
			if gjson.GetBytes(r.body, "object").Str != "list" || ids != `["demo","a","b"]` ||
				gjson.GetBytes(r.body, "data.0.object").Str != "model" || gjson.GetBytes(r.body, "has_more").Exists() {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "one model", method: "GET", path: "/v1/models/gpt-x", status: 200, check: func(t *testing.T, r *rawResp) {
			if gjson.GetBytes(r.body, "id").Str != "gpt-x" || gjson.GetBytes(r.body, "owned_by").Str == "" {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "chat GET", method: "GET", path: "/v1/chat/completions", status: 405, check: envelope("method_not_allowed")},
		{name: "models POST", method: "POST", path: "/v1/models", status: 405, check: envelope("method_not_allowed")},
		{name: "outside v1", method: "GET", path: "/nope", status: 404, check: envelope("unknown_url")},
		{name: "echo", method: "POST", path: "/v1/echo?x=1&y=2", body: `{"k":"v"}`, status: 200, check: func(t *testing.T, r *rawResp) {
			e := gjson.ParseBytes(r.body)
			if e.Get("method").Str != "POST" || e.Get("path").Str != "/v1/echo" || e.Get("query").Str != "x=1&y=2" ||
				e.Get("body").Str != `{"k":"v"}` || e.Get("headers.Authorization").Str != "Bearer sk-test 42" {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "echo any path and method", method: "DELETE", path: "/v1/files/abc", status: 200, check: func(t *testing.T, r *rawResp) {
			if gjson.GetBytes(r.body, "method").Str != "DELETE" || gjson.GetBytes(r.body, "path").Str != "/v1/files/abc" {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "echo status", method: "POST", path: "/v1/echo?status=418", status: 418},
		{name: "echo sse", method: "POST", path: "/v1/responses?sse=3", body: "{}", status: 200, check: func(t *testing.T, r *rawResp) {
			data := dataOf(sse(r.body))
			if len(data) != 4 || data[3] != "[DONE]" || gjson.Get(data[2], "n").Int() != 2 ||
				gjson.Get(data[0], "echo.path").Str != "/v1/responses" {
				t.Fatalf("%q", data)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := do(t, addr, tc.method, tc.path, tc.body, "Authorization", "Bearer sk-test 42")
			if r.status != tc.status || r.header["x-request-id"] == "" {
				t.Fatalf("status %d, want %d; headers %v", r.status, tc.status, r.header)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func envelope(code string) func(t *testing.T, r *rawResp) {
	return func(t *testing.T, r *rawResp) {
		e := gjson.GetBytes(r.body, "error")
		if e.Get("code").Str != code || !e.Get("type").Exists() || !e.Get("param").Exists() || e.Get("message").Str == "" {
			t.Fatalf("envelope %s", r.body)
		}
	}
}

func TestRecording(t *testing.T) {
	t.Parallel()
	s, addr := start(t, Options{MaxRecorded: 3})
	for i := 0; i < 2; i++ {
		do(t, addr, "POST", "/v1/chat/completions", chatBody("a", false, false, userHi), "Authorization", "Bearer k")
	}
	do(t, addr, "POST", "/v1/chat/completions", chatBody("b", false, false, userHi))
	do(t, addr, "POST", "/v1/chat/completions", `{"broken`)
	do(t, addr, "GET", "/v1/models", "")
	if s.Calls("a") != 2 || s.Calls("b") != 1 || s.Calls("c") != 0 || s.TotalCalls() != 4 {
		t.Fatalf("calls a=%d b=%d total=%d", s.Calls("a"), s.Calls("b"), s.TotalCalls())
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[0].Model != "b" || reqs[1].Model != "" || reqs[2].Path != "/v1/models" {
		t.Fatalf("requests %+v", reqs)
	}
	reqs[0].Body[0] = 'X' // a copy: must not change the log
	if s.Requests()[0].Body[0] != '{' {
		t.Fatal("Requests returned shared memory")
	}
	s.ResetRecords()
	if len(s.Requests()) != 0 || s.TotalCalls() != 0 || s.Calls("a") != 0 {
		t.Fatal("ResetRecords kept state")
	}
	// Disabled recording still counts.
	s2, addr2 := start(t, Options{MaxRecorded: -1})
	do(t, addr2, "POST", "/v1/chat/completions", chatBody("a", false, false, userHi))
	if len(s2.Requests()) != 0 || s2.Calls("a") != 1 {
		t.Fatalf("disabled recording: %d requests, %d calls", len(s2.Requests()), s2.Calls("a"))
	}
}

func TestSetRespondConcurrent(t *testing.T) {
	t.Parallel()
	s, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "one"} }})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", false, false, userHi))
			if txt := gjson.GetBytes(r.body, "choices.0.message.content").Str; txt != "one" && txt != "two" {
				t.Errorf("content %q", txt)
			}
		}()
		if i == 4 {
			s.SetRespond(func(*Call) Turn { return Turn{Text: "two"} })
		}
	}
	wg.Wait()
	r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", false, false, userHi))
	if txt := gjson.GetBytes(r.body, "choices.0.message.content").Str; txt != "two" {
		t.Fatalf("after SetRespond: %q", txt)
	}
	s.SetRespond(nil)
	r = do(t, addr, "POST", "/v1/chat/completions", chatBody("m", false, false, userHi))
	if txt := gjson.GetBytes(r.body, "choices.0.message.content").Str; !strings.HasPrefix(txt, "Hello from the demo model.") {
		t.Fatalf("nil responder is not the demo: %q", txt)
	}
}

func TestCancellation(t *testing.T) {
	t.Parallel()
	s, addr := start(t, Options{ChunkDelay: 50 * time.Millisecond,
		Respond: func(*Call) Turn { return Turn{Text: strings.Repeat("a", 400)} }})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	body := chatBody("m", true, false, userHi)
	_, _ = c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	readEvents(t, bufio.NewReader(c), 2)
	_ = c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.WaitCancelled(ctx); err != nil {
		t.Fatalf("no cancellation seen within 1s: %v", err)
	}
	if n := s.Cancelled(); n != 1 {
		t.Fatalf("Cancelled() = %d, want 1", n)
	}
}

func TestCompletedStreamIsNotCancelled(t *testing.T) {
	t.Parallel()
	s, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "short"} }})
	for i := 0; i < 3; i++ {
		r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", true, true, userHi))
		checkStream(t, r.body, "m", true)
	}
	time.Sleep(50 * time.Millisecond)
	if s.Cancelled() != 0 {
		t.Fatalf("Cancelled() = %d for completed streams", s.Cancelled())
	}
}

// TestInmemoryAndSDK runs the real openai-go client and its accumulator
// against the server on an in-memory listener, as the gateway embeds it.
func TestInmemoryAndSDK(t *testing.T) {
	t.Parallel()
	s := New(Options{Respond: ToolThenAnswer("lookup", `{"city":"Oslo"}`, "It is")})
	ln := fasthttputil.NewInmemoryListener()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return ln.Dial() }}}
	client := openai.NewClient(option.WithBaseURL("http://mock/v1"), option.WithAPIKey("k"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: "lookup", Parameters: openai.FunctionParameters{"type": "object"}})},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	finished := 0
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatal("accumulator rejected a chunk")
		}
		if _, ok := acc.JustFinishedToolCall(); ok {
			finished++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	msg := acc.Choices[0].Message
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup" || msg.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` ||
		finished != 1 || acc.Usage.TotalTokens == 0 || acc.Choices[0].FinishReason != "tool_calls" || acc.Model != "m" {
		t.Fatalf("accumulated %+v finished %d", acc.ChatCompletion, finished)
	}
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("3C", msg.ToolCalls[0].ID))
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	res, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != "It is 3C" {
		t.Fatalf("answer %q", res.Choices[0].Message.Content)
	}
	if s.Calls("m") != 2 {
		t.Fatalf("calls %d", s.Calls("m"))
	}
}

// TestHandlerMount serves the handler from another fasthttp server.
func TestHandlerMount(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: s.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(); _ = s.Close() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://mock/v1/chat/completions")
	req.Header.SetMethod("POST")
	req.SetBodyString(chatBody("demo", false, false, `[{"role":"user","content":"yo"}]`))
	if err := c.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(resp.Body(), "choices.0.message.content").Str; got != "Hello from the demo model. You said: yo" {
		t.Fatalf("%q", got)
	}
}

func TestDelays(t *testing.T) {
	t.Parallel()
	const first, chunk = 150 * time.Millisecond, 30 * time.Millisecond
	tests := []struct {
		name    string
		stream  bool
		fault   *Fault
		atLeast time.Duration
	}{
		{name: "non-stream first byte", atLeast: first},
		{name: "status fault first byte", fault: StatusFault(500, "", ""), atLeast: first},
		// role + 2 deltas + finish = 4 events: 3 chunk delays.
		{name: "stream first byte and chunks", stream: true, atLeast: first + 3*chunk},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{FirstByteDelay: first, ChunkDelay: chunk,
				Respond: func(*Call) Turn { return Turn{Text: "abcdefgh", Fault: tc.fault} }})
			t0 := time.Now()
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", tc.stream, false, userHi))
			if el := time.Since(t0); el < tc.atLeast || r.status == 0 {
				t.Fatalf("status %d after %v, want at least %v", r.status, el, tc.atLeast)
			}
		})
	}
}
