package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// guardConfig adds guardrails to the base config; {{EXTRA}} takes more.
const guardConfig = baseConfig + `
[[guardrails]]
name = "no-codenames"
stage = "request"
kind = "regex"
action = "block"
patterns = ['(?i)project\s+falcon']
[[guardrails]]
name = "pii-in"
stage = "request"
kind = "pii"
action = "redact"
[[guardrails]]
name = "watch-weather"
stage = "request"
kind = "regex"
action = "flag"
patterns = ['weather']
[[guardrails]]
name = "too-long"
stage = "request"
kind = "max_length"
action = "block"
max_length = 200
`

func blockedCode(t *testing.T, err error) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "content_blocked" {
		t.Fatalf("want 400 content_blocked, got %v", err)
	}
	return apiErr
}

// TestGuardrailsRequestStage: block answers 400 content_blocked naming the
// guardrail and never the text, redact rewrites what the upstream sees,
// flag lets the request pass and reports it, max_length blocks.
func TestGuardrailsRequestStage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig, mockllm.Options{})
	schema := wiretest.LoadSchema(t)

	_, err := h.client.Chat.Completions.New(context.Background(), userMsg("tell me about Project  Falcon"))
	apiErr := blockedCode(t, err)
	if !strings.Contains(apiErr.Message, `"no-codenames"`) || strings.Contains(strings.ToLower(apiErr.Message), "falcon") {
		t.Errorf("message %q", apiErr.Message)
	}
	raw, _ := h.lastRaw()
	if err := schema.ErrorBody(raw); err != nil {
		t.Fatal(err)
	}
	stream := h.client.Chat.Completions.NewStreaming(context.Background(), userMsg("project falcon?"))
	for stream.Next() {
	}
	blockedCode(t, stream.Err())
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("a blocked request reached the upstream (%d calls)", n)
	}

	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("mail ann@example.com, card 4111 1111 1111 1111, about the weather"))
	if err != nil {
		t.Fatal(err)
	}
	up := gjson.GetBytes(h.mock.Requests()[0].Body, "messages.0.content").Str
	if up != "mail [REDACTED], card [REDACTED], about the weather" {
		t.Errorf("upstream saw %q", up)
	}
	if !strings.Contains(resp.Choices[0].Message.Content, "[REDACTED]") {
		t.Errorf("answer %q", resp.Choices[0].Message.Content)
	}
	if _, hdr := h.lastRaw(); hdr.Get("x-gateway-guardrails") != "pii-in;redact,watch-weather;flag" {
		t.Errorf("x-gateway-guardrails %q", hdr.Get("x-gateway-guardrails"))
	}

	_, err = h.client.Chat.Completions.New(context.Background(), userMsg(strings.Repeat("ö", 201)))
	blockedCode(t, err)
}

// piiAnswer is an answer whose e-mail address the mock splits across
// three chunks (TextRunes 6).
const piiAnswer = "Sure! You can reach our support team at help.desk@example.org any time, or call us."

// TestGuardrailsResponseStage: on a stream, a PII value split across three
// chunks is redacted before it leaves; block ends the stream with the
// error event; JSON answers get the same.
func TestGuardrailsResponseStage(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"redact", "block"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			cfg := baseConfig + guardrail("pii-out", "response", "pii", action, "window = 16")
			h := newHarness(t, cfg, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{Text: piiAnswer}), Chunking: mockllm.Chunking{TextRunes: 6, SplitWrites: true}})
			schema := wiretest.LoadSchema(t)
			for _, usage := range []bool{false, true} {
				p := userMsg("contact?")
				if usage {
					p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				}
				acc, sum, err := h.streamChat(p, wiretest.Options{WantUsage: usage && action == "redact", WantError: action == "block"}, schema)
				if action == "block" {
					if err == nil || !strings.Contains(string(sum.Error), `"content_blocked"`) || strings.Contains(string(sum.Error), "example.org") {
						t.Fatalf("stream error %v, event %s", err, sum.Error)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				want := strings.Replace(piiAnswer, "help.desk@example.org", "[REDACTED]", 1)
				if acc.Choices[0].Message.Content != want || sum.Content != want {
					t.Errorf("usage %v: content %q", usage, acc.Choices[0].Message.Content)
				}
			}
			resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("contact?"))
			if action == "block" {
				blockedCode(t, err)
				return
			}
			if err != nil || strings.Contains(resp.Choices[0].Message.Content, "example.org") {
				t.Fatalf("JSON: %v %q", err, resp.Choices[0].Message.Content)
			}
		})
	}
}

// TestGuardrailsToolStages: a blocked tool input is an error result and the
// tool never runs; a tool's output is redacted before the model sees it.
func TestGuardrailsToolStages(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"owner":"Dana","email":"dana@corp.example.com"}`))
	}))
	defer srv.Close()
	cfg := baseConfig + `
[[tools]]
name = "lookup"
kind = "http"
url = "` + srv.URL + `"
parameters = '{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}'
[[guardrails]]
name = "no-admin"
stage = "tool_input"
kind = "regex"
action = "block"
patterns = ['admin']
tools = ["look*"]
[[guardrails]]
name = "pii-tools"
stage = "tool_output"
kind = "pii"
action = "redact"
pii = ["email"]
`
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "tool" {
			return mockllm.Turn{Text: "result: " + strings.Join(c.ToolResults, "")}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "lookup", Arguments: `{"key":"` + c.LastText + `"}`}}}
	}})
	schema := wiretest.LoadSchema(t)
	acc, _, err := h.streamChat(userMsg("admin"), wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if c := acc.Choices[0].Message.Content; !strings.Contains(c, `"type":"content_blocked"`) || !strings.Contains(c, "no-admin") || runs.Load() != 0 {
		t.Errorf("blocked input: runs %d, content %q", runs.Load(), c)
	}
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("owner"))
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0].Message.Content
	if runs.Load() != 1 || !strings.Contains(c, `"email":"[REDACTED]"`) || strings.Contains(c, "dana@") {
		t.Errorf("redacted output: runs %d, content %q", runs.Load(), c)
	}
	for _, r := range h.mock.Requests() {
		if strings.Contains(string(r.Body), "dana@corp") {
			t.Fatal("the model saw the unredacted tool output")
		}
	}
}

// TestGuardrailsHTTPClassifier: the http kind blocks what the classifier
// flags; a classifier that times out passes the text with fail = "open" and
// blocks it with fail = "closed".
func TestGuardrailsHTTPClassifier(t *testing.T) {
	t.Parallel()
	classifier, got := newClassifier(t)
	for _, fail := range []string{"open", "closed"} {
		t.Run(fail, func(t *testing.T) {
			t.Parallel()
			// A timeout the quick answers meet on a loaded machine, and
			// half the 2 s the classifier takes over "slow": only that one
			// times out, so fail open and closed still differ.
			cfg := baseConfig + guardrail("classifier", "request", "http", "block", `url = "`+classifier.URL+`"`, `timeout = "1s"`, `fail = "`+fail+`"`)
			h := newHarness(t, cfg, mockllm.Options{})
			_, err := h.client.Chat.Completions.New(context.Background(), userMsg("something toxic"))
			blockedCode(t, err)
			if s, _ := got.Load().(string); !strings.Contains(s, `"stage":"request"`) || !strings.Contains(s, `"guardrail":"classifier"`) {
				t.Errorf("classifier request %s", s)
			}
			if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("fine")); err != nil {
				t.Fatal(err)
			}
			_, err = h.client.Chat.Completions.New(context.Background(), userMsg("slow one"))
			if fail == "closed" {
				blockedCode(t, err)
			} else if err != nil {
				t.Fatalf("fail open: %v", err)
			}
		})
	}
}

// TestGuardrailsPerTenant: a tenant whose policy lists no guardrails is
// not checked; the others get the "*" list.
func TestGuardrailsPerTenant(t *testing.T) {
	t.Parallel()
	cfg := guardConfig + `
[[keys]]
tenant = "research"
key = "k-research"
[[keys]]
tenant = "sales"
key = "k-sales"
[[policies]]
tenant = "*"
guardrails = ["no-codenames"]
[[policies]]
tenant = "research"
guardrails = []
`
	h := newHarness(t, cfg, mockllm.Options{})
	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("project falcon"), option.WithAPIKey("k-research")); err != nil {
		t.Fatalf("research: %v", err)
	}
	_, err := h.client.Chat.Completions.New(context.Background(), userMsg("project falcon"), option.WithAPIKey("k-sales"))
	blockedCode(t, err)
	if _, err := h.client.Chat.Completions.New(context.Background(), userMsg("mail ann@example.com"), option.WithAPIKey("k-sales")); err != nil {
		t.Fatal(err)
	}
	if up := gjson.GetBytes(h.mock.Requests()[1].Body, "messages.0.content").Str; up != "mail ann@example.com" {
		t.Errorf("pii-in is not in sales' list, yet the upstream saw %q", up)
	}
}

// TestGuardrailsResponseLengthAndClassifier: at the response stage,
// max_length redact cuts a streamed answer at the limit (finish and [DONE]
// intact), and an http classifier that flags the whole answer ends the
// stream with the error event; flag only reports.
func TestGuardrailsResponseLengthAndClassifier(t *testing.T) {
	t.Parallel()
	classifier, _ := newClassifier(t)
	cfg := baseConfig + `
[[guardrails]]
name = "short"
stage = "response"
kind = "max_length"
action = "redact"
max_length = 20
[[guardrails]]
name = "judge"
stage = "response"
kind = "http"
action = "block"
url = "` + classifier.URL + `"
[[guardrails]]
name = "note"
stage = "response"
kind = "regex"
action = "flag"
patterns = ['Ωmega']
`
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if strings.Contains(c.LastText, "bad") {
			return mockllm.Turn{Text: "this is forbidden talk"}
		}
		return mockllm.Turn{Text: "Ωmega — a long answer that goes on and on and on."}
	}, Chunking: mockllm.Chunking{TextRunes: 3}})
	schema := wiretest.LoadSchema(t)
	acc, sum, err := h.streamChat(userMsg("hi"), wiretest.Options{}, schema)
	if err != nil {
		t.Fatal(err)
	}
	if c := acc.Choices[0].Message.Content; c != "Ωmega — a long answe" || sum.FinishReason != "stop" {
		t.Errorf("cut answer %q finish %q", c, sum.FinishReason)
	}
	_, sum, err = h.streamChat(userMsg("bad"), wiretest.Options{WantError: true}, schema)
	if err == nil || !strings.Contains(string(sum.Error), `guardrail \"judge\" blocked the answer`) {
		t.Fatalf("classifier block: %v %s", err, sum.Error)
	}
	resp, err := h.client.Chat.Completions.New(context.Background(), userMsg("hi"))
	if err != nil || resp.Choices[0].Message.Content != "Ωmega — a long answe" {
		t.Fatalf("JSON: %v %+v", err, resp)
	}
	if _, hdr := h.lastRaw(); hdr.Get("x-gateway-guardrails") != "note;flag,short;redact" {
		t.Errorf("x-gateway-guardrails %q", hdr.Get("x-gateway-guardrails"))
	}
}

// newClassifier is an http guardrail's classifier: it flags texts with
// "toxic" or "forbidden", answers texts with "slow" after 2s, and keeps the
// last request body.
func newClassifier(t *testing.T) (*httptest.Server, *atomic.Value) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.Store(string(body))
		text := gjson.GetBytes(body, "text").Str
		if strings.Contains(text, "slow") {
			time.Sleep(2 * time.Second)
		}
		flagged := strings.Contains(text, "toxic") || strings.Contains(text, "forbidden")
		_, _ = w.Write([]byte(`{"flagged":` + map[bool]string{true: "true", false: "false"}[flagged] + `}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// guardrail is one [[guardrails]] entry of a test config, with more lines.
func guardrail(name, stage, kind, action string, more ...string) string {
	return fmt.Sprintf("\n[[guardrails]]\nname = %q\nstage = %q\nkind = %q\naction = %q\n%s\n", name, stage, kind, action, strings.Join(more, "\n"))
}

// TestGuardrailsToolStagesOtherActions: the tool stages' remaining actions
// and the http kind there. A redacted tool input reaches the tool redacted;
// a blocked tool output never reaches the model (it gets an error result
// naming the guardrail); a flagged output passes and is reported; an http
// classifier at tool_input blocks the call before the tool runs. Streamed
// and not.
func TestGuardrailsToolStagesOtherActions(t *testing.T) {
	t.Parallel()
	classifier, _ := newClassifier(t)
	var (
		runs atomic.Int32
		seen atomic.Value
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		seen.Store(string(body))
		w.Header().Set("Content-Type", "application/json")
		key := gjson.GetBytes(body, "key").Str
		_, _ = w.Write([]byte(`{"answer":"` + map[bool]string{true: "SECRET-PLAN", false: "plain"}[strings.Contains(key, "plan")] + `"}`))
	}))
	defer srv.Close()
	cfg := baseConfig + `
[[tools]]
name = "lookup"
kind = "http"
url = "` + srv.URL + `"
parameters = '{"type":"object","properties":{"key":{"type":"string"}},"required":["key"]}'
` + guardrail("mask-emails", "tool_input", "pii", "redact", `pii = ["email"]`) +
		guardrail("no-plans", "tool_output", "regex", "block", `patterns = ['SECRET-PLAN']`) +
		guardrail("watch-plain", "tool_output", "regex", "flag", `patterns = ['plain']`) +
		guardrail("classify-input", "tool_input", "http", "block", `url = "`+classifier.URL+`"`, `timeout = "1s"`)
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "tool" {
			return mockllm.Turn{Text: "result: " + strings.Join(c.ToolResults, "")}
		}
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "lookup", Arguments: `{"key":"` + c.LastText + `"}`}}}
	}})
	schema := wiretest.LoadSchema(t)
	ask := func(text string, stream bool) (string, http.Header) {
		t.Helper()
		if stream {
			acc, _, err := h.streamChat(userMsg(text), wiretest.Options{}, schema)
			if err != nil {
				t.Fatal(err)
			}
			_, hdr := h.lastRaw()
			return acc.Choices[0].Message.Content, hdr
		}
		resp, err := h.client.Chat.Completions.New(context.Background(), userMsg(text))
		if err != nil {
			t.Fatal(err)
		}
		_, hdr := h.lastRaw()
		return resp.Choices[0].Message.Content, hdr
	}
	for _, stream := range []bool{false, true} {
		before := runs.Load()
		c, hdr := ask("mail dana@corp.example.com", stream)
		if !stream && !strings.Contains(hdr.Get("X-Gateway-Guardrails"), "watch-plain") {
			t.Errorf("the flag was not reported: %q", hdr.Get("X-Gateway-Guardrails"))
		}
		if runs.Load() != before+1 || strings.Contains(seen.Load().(string), "dana@") || !strings.Contains(seen.Load().(string), "[REDACTED]") {
			t.Errorf("stream=%v: redacted input: the tool got %v", stream, seen.Load())
		}
		if !strings.Contains(c, "plain") {
			t.Errorf("stream=%v: flagged output did not pass: %q", stream, c)
		}

		c, _ = ask("the plan", stream)
		if strings.Contains(c, "SECRET-PLAN") || !strings.Contains(c, "content_blocked") || !strings.Contains(c, "no-plans") {
			t.Errorf("stream=%v: blocked output: %q", stream, c)
		}

		before = runs.Load()
		c, _ = ask("something toxic", stream)
		if runs.Load() != before || !strings.Contains(c, "content_blocked") || !strings.Contains(c, "classify-input") {
			t.Errorf("stream=%v: classifier at tool_input: runs %d→%d, %q", stream, before, runs.Load(), c)
		}
	}
	for _, r := range h.mock.Requests() {
		if strings.Contains(string(r.Body), "SECRET-PLAN") {
			t.Fatal("the model saw a blocked tool output")
		}
	}
}

// A message that gives "content" twice cannot slip past a request
// guardrail: the guardrail would judge the first, the upstream read the
// last. The body is refused before any layer reads it, and the upstream
// never sees it.
func TestGuardrailsSeeWhatTheUpstreamSees(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig, mockllm.Options{})
	status, _, body := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"benign","content":"project falcon"}]}`, nil)
	if status != 400 || gjson.GetBytes(body, "error.param").Str != "messages[0]" {
		t.Fatalf("status %d: %s, want a 400 naming messages[0]", status, body)
	}
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("the upstream got %d requests", n)
	}
}

// A pass-through call of a model passes the tenant's request guardrails as
// a chat request does: a blocked text gets the same 400 without an upstream
// call, and a redacted one reaches the upstream redacted, whatever the
// endpoint's field (completions' prompt, embeddings' input, a Responses
// request's input items).
func TestGuardrailsPassThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig+openPassthrough, mockllm.Options{})
	addr := hostOf(h.base)
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"gpt-x","prompt":"tell me about Project Falcon"}`},
		{"/v1/embeddings", `{"model":"gpt-x","input":["fine","project  falcon"]}`},
		{"/v1/moderations", `{"model":"gpt-x","input":[{"type":"text","text":"PROJECT FALCON"}]}`},
		// Texts the model reads outside message contents: a tool call's
		// arguments and a tool's description.
		{"/v1/completions", `{"model":"gpt-x","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"n","arguments":"{\"q\":\"project falcon\"}"}}]}]}`},
		{"/v1/completions", `{"model":"gpt-x","prompt":"hi","tools":[{"type":"function","name":"n","description":"about Project Falcon"}]}`},
	} {
		before := h.mock.TotalCalls()
		status, body := rawHTTP(t, addr, postRaw(c.path, "sk-client", c.body))
		if status != 400 || gjson.GetBytes(body, "error.code").Str != "content_blocked" {
			t.Errorf("%s: %d %s, want 400 content_blocked", c.path, status, body)
		}
		if n := h.mock.TotalCalls() - before; n != 0 {
			t.Errorf("%s: the upstream got %d calls", c.path, n)
		}
	}
	status, body := rawHTTP(t, addr, postRaw("/v1/embeddings", "sk-client", `{"model":"gpt-x","user":"kept@example.com","input":["write to jane@example.com"]}`))
	up := gjson.GetBytes(body, "body").Str
	if status != 200 || strings.Contains(up, "jane@example.com") || !strings.Contains(up, "[REDACTED]") || !strings.Contains(up, "kept@example.com") {
		t.Errorf("redact: %d, upstream got %s", status, up)
	}
}

// A classifier judges a request once, whatever the number of its texts: an
// embeddings input of many strings, or a chat of many messages, is one
// question, not one per text (a hostile body of thousands of messages made
// as many sequential calls, each up to the guard's timeout).
func TestGuardrailsPassThroughClassifierAskedOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		flagged := strings.Contains(gjson.GetBytes(body, "text").Str, "toxic")
		_, _ = w.Write([]byte(`{"flagged":` + map[bool]string{true: "true", false: "false"}[flagged] + `}`))
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, baseConfig+openPassthrough+guardrail("classifier", "request", "http", "block", `url = "`+srv.URL+`"`), mockllm.Options{})
	addr := hostOf(h.base)
	input := `"fine"` + strings.Repeat(`,"fine"`, 99)
	if status, body := rawHTTP(t, addr, postRaw("/v1/embeddings", "sk-client", `{"model":"gpt-x","input":[`+input+`]}`)); status != 200 || calls.Load() != 1 {
		t.Errorf("fine: %d %s, classifier asked %d times", status, body, calls.Load())
	}
	if status, body := rawHTTP(t, addr, postRaw("/v1/embeddings", "sk-client", `{"model":"gpt-x","input":[`+input+`,"toxic"]}`)); status != 400 || calls.Load() != 2 {
		t.Errorf("toxic: %d %s, classifier asked %d times", status, body, calls.Load())
	}
	// The same on chat: a request of a hundred messages is one question.
	msgs := `{"role":"user","content":"fine"}` + strings.Repeat(`,{"role":"user","content":[{"type":"text","text":"fine"}]}`, 99)
	if status, body := rawHTTP(t, addr, postRaw("/v1/chat/completions", "sk-client", `{"model":"gpt-x","messages":[`+msgs+`]}`)); status != 200 || calls.Load() != 3 {
		t.Errorf("chat: %d %s, classifier asked %d times", status, body, calls.Load())
	}
	if status, body := rawHTTP(t, addr, postRaw("/v1/chat/completions", "sk-client", `{"model":"gpt-x","messages":[`+msgs+`,{"role":"user","content":"toxic"}]}`)); status != 400 || calls.Load() != 4 {
		t.Errorf("chat, toxic: %d %s, classifier asked %d times", status, body, calls.Load())
	}
}

// TestGuardrailsRequestStageToolCallsAndTools: the request stage judges
// every text of the request the model reads, not only message contents: a
// blocked phrase in an earlier tool call's arguments or in a tool's
// description is blocked, and a PII value there reaches the upstream
// redacted (the arguments still JSON).
func TestGuardrailsRequestStageToolCallsAndTools(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig, mockllm.Options{})
	history := func(args, description string) string {
		return `{"model":"gpt-x","messages":[{"role":"user","content":"hi"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"note","arguments":` + args + `}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"ok"}],` +
			`"tools":[{"type":"function","function":{"name":"note","description":` + description + `,"parameters":{"type":"object"}}}]}`
	}
	for _, body := range []string{
		history(`"{\"text\":\"tell me about project falcon\"}"`, `"Takes a note"`),
		history(`"{}"`, `"Takes a note about Project Falcon"`),
	} {
		status, _, b := h.post("/chat/completions", body, nil)
		if status != 400 || gjson.GetBytes(b, "error.code").Str != "content_blocked" {
			t.Fatalf("status %d: %s, want 400 content_blocked", status, b)
		}
	}
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("a blocked request reached the upstream (%d calls)", n)
	}
	status, _, b := h.post("/chat/completions", history(`"{\"to\":\"ann@example.com\"}"`, `"Mails bob@example.com"`), nil)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	up := h.mock.Requests()[0].Body
	args := gjson.GetBytes(up, "messages.1.tool_calls.0.function.arguments").Str
	if args != `{"to":"[REDACTED]"}` {
		t.Errorf("upstream arguments %s", args)
	}
	if d := gjson.GetBytes(up, "tools.0.function.description").Str; d != "Mails [REDACTED]" {
		t.Errorf("upstream description %q", d)
	}
}

// A response guardrail that redacts the answer of a server tool loop
// behind /v1/responses: the mcp_call item stays between the round's text
// and the next round's, the same in the stream and the JSON answer. The
// stream's guardrail held the first round's text back past the call, so
// the call came first; the JSON answer cut the redacted text at the
// call's offset into the text before redaction ("… It is" | " 42").
func TestResponsesGuardrailKeepsServerCallPlace(t *testing.T) {
	t.Parallel()
	cfg := baseConfig + calculatorTool + `
[[guardrails]]
name = "pii"
stage = "response"
kind = "pii"
action = "redact"
window = 16
`
	h := newHarness(t, cfg, mockllm.Options{Chunking: mockllm.Chunking{TextRunes: 5}, Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole != "tool" {
			return mockllm.Turn{Text: "Computing, mail bob@example.com. ", ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: `{"expression":"6*7"}`}}}
		}
		return mockllm.Turn{Text: "It is 42, write to bob@example.com."}
	}})
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("6 times 7?")}}
	want := "message:Computing, mail [REDACTED]. |mcp_call:calculator|message:It is 42, write to [REDACTED]."
	for _, stream := range []bool{false, true} {
		if got := outputItems(h.respond(params, stream)); got != want {
			t.Errorf("stream %v: output\n got %s\nwant %s", stream, got, want)
		}
	}
}

// The request stage judges what the model reads beside the messages, on
// chat and on pass-through alike: a structured output's schema, a client
// tool's parameter schema and documents (vLLM's and llama.cpp's RAG
// input). A blocked phrase there is the 400 without an upstream call; a
// PII value in a description or a document reaches the upstream redacted,
// the schema otherwise as sent. They used to reach the upstream unjudged.
func TestGuardrailsRequestStageSideTexts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig+openPassthrough, mockllm.Options{})
	addr := hostOf(h.base)
	schema := func(description string) string {
		return `{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","properties":{"a":{"type":"string","description":"` + description + `"}},"required":["a"]}}}`
	}
	tool := func(description string) string {
		return `[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"q":{"type":"string","description":"` + description + `"}}}}}]`
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		for _, extra := range []string{
			`"response_format":` + schema("about Project Falcon"),
			`"tools":` + tool("about Project Falcon"),
			`"documents":[{"title":"t","text":"Project Falcon notes"}]`,
		} {
			before := h.mock.TotalCalls()
			status, body := rawHTTP(t, addr, postRaw(path, "sk-client", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],`+extra+`}`))
			if status != 400 || gjson.GetBytes(body, "error.code").Str != "content_blocked" {
				t.Errorf("%s %.40s: %d %s, want 400 content_blocked", path, extra, status, body)
			}
			if n := h.mock.TotalCalls() - before; n != 0 {
				t.Errorf("%s %.40s: the upstream got %d calls", path, extra, n)
			}
		}
	}
	status, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"response_format":`+schema("mail ann@example.com")+
		`,"tools":`+tool("mail bob@example.com")+`,"documents":["from jane@example.com"]}`, nil)
	if status != 200 {
		t.Fatalf("redact: %d %s", status, b)
	}
	up := h.mock.Requests()[len(h.mock.Requests())-1].Body
	for path, want := range map[string]string{
		"response_format.json_schema.schema.properties.a.description": "mail [REDACTED]",
		"response_format.json_schema.schema.required.0":               "a",
		"tools.0.function.parameters.properties.q.description":        "mail [REDACTED]",
		"documents.0": "from [REDACTED]",
	} {
		if got := gjson.GetBytes(up, path).Str; got != want {
			t.Errorf("the upstream's %s = %q, want %q", path, got, want)
		}
	}
}

// A text whatever the case of its name never reaches the upstream
// unjudged: an upstream decoding with Go's encoding/json reads "Content"
// as a message's content and "Prompt" as the prompt. A pass-through
// body's request guardrail judges it; chat refuses a key of the request's
// structure spelt in another case before any guardrail (ingress).
func TestGuardrailsNamesInAnyCase(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig+openPassthrough, mockllm.Options{})
	addr := hostOf(h.base)
	for _, c := range []struct{ path, body, code, param string }{
		{"/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"},{"role":"user","Content":"about Project Falcon"}]}`, "", "messages[1]"},
		{"/v1/completions", `{"model":"gpt-x","Prompt":"about Project Falcon"}`, "content_blocked", ""},
	} {
		before := h.mock.TotalCalls()
		status, body := rawHTTP(t, addr, postRaw(c.path, "sk-client", c.body))
		if e := gjson.GetBytes(body, "error"); status != 400 || e.Get("code").Str != c.code || e.Get("param").Str != c.param {
			t.Errorf("%s: %d %s, want 400 %q naming %q", c.path, status, body, c.code, c.param)
		}
		if n := h.mock.TotalCalls() - before; n != 0 {
			t.Errorf("%s: the upstream got %d calls", c.path, n)
		}
	}
}

// An assistant message's refusal (the member, or a refusal part), its
// reasoning and vLLM's chat_template reach the model too: the request
// stage blocks them on chat and on pass-through, before any upstream call,
// and redacts a refusal in place. They used to reach the upstream unjudged.
func TestGuardrailsRequestStageRefusalAndTemplate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, guardConfig+openPassthrough, mockllm.Options{})
	addr := hostOf(h.base)
	const user = `{"role":"user","content":"hi"}`
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		for _, body := range []string{
			`{"model":"gpt-x","messages":[{"role":"assistant","refusal":"project falcon"},` + user + `]}`,
			`{"model":"gpt-x","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"project falcon"}]},` + user + `]}`,
			`{"model":"gpt-x","messages":[{"role":"assistant","content":"ok","reasoning_content":"project falcon"},` + user + `]}`,
			`{"model":"gpt-x","messages":[` + user + `],"chat_template":"{{ 'project falcon' }}"}`,
		} {
			before := h.mock.TotalCalls()
			status, out := rawHTTP(t, addr, postRaw(path, "sk-client", body))
			if status != 400 || gjson.GetBytes(out, "error.code").Str != "content_blocked" {
				t.Errorf("%s %.90s: %d %s, want 400 content_blocked", path, body, status, out)
			}
			if n := h.mock.TotalCalls() - before; n != 0 {
				t.Errorf("%s %.90s: the upstream got %d calls", path, body, n)
			}
		}
	}
	status, _, b := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"mail ann@example.com"}],"refusal":"or bob@example.com"},`+user+`]}`, nil)
	if status != 200 {
		t.Fatalf("redact: %d %s", status, b)
	}
	up := h.mock.Requests()[len(h.mock.Requests())-1].Body
	if a, b := gjson.GetBytes(up, "messages.0.content.0.refusal").Str, gjson.GetBytes(up, "messages.0.refusal").Str; a != "mail [REDACTED]" || b != "or [REDACTED]" {
		t.Errorf("the upstream got the refusals %q and %q", a, b)
	}
}
