package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/mockllm"
	gwresponses "github.com/llmgw/gateway/responses"
)

// inputTokensConfig: tenants a and b may use gpt-x; tenant c only another
// model, tenant d no pass-through path (so not /v1/responses either),
// tenant e the path input_tokens but not /v1/responses.
const inputTokensConfig = baseConfig + `
[[models]]
name = "gpt-other"
provider = "up"
upstream = "up-other"
[[keys]]
name = "a-key"
key = "sk-a"
tenant = "a"
[[keys]]
name = "b-key"
key = "sk-b"
tenant = "b"
[[keys]]
name = "c-key"
key = "sk-c"
tenant = "c"
[[keys]]
name = "d-key"
key = "sk-d"
tenant = "d"
[[policies]]
tenant = "c"
models = ["gpt-other"]
[[keys]]
name = "e-key"
key = "sk-e"
tenant = "e"
[[policies]]
tenant = "d"
passthrough = []
[[policies]]
tenant = "e"
passthrough = ["/v1/responses/input_tokens"]
`

// translatedCount is what the gateway's tokenizer counts for params
// translated as a create is, without a previous response.
func translatedCount(t *testing.T, params responses.InputTokenCountParams) int64 {
	t.Helper()
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	rq, err := gwresponses.Translate(body, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := contextedit.CounterFor("")
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Count(rq.Chat)
	if err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

// POST /v1/responses/input_tokens for a model the gateway serves through
// its own Responses API, with the real openai-go client: the count is the
// tokenizer's count of the request translated as a create would be
// (instructions, input, tools, the format's schema, a stored previous
// response), no model is called, and the create's policy applies: a key,
// the tenant's path and model, the tenant's own stored responses.
func TestResponsesInputTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, inputTokensConfig, mockllm.Options{Respond: responsesModel})
	ctx := context.Background()
	asA, asB := option.WithAPIKey("sk-a"), option.WithAPIKey("sk-b")
	count := func(p responses.InputTokenCountParams, opts ...option.RequestOption) int64 {
		t.Helper()
		r, err := h.client.Responses.InputTokens.Count(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := h.lastRaw()
		if gjson.GetBytes(raw, "object").Str != "response.input_tokens" || r.InputTokens <= 0 {
			t.Fatalf("answer: %s", raw)
		}
		return r.InputTokens
	}
	params := func(input string) responses.InputTokenCountParams {
		return responses.InputTokenCountParams{
			Model:        openai.String("gpt-x"),
			Instructions: openai.String("be brief"),
			Input:        responses.InputTokenCountParamsInputUnion{OfString: openai.String(input)},
		}
	}

	short := params("hello")
	n := count(short, asA)
	if want := translatedCount(t, short); n != want {
		t.Fatalf("count %d, the tokenizer counts %d", n, want)
	}
	long := params("hello, and a much longer question about the weather in Zürich tomorrow morning")
	if m := count(long, asA); m <= n || m != translatedCount(t, long) {
		t.Fatalf("longer input: %d after %d", m, n)
	}
	tooled := short
	tooled.Tools = []responses.ToolUnionParam{weatherTool}
	if m := count(tooled, asA); m <= n || m != translatedCount(t, tooled) {
		t.Fatalf("with a tool: %d after %d", m, n)
	}
	// A structured output's schema reaches the prompt too.
	formatted := short
	formatted.Text.Format.OfJSONSchema = &responses.ResponseFormatTextJSONSchemaConfigParam{
		Name:   "weather",
		Schema: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}
	if m := count(formatted, asA); m <= n {
		t.Fatalf("with a format: %d after %d", m, n)
	}
	if calls := h.mock.TotalCalls(); calls != 0 {
		t.Fatalf("counting called the model %d times", calls)
	}

	// A stored response's conversation counts too, for its tenant only.
	r, err := h.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("remember this long sentence about the weather")},
	}, asA)
	if err != nil {
		t.Fatal(err)
	}
	follow := short
	follow.PreviousResponseID = openai.String(r.ID)
	if m := count(follow, asA); m <= n {
		t.Fatalf("with the previous response: %d, without %d", m, n)
	}
	var apiErr *openai.Error
	for _, id := range []string{r.ID, "resp_unknown"} {
		_, err := h.client.Responses.InputTokens.Count(ctx, responses.InputTokenCountParams{
			Model: openai.String("gpt-x"), PreviousResponseID: openai.String(id),
			Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("and now?")},
		}, asB)
		if !asStatus(err, &apiErr, http.StatusNotFound) || apiErr.Code != "response_not_found" || apiErr.Param != "previous_response_id" {
			t.Fatalf("tenant b counted with %s: %v", id, err)
		}
	}

	// The create's policy: a key, the path, the model; the envelope's codes.
	for _, tc := range []struct {
		key    string
		model  string
		status int
		code   string
	}{
		{"sk-wrong", "gpt-x", http.StatusUnauthorized, "invalid_api_key"},
		{"sk-c", "gpt-x", http.StatusNotFound, "model_not_found"},
		{"sk-d", "gpt-x", http.StatusForbidden, "path_not_allowed"},
		{"sk-e", "gpt-x", http.StatusForbidden, "path_not_allowed"},
		{"sk-a", "no-such-model", http.StatusNotFound, "model_not_found"},
	} {
		p := short
		p.Model = openai.String(tc.model)
		_, err := h.client.Responses.InputTokens.Count(ctx, p, option.WithAPIKey(tc.key))
		if !asStatus(err, &apiErr, tc.status) || apiErr.Code != tc.code {
			t.Fatalf("%s on %s: %v, want %d %s", tc.key, tc.model, err, tc.status, tc.code)
		}
	}
	if m := count(responses.InputTokenCountParams{Model: openai.String("gpt-other"),
		Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("hello")}}, option.WithAPIKey("sk-c")); m <= 0 {
		t.Fatalf("tenant c on its model: %d", m)
	}

	// Only POST: the path names no stored response.
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		status, hdr, body := send(t, method, h.base+"/responses/input_tokens", "sk-a", "")
		if status != http.StatusMethodNotAllowed || hdr.Get("Allow") != http.MethodPost || gjson.GetBytes(body, "error.code").Str != "method_not_allowed" {
			t.Fatalf("%s: %d %v %s", method, status, hdr, body)
		}
	}
	if calls := h.mock.TotalCalls(); calls != 1 {
		t.Fatalf("model calls %d, want the one create", calls)
	}
}

// Rate limits count an input_tokens request as any request, and its
// answer says so in the x-ratelimit-* headers, as any request's does.
func TestResponsesInputTokensLimited(t *testing.T) {
	t.Parallel()
	h := newHarness(t, limitsConfig, mockllm.Options{Respond: responsesModel})
	body := `{"model":"gpt-x","input":"hello"}`
	for i := range 5 {
		status, hdr, b := send(t, http.MethodPost, h.base+"/responses/input_tokens", "sk-team", body)
		if status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, status, b)
		}
		if hdr.Get("X-Ratelimit-Limit-Requests") != "5" || hdr.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(4-i) {
			t.Fatalf("request %d's headers: %v", i, hdr)
		}
	}
	status, _, b := send(t, http.MethodPost, h.base+"/responses/input_tokens", "sk-team", body)
	if status != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").Str != "rate_limit_exceeded" {
		t.Fatalf("sixth request: %d %s", status, b)
	}
}

// Counting calls no model, so it takes a request from the tenant's limits
// but none of its tokens_per_minute: a client that counts before it sends
// (what the endpoint is for) can still send.
func TestResponsesInputTokensTakeNoTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig+`
[[keys]]
name = "team-key"
tenant = "team"
key = "sk-team"
[[limits]]
tenant = "team"
tokens_per_minute = 3000
`, mockllm.Options{Respond: responsesModel})
	body := `{"model":"gpt-x","input":"` + strings.Repeat("hello world ", 200) + `"}`
	for i := range 15 {
		if status, _, b := send(t, http.MethodPost, h.base+"/responses/input_tokens", "sk-team", body); status != http.StatusOK {
			t.Fatalf("count %d (no model called) refused: %d %s", i, status, b)
		}
	}
	if status, _, b := send(t, http.MethodPost, h.base+"/responses", "sk-team", body); status != http.StatusOK {
		t.Fatalf("the create after counting: %d %s", status, b)
	}
}

// POST /v1/responses/compact for a model the gateway serves is refused
// with a clear envelope, without a model call; GET is a 405.
func TestResponsesCompactUnsupported(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseConfig, mockllm.Options{Respond: responsesModel})
	_, err := h.client.Responses.Compact(context.Background(), responses.ResponseCompactParams{
		Model: "gpt-x", Input: responses.ResponseCompactParamsInputUnion{OfString: openai.String("hello")},
	})
	var apiErr *openai.Error
	if !asStatus(err, &apiErr, http.StatusBadRequest) || apiErr.Param != "model" || !strings.Contains(apiErr.Message, "not supported") {
		t.Fatalf("compact: %v", err)
	}
	status, hdr, _ := send(t, http.MethodGet, h.base+"/responses/compact", "", "")
	if status != http.StatusMethodNotAllowed || hdr.Get("Allow") != http.MethodPost {
		t.Fatalf("GET compact: %d %v", status, hdr)
	}
	if calls := h.mock.TotalCalls(); calls != 0 {
		t.Fatalf("compact called the model %d times", calls)
	}
}

// For a model whose provider serves the Responses API natively, both
// collections still pass through to it, on the tenant's allow-list by
// their own paths; other models are answered here.
func TestResponsesCollectionsNative(t *testing.T) {
	t.Parallel()
	cfg := withNativeResponses(baseConfig)
	h := newHarness(t, cfg+openPassthrough, mockllm.Options{Respond: responsesModel})
	for _, path := range []string{"/responses/input_tokens", "/responses/compact"} {
		status, _, body := h.post(path, `{"model":"gpt-x","input":"hi"}`, nil)
		if status != 200 || gjson.GetBytes(body, "path").Str != "/v1"+path || gjson.GetBytes(body, "body").Str != `{"model":"up-model","input":"hi"}` {
			t.Fatalf("native %s: %d %s", path, status, body)
		}
	}
	status, _, body := h.post("/responses/input_tokens", `{"model":"translated","input":"hi"}`, nil)
	if status != 200 || gjson.GetBytes(body, "object").Str != "response.input_tokens" || gjson.GetBytes(body, "input_tokens").Int() <= 0 {
		t.Fatalf("translated: %d %s", status, body)
	}
	// A provider's collection is its own path: off the default allow-list.
	h = newHarness(t, cfg, mockllm.Options{Respond: responsesModel})
	status, _, body = h.post("/responses/input_tokens", `{"model":"gpt-x","input":"hi"}`, nil)
	if status != http.StatusForbidden || gjson.GetBytes(body, "error.code").Str != "path_not_allowed" {
		t.Fatalf("native under the default allow-list: %d %s", status, body)
	}
	status, _, body = h.post("/responses/input_tokens", `{"model":"translated","input":"hi"}`, nil)
	if status != 200 || gjson.GetBytes(body, "input_tokens").Int() <= 0 {
		t.Fatalf("translated under the default allow-list: %d %s", status, body)
	}
}

// A chat call without a valid key is a 401 whatever its body: the key is
// checked before the body is read, as on every other route, so a caller
// without one learns nothing of the body's checks nor which models exist.
// With the key, the same bodies get their own errors.
func TestChatKeyBeforeBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, inputTokensConfig, mockllm.Options{Respond: responsesModel})
	for _, body := range []string{`{}`, `{"model":"gpt-x","messages":[]}`, `not json`, `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`} {
		for _, key := range []string{"", "sk-wrong"} {
			status, _, b := send(t, http.MethodPost, h.base+"/chat/completions", key, body)
			if status != http.StatusUnauthorized || gjson.GetBytes(b, "error.type").Str != "invalid_request_error" {
				t.Errorf("key %q, body %s: %d %s", key, body, status, b)
			}
		}
		if status, _, b := send(t, http.MethodPost, h.base+"/chat/completions", "sk-a", body); status != http.StatusBadRequest && status != http.StatusNotFound {
			t.Errorf("valid key, body %s: %d %s", body, status, b)
		}
	}
	if h.mock.TotalCalls() != 0 {
		t.Fatalf("%d model calls", h.mock.TotalCalls())
	}
}

// A stored response's routes (GET, its input_items, DELETE) read the
// store: each is a request to its tenant's limits, with the headers, as a
// pass-through request naming no model is.
func TestStoredResponseRoutesLimited(t *testing.T) {
	t.Parallel()
	h := newHarness(t, limitsConfig, mockllm.Options{Respond: responsesModel})
	status, _, b := send(t, http.MethodPost, h.base+"/responses", "sk-team", `{"model":"gpt-x","input":"hello"}`)
	id := gjson.GetBytes(b, "id").Str
	if status != http.StatusOK || id == "" {
		t.Fatalf("create: %d %s", status, b)
	}
	for i, p := range []string{"/responses/" + id, "/responses/" + id + "/input_items", "/responses/" + id, "/responses/resp_unknown"} {
		status, hdr, b := send(t, http.MethodGet, h.base+p, "sk-team", "")
		want := http.StatusOK
		if i == 3 {
			want = http.StatusNotFound
		}
		if status != want || hdr.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(3-i) {
			t.Fatalf("GET %s (request %d): %d %v %s", p, i+2, status, hdr, b)
		}
	}
	status, hdr, b := send(t, http.MethodDelete, h.base+"/responses/"+id, "sk-team", "")
	if status != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").Str != "rate_limit_exceeded" || hdr.Get("Retry-After") == "" {
		t.Fatalf("sixth request: %d %v %s", status, hdr, b)
	}
	// Another tenant's limits are its own.
	if status, _, b := send(t, http.MethodGet, h.base+"/responses/"+id, "sk-ops", ""); status != http.StatusNotFound {
		t.Fatalf("another tenant: %d %s", status, b)
	}
}
