package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/internal/testproc"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// limitsConfig: tenant "team" (key sk-team) may make 5 requests a minute,
// however many replicas serve it.
const limitsConfig = baseConfig + `
[[keys]]
name = "team-key"
tenant = "team"
key = "sk-team"
[[keys]]
name = "ops-key"
tenant = "ops"
key = "sk-ops"
role = "admin"
[[limits]]
tenant = "team"
requests_per_minute = 5
`

// send makes one request with an optional bearer key (and a JSON body when
// body is not empty) and returns status, headers and body.
func send(t *testing.T, method, url, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func chatRequest(t *testing.T, base, key string) (int, http.Header, []byte) {
	t.Helper()
	return send(t, "POST", base+"/chat/completions", key, `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`)
}

// Two gateway processes sharing one redis-server enforce one limit together:
// the sixth request is refused whichever replica gets it, with the headers
// SDK retry logic reads. With Redis gone they fail open.
func TestRateLimitAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := testredis.Start(t)
	bin := testproc.Gateway(t)
	mock := mockllm.New(mockllm.Options{})
	mockURL, err := mock.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	cfg := strings.ReplaceAll(limitsConfig, "{{MOCK}}", mockURL) + "[redis]\naddr = \"" + rs.Addr() + "\"\nprefix = \"rl-test:\"\n"
	urls := []string{startReplica(t, bin, cfg), startReplica(t, bin, cfg)}
	for i := range 5 {
		status, hdr, body := chatRequest(t, urls[i%2], "sk-team")
		if status != 200 {
			t.Fatalf("request %d on replica %d: %d %s", i, i%2, status, body)
		}
		if hdr.Get("X-Ratelimit-Limit-Requests") != "5" || hdr.Get("X-Ratelimit-Remaining-Requests") != string(rune('4'-i)) {
			t.Fatalf("request %d headers: limit %q remaining %q", i, hdr.Get("X-Ratelimit-Limit-Requests"), hdr.Get("X-Ratelimit-Remaining-Requests"))
		}
	}
	for _, u := range urls {
		status, hdr, body := chatRequest(t, u, "sk-team")
		if status != 429 || gjson.GetBytes(body, "error.code").Str != "rate_limit_exceeded" {
			t.Fatalf("sixth request: %d %s", status, body)
		}
		if hdr.Get("Retry-After") == "" || hdr.Get("X-Ratelimit-Remaining-Requests") != "0" || hdr.Get("X-Ratelimit-Reset-Requests") == "" {
			t.Fatalf("429 headers: %v", hdr)
		}
	}
	// The real openai-go client surfaces it as a 429 APIError.
	client := openai.NewClient(option.WithBaseURL(urls[0]), option.WithAPIKey("sk-team"), option.WithMaxRetries(0))
	_, err = client.Chat.Completions.New(context.Background(), userMsg("again"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("openai-go: %v", err)
	}
	// Another tenant is not limited.
	if status, _, _ := chatRequest(t, urls[1], "sk-ops"); status != 200 {
		t.Fatalf("ops: %d", status)
	}
	// Redis killed: fail open (the default).
	rs.Stop()
	if status, _, body := chatRequest(t, urls[0], "sk-team"); status != 200 {
		t.Fatalf("with Redis down (fail open): %d %s", status, body)
	}
}

// A tool-loop request is priced over all its rounds and can exhaust a
// budget, which then stops its later rounds; the usage API's totals equal
// the responses' usage priced by the table; only admin keys may read it.
func TestBudgetToolLoopAndUsageAPI(t *testing.T) {
	t.Parallel()
	_, url := newToolServer(t, 0)
	cfg := strings.ReplaceAll(toolConfig, "{{HTTP}}", url) + `
[[keys]]
name = "team-key"
tenant = "team"
key = "sk-team"
[[keys]]
name = "ops-key"
tenant = "ops"
key = "sk-ops"
role = "admin"
[[budgets]]
tenant = "team"
amount = 0.002
period = "day"
`
	// gpt-x at $2 input / $10 output per million tokens.
	cfg = strings.Replace(cfg, "context_window = 1000\n", "context_window = 1000\n[models.price]\ninput = 2\noutput = 10\n", 1)
	h := newHarness(t, cfg, mockllm.Options{Respond: twoRounds})
	client := openai.NewClient(option.WithBaseURL(h.base), option.WithAPIKey("sk-team"), option.WithMaxRetries(0))

	// twoRounds: 3 upstream calls, prompt 100+200+300, completion 30:
	// 300 + 500 + 700 = 1500 µ$, under the 2000 µ$ budget when it starts.
	resp, err := client.Chat.Completions.New(context.Background(), userMsg("compute"))
	if err != nil {
		t.Fatal(err)
	}
	u := resp.Usage
	if u.PromptTokens != 600 || u.CompletionTokens != 30 {
		t.Fatalf("usage %+v", u)
	}
	// The second request starts at 1500 µ$; its first two rounds spend 800
	// more (2300, over), so its third round is refused; the third request
	// is refused before any round (the memory store sees spend at once).
	var apiErr *openai.Error
	for i, prompt := range []string{"compute again", "one more"} {
		_, err := client.Chat.Completions.New(context.Background(), userMsg(prompt))
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "insufficient_quota" {
			t.Fatalf("request %d over budget: %v", i+2, err)
		}
	}
	if calls := h.mock.TotalCalls(); calls != 5 {
		t.Fatalf("upstream calls %d, want 3 + 2", calls)
	}

	get := func(key string) (int, []byte) {
		status, _, b := send(t, "GET", h.base+"/gateway/usage?group_by=tenant", key, "")
		return status, b
	}
	if status, body := get("sk-team"); status != 403 {
		t.Fatalf("non-admin key: %d %s", status, body)
	}
	// A missing or unknown key is 401, as on every other route.
	for _, key := range []string{"", "sk-nobody"} {
		if status, body := get(key); status != 401 || gjson.GetBytes(body, "error.code").Str != "invalid_api_key" {
			t.Fatalf("key %q: %d %s", key, status, body)
		}
	}
	status, body := get("sk-ops")
	if status != 200 {
		t.Fatalf("admin key: %d %s", status, body)
	}
	// Three client requests; five upstream calls: 100+200+300+100+200
	// input tokens, 5 × 10 output, 1500 + 800 µ$.
	team := gjson.GetBytes(body, `data.#(group=="team")`)
	if team.Get("requests").Int() != 3 || team.Get("upstream_calls").Int() != 5 || team.Get("input_tokens").Int() != 900 ||
		team.Get("output_tokens").Int() != 50 || team.Get("cost_microdollars").Int() != 2300 {
		t.Fatalf("usage report: %s", body)
	}
	// Only to: the 30 days up to it (from was today's default, and a to a
	// year ahead was refused for the span).
	if status, _, body := send(t, "GET", h.base+"/gateway/usage?to="+time.Now().UTC().AddDate(2, 0, 0).Format("2006-01-02"), "sk-ops", ""); status != 200 ||
		gjson.GetBytes(body, "total.requests").Int() != 0 {
		t.Fatalf("only to: %d %s", status, body)
	}
	// A from given is judged as given, the first day of year 1 too (it was
	// taken for no from: another window, silently).
	for _, from := range []string{"0001-01-01", "1000-01-01"} {
		if status, _, body := send(t, "GET", h.base+"/gateway/usage?from="+from, "sk-ops", ""); status != 400 || gjson.GetBytes(body, "error.param").Str == "" {
			t.Errorf("from=%s: %d %s", from, status, body)
		}
	}
}

// Every upstream call of a tool loop counts against tokens_per_minute: one
// three-round request (630 tokens) leaves room for one more under a 1000
// TPM limit, not for a third.
func TestTokensPerMinuteCountsEveryLoopRound(t *testing.T) {
	t.Parallel()
	_, url := newToolServer(t, 0)
	cfg := strings.ReplaceAll(toolConfig, "{{HTTP}}", url) + `
[[limits]]
tenant = "*"
tokens_per_minute = 1000
`
	h := newHarness(t, cfg, mockllm.Options{Respond: twoRounds})
	for i, want := range []int{200, 200, 429} {
		status, hdr, body := chatRequest(t, h.base, "")
		if status != want {
			t.Fatalf("request %d: %d (want %d) %s", i, status, want, body)
		}
		if status == 429 && (gjson.GetBytes(body, "error.type").Str != "tokens" || hdr.Get("X-Ratelimit-Remaining-Tokens") != "0") {
			t.Fatalf("429: %s %v", body, hdr)
		}
		if i == 0 && hdr.Get("X-Ratelimit-Limit-Tokens") != "1000" {
			t.Fatalf("headers %v", hdr)
		}
	}
	if calls := h.mock.TotalCalls(); calls != 6 {
		t.Fatalf("upstream calls %d", calls)
	}
}

// A stream whose client did not ask for usage still counts its output
// tokens: the gateway asks the upstream for usage and takes the usage chunk,
// and the usage field of every other chunk, out of the client's stream.
func TestUnaskedStreamUsageIsCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+`
[[limits]]
tenant = "*"
tokens_per_minute = 1000000
`, mockllm.Options{Respond: mockllm.Sequence(mockllm.Turn{Text: "a streamed answer", Usage: &mockllm.Usage{Prompt: 7, Completion: 11}})})
	schema := wiretest.LoadSchema(t)
	acc, _, err := h.streamChat(userMsg("hi"), wiretest.Options{}, schema)
	if err != nil || acc.Choices[0].Message.Content != "a streamed answer" {
		t.Fatalf("stream: %v %+v", err, acc)
	}
	raw, _ := h.lastRaw()
	if strings.Contains(string(raw), `"usage"`) {
		// Neither the usage chunk nor the "usage": null the upstream puts
		// on every chunk once asked: OpenAI sends the field only to a
		// client that asks.
		t.Fatalf("the client got usage it did not ask for:\n%s", raw)
	}
	if !gjson.GetBytes(h.mock.Requests()[0].Body, "stream_options.include_usage").Bool() {
		t.Fatal("the upstream was not asked for usage")
	}
	status, _, body := getUsage(t, h.base, "")
	if status != 200 || gjson.GetBytes(body, "total.output_tokens").Int() != 11 || gjson.GetBytes(body, "total.input_tokens").Int() != 7 {
		t.Fatalf("usage record: %d %s", status, body)
	}
	// The default window is the last 30 days, today included.
	from, _ := time.Parse(time.DateOnly, gjson.GetBytes(body, "from").Str)
	to, _ := time.Parse(time.DateOnly, gjson.GetBytes(body, "to").Str)
	if days := int(to.Sub(from).Hours()/24) + 1; days != 30 {
		t.Fatalf("default window of %d days: %s", days, body)
	}
}

func getUsage(t *testing.T, base, key string) (int, http.Header, []byte) {
	t.Helper()
	return send(t, "GET", base+"/gateway/usage", key, "")
}

// Pass-through calls count against the tenant's request limits as chat
// calls do: 5 a minute are answered whichever route they take (embeddings,
// a file upload with no model, chat), and the next is refused 429. They
// used to take nothing from the limit.
func TestPassthroughCountsAgainstTheRateLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, limitsConfig+`
[[policies]]
tenant = "team"
passthrough = ["/v1/embeddings", "/v1/files"]
`, mockllm.Options{})
	upload := func() int {
		req, _ := http.NewRequest("POST", h.base+"/files", strings.NewReader("raw bytes"))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Authorization", "Bearer sk-team")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var statuses []int
	for range 3 {
		status, _, _ := send(t, "POST", h.base+"/embeddings", "sk-team", `{"model":"gpt-x","input":"hi"}`)
		statuses = append(statuses, status)
	}
	statuses = append(statuses, upload())
	status, _, _ := chatRequest(t, h.base, "sk-team")
	statuses = append(statuses, status)
	if slices.Contains(statuses, 429) {
		t.Fatalf("statuses %v: refused within the limit", statuses)
	}
	status, _, body := send(t, "POST", h.base+"/embeddings", "sk-team", `{"model":"gpt-x","input":"hi"}`)
	if status != 429 || gjson.GetBytes(body, "error.type").Str == "" {
		t.Fatalf("the sixth request in a minute: %d %s, want 429", status, body)
	}
	if status := upload(); status != 429 {
		t.Fatalf("an upload over the limit: %d, want 429", status)
	}
}

// Pass-through calls are metered as chat calls are: the usage their answer
// reports (a JSON embeddings answer, an SSE answer) goes to the usage
// record and to the tenant's budget, and a call whose answer reports none
// is charged its body's estimate; an answer that only shows a stored call's
// usage is not charged again. A budget spent through pass-through
// refuses the next chat call. They used to cost nothing.
func TestPassthroughIsMetered(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(strings.Split(limitsConfig, "[[limits]]")[0], "context_window = 1000\n", "context_window = 1000\n[models.price]\ninput = 2\noutput = 10\n", 1) + `
[[policies]]
tenant = "team"
passthrough = ["/v1/embeddings", "/v1/completions", "/v1/chat/completions/*"]
[[budgets]]
tenant = "team"
amount = 0.01
period = "day"
`
	h := newHarness(t, cfg, mockllm.Options{})
	report := func() gjson.Result {
		status, _, body := send(t, "GET", h.base+"/gateway/usage?group_by=tenant", "sk-ops", "")
		if status != 200 {
			t.Fatalf("usage report: %d %s", status, body)
		}
		return gjson.GetBytes(body, `data.#(group=="team")`)
	}
	for _, path := range []string{"/embeddings?usage=1000", "/completions?sse=3&usage=500"} {
		status, _, body := send(t, "POST", h.base+path, "sk-team", `{"model":"gpt-x","input":"a \"usage\":{\"prompt_tokens\":1}"}`)
		if status != 200 {
			t.Fatalf("%s: %d %s", path, status, body)
		}
		// Go's client asks for gzip; the gateway asks the provider for an
		// answer it can read the usage of.
		if strings.Contains(string(body), "gzip") || !strings.Contains(string(body), `"Accept-Encoding":"identity"`) {
			t.Fatalf("%s: the provider was not asked for an uncompressed answer: %s", path, body)
		}
	}
	// Updating a stored completion's metadata answers with the completion,
	// usage included: not a model call, and charged when the call was made.
	if status, _, body := send(t, "POST", h.base+"/chat/completions/chatcmpl_1?usage=777", "sk-team", `{"metadata":{"k":"v"}}`); status != 200 {
		t.Fatalf("stored completion: %d %s", status, body)
	}
	team := report()
	if team.Get("upstream_calls").Int() != 2 || team.Get("input_tokens").Int() != 1500 || team.Get("cost_microdollars").Int() != 3000 {
		t.Fatalf("after two pass-through calls reporting 1000 and 500 tokens and a stored completion's update: %s", team.Raw)
	}
	// No usage in the answer: the body's estimate counts.
	if status, _, body := send(t, "POST", h.base+"/embeddings", "sk-team", `{"model":"gpt-x","input":"`+strings.Repeat("word ", 100)+`"}`); status != 200 {
		t.Fatalf("no usage: %d %s", status, body)
	}
	if team := report(); team.Get("upstream_calls").Int() != 3 || team.Get("input_tokens").Int() <= 1500+50 {
		t.Fatalf("a call reporting no usage was not charged its estimate: %s", team.Raw)
	}
	// 4,000 more tokens at $2/M: 3,000 + 8,000 + the estimate's µ$ spend
	// the $0.01 budget; the next chat call is refused.
	if status, _, body := send(t, "POST", h.base+"/embeddings?usage=4000", "sk-team", `{"model":"gpt-x","input":"x"}`); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if status, _, body := chatRequest(t, h.base, "sk-team"); status != 429 || gjson.GetBytes(body, "error.code").Str != "insufficient_quota" {
		t.Fatalf("a chat call after the budget was spent through pass-through: %d %s", status, body)
	}
}

// A JSON call whose client leaves before the answer is charged an estimate
// of its input, as a stream the client leaves is: the provider had the
// request. It was charged nothing, so a tenant could spend the operator's
// money by leaving just before each answer.
func TestAbandonedJSONCallIsCharged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{FirstByteDelay: 2 * time.Second,
		Respond: mockllm.Sequence(mockllm.Turn{Text: "too late", Usage: &mockllm.Usage{Prompt: 7, Completion: 11}})})
	var before int64
	for _, c := range []struct{ path, body string }{
		{"/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"a question the client will not wait for"}]}`},
		{"/embeddings?delay=2000", `{"model":"gpt-x","input":"a text the client will not wait for"}`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("%s: the client got %d before it left", c.path, resp.StatusCode)
		}
		cancel()
		var body []byte
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, _, body = getUsage(t, h.base, "")
			if gjson.GetBytes(body, "total.input_tokens").Int() > before {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the abandoned call was not charged: %s", c.path, body)
			}
		}
		if n := gjson.GetBytes(body, "total.output_tokens").Int(); n != 0 {
			t.Fatalf("%s: output tokens %d of an answer never read", c.path, n)
		}
		before = gjson.GetBytes(body, "total.input_tokens").Int()
	}
}

// A stream whose client leaves after the upstream's head but before any
// content (a reasoning model's long first wait) is charged its input's
// estimate too; a stream that fails before content on the upstream's side
// is not (a fallback's failed attempt adds nothing).
func TestStreamLeftBeforeContentIsCharged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{ChunkDelay: 2 * time.Second,
		Respond: mockllm.Sequence(mockllm.Turn{Text: "late words", Usage: &mockllm.Usage{Prompt: 7, Completion: 11}})})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/chat/completions",
		strings.NewReader(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"think long about this"}]}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var body []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, _, body = getUsage(t, h.base, "")
		if gjson.GetBytes(body, "total.input_tokens").Int() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned stream was not charged: %s", body)
		}
	}
	// The provider's failure before any content costs nothing.
	cut := newHarness(t, baseConfig, mockllm.Options{
		Respond: mockllm.Sequence(mockllm.Turn{Text: "never shown", Fault: mockllm.CutFault(0)})})
	if status, _, raw := cut.post("/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil); status != http.StatusBadGateway {
		t.Fatalf("a stream cut before content: %d %s", status, raw)
	}
	if _, _, body := getUsage(t, cut.base, ""); gjson.GetBytes(body, "total.input_tokens").Int() != 0 {
		t.Fatalf("a stream the provider cut before content was charged: %s", body)
	}
}

// Every model call made for a request passes the tenant's budget, not only
// the loop's rounds: a prompted model's re-asks (each a model call) stop
// once the first call spent the budget, and the selector's call, made before
// the first round, can spend it too: then the first round is refused.
func TestBudgetStopsReasksAndTheRoundAfterASelector(t *testing.T) {
	t.Parallel()
	// Every model at $20 per million tokens: a 100-token call costs 2000
	// µ$, twice the budget.
	const price = "[models.price]\ninput = 20\noutput = 20\n"
	cfg := strings.Replace(baseConfig, "context_window = 1000\n", "context_window = 8000\n"+price, 1) + `
[[models]]
name = "txt"
provider = "up"
upstream = "txt-model"
tool_calling = "prompted"
[models.price]
input = 20
output = 20
[[models]]
name = "picker"
provider = "up"
upstream = "up-picker"
[models.price]
input = 20
output = 20
[[keys]]
name = "team-key"
tenant = "team"
key = "sk-team"
[[budgets]]
tenant = "team"
amount = 0.001
period = "day"
[tool_loop]
max_consecutive_errors = 3
[middleware.tool_select]
model = "picker"
max_tools = 5
`
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if _, ok := c.ToolSelection(); ok {
			t := mockllm.SelectTools("tool_01")
			t.Usage = &mockllm.Usage{Prompt: 100, Completion: 1}
			return t
		}
		// A weak model: a block that is not JSON, every time.
		return mockllm.Turn{Text: "Let me check.\n```tool_calls\nnot json\n```", Usage: &mockllm.Usage{Prompt: 100, Completion: 10}}
	}})
	client := openai.NewClient(option.WithBaseURL(h.base), option.WithAPIKey("sk-team"), option.WithMaxRetries(0))

	p := userMsg("check")
	promptedClientTools(&p)
	if _, err := client.Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatalf("the first call is admitted: %v", err)
	}
	if calls := h.mock.TotalCalls(); calls != 1 {
		t.Fatalf("%d upstream calls: the re-asks after the spent budget were sent", calls)
	}
	// An empty legacy functions list beside the tools offers nothing: the
	// request is the same, and so are its re-asks' admission.
	hf := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		return mockllm.Turn{Text: "Let me check.\n```tool_calls\nnot json\n```", Usage: &mockllm.Usage{Prompt: 100, Completion: 10}}
	}})
	body := `{"model":"txt","messages":[{"role":"user","content":"check"}],"functions":[],"tools":[{"type":"function","function":{"name":"lookup_city"}}]}`
	if status, _, raw := hf.post("/chat/completions", body, map[string]string{"Authorization": "Bearer sk-team"}); status != http.StatusOK {
		t.Fatalf("functions [] beside tools: %d %s", status, raw)
	}
	if calls := hf.mock.TotalCalls(); calls != 1 {
		t.Fatalf("functions [] beside tools: %d upstream calls: the re-asks after the spent budget were sent", calls)
	}
	// Under tool_choice "required" the refused re-ask is the budget's 429,
	// not a model that did not call (the model was asked once).
	weak := func(c *mockllm.Call) mockllm.Turn { // it answers without calling
		return mockllm.Turn{Text: "It is sunny.", Usage: &mockllm.Usage{Prompt: 100, Completion: 10}}
	}
	hr := newHarness(t, cfg, mockllm.Options{Respond: weak})
	required := userMsg("check")
	promptedClientTools(&required)
	required.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	rc := openai.NewClient(option.WithBaseURL(hr.base), option.WithAPIKey("sk-team"), option.WithMaxRetries(0))
	_, err := rc.Chat.Completions.New(context.Background(), required)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "insufficient_quota" || hr.mock.TotalCalls() != 1 {
		t.Fatalf("tool_choice required, re-ask refused by the budget: %v after %d calls", err, hr.mock.TotalCalls())
	}

	h.mock.ResetRecords()
	budget := strings.Replace(cfg, "amount = 0.001", "amount = 0.003", 1)
	h2 := newHarness(t, budget, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if _, ok := c.ToolSelection(); ok {
			t := mockllm.SelectTools("tool_01")
			t.Usage = &mockllm.Usage{Prompt: 200, Completion: 1} // 4020 µ$: over the budget
			return t
		}
		return mockllm.Turn{Text: "done"}
	}})
	client = openai.NewClient(option.WithBaseURL(h2.base), option.WithAPIKey("sk-team"), option.WithMaxRetries(0))
	p = userMsg("do thing 1")
	p.Model = "gpt-x"
	p.Tools = manyTools(10)
	_, err = client.Chat.Completions.New(context.Background(), p)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "insufficient_quota" {
		t.Fatalf("the round after a selector that spent the budget: %v", err)
	}
	for _, r := range h2.mock.Requests() {
		if r.Model != "up-picker" {
			t.Fatalf("the model was called after the selector spent the budget")
		}
	}
}
