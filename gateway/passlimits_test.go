package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// heldUpstream is a provider whose pass-through calls wait for the test:
// ?hold=1 answers JSON once release is closed; ?sse=1 sends one event at
// once and the rest once release is closed; ?status=N answers that error
// at once; any other call answers at once. Every call's query goes to
// arrived as it reaches the provider.
type heldUpstream struct {
	arrived chan string
	release atomic.Pointer[chan struct{}]
	done    chan struct{} // closed when the test ends: nothing waits any longer
}

// wait waits for release, or the end of the test.
func (u *heldUpstream) wait(release chan struct{}) {
	select {
	case <-release:
	case <-u.done:
	}
}

// hold starts a new round of held calls, answered when the returned
// channel is closed.
func (u *heldUpstream) hold() chan struct{} {
	c := make(chan struct{})
	u.release.Store(&c)
	return c
}

func (u *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	release := *u.release.Load()
	u.arrived <- r.URL.RawQuery
	q := r.URL.Query()
	if s := q.Get("status"); s != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"message":"boom","type":"server_error"}}`)
		return
	}
	if q.Get("sse") != "" {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":0}\n\n")
		w.(http.Flusher).Flush()
		u.wait(release)
		fmt.Fprint(w, "data: {\"n\":1,\"usage\":{\"prompt_tokens\":1,\"total_tokens\":1}}\n\ndata: [DONE]\n\n")
		return
	}
	if q.Get("hold") != "" {
		u.wait(release)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"object":"list","data":[],"usage":{"prompt_tokens":1,"total_tokens":1}}`)
}

// A pass-through request holds one of its tenant's slots in flight for its
// whole life, as a chat request does, and gives it back however it ends:
// with concurrent = 2, two embeddings calls the provider is still
// answering (JSON, or a stream that has begun) leave no slot for a third
// call on any route, chat included; after a stream's end, a client that
// left, and error answers, the slots are free again. Pass-through calls
// used to hold none: 30 parallel calls of a tenant limited to 2 were all
// answered.
func TestPassthroughHoldsASlotInFlight(t *testing.T) {
	t.Parallel()
	up := &heldUpstream{arrived: make(chan string, 64), done: make(chan struct{})}
	up.hold()
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(up.done) }) // before srv.Close, which waits for its handlers
	h := newHarness(t, strings.ReplaceAll(strings.ReplaceAll(limitsConfig, "requests_per_minute = 5", "concurrent = 2"), "{{MOCK}}", srv.URL+"/v1")+`
[[policies]]
tenant = "team"
passthrough = ["/v1/embeddings"]
`, mockllm.Options{})
	embed := func(query string) (int, []byte) {
		status, _, body := send(t, "POST", h.base+"/embeddings"+query, "sk-team", `{"model":"gpt-x","input":"hi"}`)
		return status, body
	}
	refused := func(what string) {
		t.Helper()
		if status, body := embed(""); status != 429 || gjson.GetBytes(body, "error.code").Str != "rate_limit_exceeded" {
			t.Fatalf("%s: a third embeddings call: %d %s, want 429 rate_limit_exceeded", what, status, body)
		}
		if status, _, body := chatRequest(t, h.base, "sk-team"); status != 429 {
			t.Fatalf("%s: a chat call: %d %s, want 429", what, status, body)
		}
	}

	// Two JSON answers the provider has not given yet.
	release := up.hold()
	done := make(chan int, 2)
	for range 2 {
		go func() {
			status, _ := embed("?hold=1")
			done <- status
		}()
	}
	<-up.arrived
	<-up.arrived
	refused("two JSON calls in flight")
	close(release)
	for range 2 {
		if status := <-done; status != 200 {
			t.Fatalf("a held call: %d", status)
		}
	}

	// Two streams under way: one client reads to the end, one leaves.
	release = up.hold()
	var bodies [2]*http.Response
	for i := range bodies {
		req, _ := http.NewRequest("POST", h.base+"/embeddings?sse=1", strings.NewReader(`{"model":"gpt-x","input":"hi"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-team")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); resp.StatusCode != 200 || err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("stream %d: %d %q %v", i, resp.StatusCode, line, err)
		}
		bodies[i] = resp
		<-up.arrived
	}
	refused("two streams in flight")
	bodies[0].Body.Close() // this client leaves
	close(release)
	if b, err := io.ReadAll(bodies[1].Body); err != nil || !strings.Contains(string(b), "[DONE]") {
		t.Fatalf("the stream read to its end: %q %v", b, err)
	}

	// Error answers, more of them than there are slots.
	for range 3 {
		if status, body := embed("?status=500"); status < 500 {
			t.Fatalf("an error answer: %d %s", status, body)
		}
		<-up.arrived
	}
	// Every slot is free again: one call held, and another passes. (The
	// stream whose client left frees its slot when the gateway sees the
	// end of it, which the test does not see: it waits for it.)
	release = up.hold()
	go func() {
		status, _ := embed("?hold=1")
		done <- status
	}()
	<-up.arrived
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, body := embed("")
		if status == 200 {
			<-up.arrived
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with one call in flight, another: %d %s: a slot stayed taken", status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	if status := <-done; status != 200 {
		t.Fatalf("the last held call: %d", status)
	}
}

// A pass-through call is checked against tokens_per_minute before it goes
// upstream, with its input estimated as chat's is: a prompt larger than a
// whole minute's worth is refused with the 429 chat gives
// (request_too_large_for_limit), on every model endpoint, and never
// reaches the provider. The estimate taken is not charged again when the
// answer's usage arrives: three calls of about 300 tokens fit a limit of
// 1,000, and the fourth waits. Pass-through calls used to take no tokens
// before the call: a 20,000-word prompt passed a limit of 1,000.
func TestPassthroughTokensAreCheckedBeforeTheCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.ReplaceAll(limitsConfig, "requests_per_minute = 5", "tokens_per_minute = 1000")+`
[[policies]]
tenant = "team"
passthrough = ["/v1/embeddings", "/v1/completions"]
`, mockllm.Options{})
	huge := strings.Repeat("word ", 20000)
	status, _, body := send(t, "POST", h.base+"/chat/completions", "sk-team", `{"model":"gpt-x","messages":[{"role":"user","content":"`+huge+`"}]}`)
	want := gjson.GetBytes(body, "error.code").Str
	if status != 429 || want != "request_too_large_for_limit" {
		t.Fatalf("chat: %d %s", status, body)
	}
	for _, c := range []struct{ path, body string }{
		{"/completions", `{"model":"gpt-x","prompt":"` + huge + `"}`},
		{"/embeddings", `{"model":"gpt-x","input":["` + huge + `"]}`},
	} {
		if status, _, body := send(t, "POST", h.base+c.path, "sk-team", c.body); status != 429 || gjson.GetBytes(body, "error.code").Str != want {
			t.Fatalf("%s: %d %s, want 429 %s as chat", c.path, status, body, want)
		}
	}
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("%d calls reached the provider", n)
	}
	prompt := `{"model":"gpt-x","prompt":"` + strings.Repeat("word ", 300) + `"}`
	for i := range 3 {
		if status, _, body := send(t, "POST", h.base+"/completions?usage=300", "sk-team", prompt); status != 200 {
			t.Fatalf("call %d of about 300 tokens: %d %.300s", i+1, status, body)
		}
	}
	if status, hdr, body := send(t, "POST", h.base+"/completions?usage=300", "sk-team", prompt); status != 429 ||
		gjson.GetBytes(body, "error.code").Str != "rate_limit_exceeded" || hdr.Get("Retry-After") == "" {
		t.Fatalf("a fourth call of about 300 tokens: %d %s", status, body)
	}
}

// A /v1/responses request is admitted by the tenant's limits once, whether
// the pipeline translates it to chat or its model's provider serves it
// natively (passed through): with 5 requests a minute, five of them are
// answered and the usage record counts each once. A translated one used
// to be admitted by the pass-through route and again by the pipeline: it
// took two requests from the limit and showed twice in usage.
func TestResponsesAreAdmittedOnce(t *testing.T) {
	t.Parallel()
	cfg := withNativeResponses(limitsConfig)
	h := newHarness(t, cfg, mockllm.Options{})
	respond := func(model string) int {
		status, _, _ := send(t, "POST", h.base+"/responses", "sk-team", `{"model":"`+model+`","input":"hi"}`)
		return status
	}
	for i, model := range []string{"translated", "translated", "gpt-x"} {
		if status := respond(model); status != 200 {
			t.Fatalf("request %d (%s): %d", i+1, model, status)
		}
	}
	status, _, body := send(t, "GET", h.base+"/gateway/usage?group_by=tenant", "sk-ops", "")
	if n := gjson.GetBytes(body, `data.#(group=="team").requests`).Int(); status != 200 || n != 3 {
		t.Fatalf("usage after three /v1/responses requests: %d requests: %s", n, body)
	}
	for i, model := range []string{"translated", "gpt-x"} {
		if status := respond(model); status != 200 {
			t.Fatalf("request %d of 5 a minute (%s): %d", i+4, model, status)
		}
	}
	if status := respond("translated"); status != 429 {
		t.Fatalf("a sixth request in a minute: %d, want 429", status)
	}
}

// A model the config does not name, passed through with
// passthrough_unknown_models, spends its tenant's budget at the default
// list price of its name's prefix: a gpt-4o snapshot's 4,000 input tokens
// spend a $0.01 budget and the next call is refused. A model no price is
// known for is refused under a budget (403 model_not_priced) before it
// reaches the provider. Both used to be free.
func TestPassthroughOfAnUnconfiguredModelSpendsTheBudget(t *testing.T) {
	t.Parallel()
	cfg := teamBudgetConfig(true, `models = ["gpt-4o*", "mystery*"]`)
	h := newHarness(t, cfg, mockllm.Options{})
	embed := func(model, query string) (int, []byte) {
		status, _, body := send(t, "POST", h.base+"/embeddings"+query, "sk-team", `{"model":"`+model+`","input":"hi"}`)
		return status, body
	}
	if status, body := embed("mystery-embed", "?usage=10"); status != 403 || gjson.GetBytes(body, "error.code").Str != "model_not_priced" {
		t.Fatalf("a model without a price under a budget: %d %s", status, body)
	}
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("%d calls reached the provider", n)
	}
	if status, body := embed("gpt-4o-2024-11-20", "?usage=4000"); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if status, body := embed("gpt-4o-2024-11-20", "?usage=1"); status != 429 || gjson.GetBytes(body, "error.code").Str != "insufficient_quota" {
		t.Fatalf("after $0.01 of gpt-4o on a $0.01 budget: %d %s", status, body)
	}
}

// A compaction passed through (POST /v1/responses/compact of a model the
// gateway does not serve) is a model call: metered like any, so its
// tokens spend the budget (it was charged nothing, every time).
func TestPassthroughCompactionIsMetered(t *testing.T) {
	t.Parallel()
	cfg := teamBudgetConfig(true, "models = [\"gpt-4o*\"]\npassthrough = [\"/v1/responses/compact\"]")
	h := newHarness(t, cfg, mockllm.Options{})
	compact := func(query string) (int, []byte) {
		status, _, body := send(t, "POST", h.base+"/responses/compact"+query, "sk-team", `{"model":"gpt-4o-2024-11-20","input":"hi"}`)
		return status, body
	}
	if status, body := compact("?usage=4000"); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if status, body := compact("?usage=1"); status != 429 || gjson.GetBytes(body, "error.code").Str != "insufficient_quota" {
		t.Fatalf("after $0.01 of compaction on a $0.01 budget: %d %s", status, body)
	}
}

// A call of a model endpoint whose body names no model (which an upstream
// serving one model answers with it) cannot be priced: under a budget it
// is refused before it reaches the provider (403 model_not_priced), as an
// unpriced model is, instead of spending nothing. Without a budget it
// still passes, and a path that calls no model is not affected.
func TestPassthroughWithoutModelUnderABudget(t *testing.T) {
	t.Parallel()
	cfg := teamBudgetConfig(false, `passthrough = ["/v1/*"]`)
	h := newHarness(t, cfg, mockllm.Options{})
	for _, c := range []struct{ path, body string }{
		{"/completions", `{"prompt":"hi","max_tokens":5}`},
		{"/embeddings", `{"input":"hi"}`},
		{"/responses", `{"input":"hi"}`},
	} {
		status, _, body := send(t, "POST", h.base+c.path+"?usage=100000", "sk-team", c.body)
		if status != 403 || gjson.GetBytes(body, "error.code").Str != "model_not_priced" {
			t.Errorf("%s without a model under a budget: %d %s", c.path, status, body)
		}
	}
	if n := len(h.mock.Requests()); n != 0 {
		t.Fatalf("%d calls reached the provider", n)
	}
	if status, _, body := send(t, "POST", h.base+"/files", "sk-team", `{"purpose":"batch"}`); status != 200 {
		t.Errorf("a path that calls no model: %d %s", status, body)
	}
	// The SDKs' moderations.create sends no model (it is optional), and
	// moderations cost nothing: no budget is at stake.
	if status, _, body := send(t, "POST", h.base+"/moderations", "sk-team", `{"input":"hi"}`); status != 200 {
		t.Errorf("moderations without a model under a budget: %d %s", status, body)
	}
	if status, _, body := send(t, "POST", h.base+"/embeddings", "sk-ops", `{"input":"hi"}`); status != 200 {
		t.Errorf("without a budget: %d %s", status, body)
	}
}

// A call of a model endpoint whose body names no model (the SDKs make it
// optional for images, and a Responses call of a saved prompt) may be a
// call of any model: it passes, and counts against every rate rule of its
// tenant, the per-model rule too, whose counter the calls naming the model
// share. A path that calls no model, a moderation, and a tenant whose rules
// are tenant-wide are counted as before. Such calls used to be refused
// (400, param model) under a per-model rule, and before that got around it.
func TestPassthroughWithoutModelUnderAPerModelRule(t *testing.T) {
	t.Parallel()
	cfg := strings.Split(limitsConfig, "[[limits]]")[0] + `
[[policies]]
tenant = "team"
passthrough = ["/v1/*"]
[[limits]]
tenant = "team"
model = "gpt-x"
requests_per_minute = 3
`
	h := newHarness(t, cfg, mockllm.Options{})
	for _, c := range []struct{ path, body string }{
		{"/images/generations", `{"prompt":"a cat"}`},
		{"/embeddings", `{"input":"hi"}`},
		{"/files", `{"purpose":"batch"}`},
		{"/moderations", `{"input":"hi"}`},
	} {
		if status, _, body := send(t, "POST", h.base+c.path, "sk-team", c.body); status != 200 {
			t.Errorf("%s without a model under a per-model rule: %d %s, want 200", c.path, status, body)
		}
	}
	if status, _, body := send(t, "POST", h.base+"/embeddings", "sk-ops", `{"input":"hi"}`); status != 200 {
		t.Errorf("a tenant without per-model rules: %d %s", status, body)
	}
	// The two model calls that named none took two of gpt-x's three
	// requests (the file and the moderation none).
	for i, want := range []int{200, 429} {
		if status, _, body := send(t, "POST", h.base+"/embeddings", "sk-team", `{"model":"gpt-x","input":"hi"}`); status != want {
			t.Fatalf("call %d naming the model: %d %s, want %d", i+1, status, body, want)
		}
	}
	if status, _, body := send(t, "POST", h.base+"/images/generations", "sk-team", `{"prompt":"a cat"}`); status != 429 {
		t.Fatalf("a call naming no model once gpt-x's requests are spent: %d %s, want 429", status, body)
	}
}

// sendHTTP10 POSTs a JSON body to rawURL as an HTTP/1.0 client and reads
// the answer to the connection's end.
func sendHTTP10(t *testing.T, rawURL, key, body string) (int, http.Header, []byte) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.0\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		u.RequestURI(), u.Host, key, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the answer's body: %v", err)
	}
	return resp.StatusCode, resp.Header, b
}

// accountLimitsUpstream is a provider that reports its account's rate
// limits on every answer, as OpenAI's API does (and in the IETF draft's
// fields, as some servers do): the counters of the one account every
// tenant of the gateway shares. ?status=429 answers a rate limit error
// with retry-after-ms; ?sse=1 answers a stream of events.
type accountLimitsUpstream struct{}

func (accountLimitsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for k, v := range map[string]string{
		"X-Ratelimit-Limit-Requests": "10000", "X-Ratelimit-Remaining-Requests": "9321", "X-Ratelimit-Reset-Requests": "6ms",
		"X-Ratelimit-Limit-Tokens": "2000000", "X-Ratelimit-Remaining-Tokens": "1999000", "X-Ratelimit-Reset-Tokens": "30ms",
		"Anthropic-Ratelimit-Requests-Remaining": "49", "X-Ratelimit": "odd", "Ratelimit": `"default";r=50;t=30`,
		"Ratelimit-Policy": `"default";q=100;w=60`, "Ratelimit-Remaining": "50",
	} {
		h.Set(k, v)
	}
	if r.URL.Query().Get("sse") == "1" {
		h.Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"object\":\"text_completion\",\"choices\":[{\"text\":\"hi\"}]}\n\n")
		w.(http.Flusher).Flush()
		fmt.Fprint(w, "data: {\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\ndata: [DONE]\n\n")
		return
	}
	h.Set("Content-Type", "application/json")
	if r.URL.Query().Get("status") == "429" {
		h.Set("Retry-After-Ms", "1500")
		h.Set("Retry-After", "2")
		w.WriteHeader(429)
		fmt.Fprint(w, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)
		return
	}
	fmt.Fprint(w, `{"object":"list","data":[],"usage":{"prompt_tokens":1,"total_tokens":1}}`)
}

// A pass-through answer never carries the provider account's rate-limit
// headers (x-ratelimit, x-ratelimit-*, anthropic-ratelimit-*, the IETF
// draft's ratelimit*), which count every tenant's traffic: a tenant with
// rate limits gets its own instead, as on the chat route (limit 5,
// remaining 4, 3, ...), on an answer, on the upstream's 429 (with the
// upstream's retry-after, as chat relays it), on an upload, on a streamed
// (SSE) answer, on the answer to an HTTP/1.0 client (written on the
// hijacked connection) and on the gateway's own 429; a tenant without
// limits gets none. The upstream's used to reach every client.
func TestPassthroughReportsTheTenantsRateLimits(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(accountLimitsUpstream{})
	t.Cleanup(srv.Close)
	h := newHarness(t, strings.ReplaceAll(limitsConfig, "{{MOCK}}", srv.URL+"/v1")+`
[[policies]]
tenant = "team"
passthrough = ["/v1/embeddings", "/v1/files", "/v1/completions"]
`, mockllm.Options{})
	embed := func(key, query string) (int, http.Header, []byte) {
		return send(t, "POST", h.base+"/embeddings"+query, key, `{"model":"gpt-x","input":"hi"}`)
	}
	noAccount := func(what string, hdr http.Header) {
		t.Helper()
		for k := range hdr {
			if lk := strings.ToLower(k); strings.HasPrefix(lk, "anthropic-ratelimit-") || strings.HasPrefix(lk, "ratelimit") || lk == "x-ratelimit" {
				t.Errorf("%s: the provider account's %s reached the client", what, k)
			}
		}
		for _, k := range []string{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"} {
			if v := hdr.Get(k); v != "" {
				t.Errorf("%s: %s = %q: the tenant has no token limit", what, k, v)
			}
		}
	}
	tenant := func(what string, hdr http.Header, remaining string) {
		t.Helper()
		noAccount(what, hdr)
		if l, r, reset := hdr.Get("X-Ratelimit-Limit-Requests"), hdr.Get("X-Ratelimit-Remaining-Requests"), hdr.Get("X-Ratelimit-Reset-Requests"); l != "5" || r != remaining || reset == "" || reset == "6ms" {
			t.Errorf("%s: x-ratelimit-*-requests = %q %q %q, want the tenant's: 5 %s and its reset", what, l, r, reset, remaining)
		}
	}

	status, hdr, body := embed("sk-team", "")
	if status != 200 {
		t.Fatalf("embeddings: %d %s", status, body)
	}
	tenant("an answer", hdr, "4")
	status, hdr, body = embed("sk-team", "?status=429")
	if status != 429 || hdr.Get("Retry-After") != "2" || hdr.Get("Retry-After-Ms") != "1500" || gjson.GetBytes(body, "error.code").Str != "rate_limit_exceeded" {
		t.Fatalf("the upstream's 429: %d retry-after %q retry-after-ms %q %s", status, hdr.Get("Retry-After"), hdr.Get("Retry-After-Ms"), body)
	}
	tenant("the upstream's 429", hdr, "3")
	// An upload (no model, streamed through) is limited as well.
	req, _ := http.NewRequest("POST", h.base+"/files", strings.NewReader("raw bytes"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", "Bearer sk-team")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tenant("an upload", resp.Header, "2")
	// A streamed answer (SSE) carries them in its head as well.
	status, hdr, body = send(t, "POST", h.base+"/completions?sse=1", "sk-team", `{"model":"gpt-x","prompt":"hi","stream":true}`)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("a streamed completion: %d %q %s", status, hdr.Get("Content-Type"), body)
	}
	tenant("a streamed answer", hdr, "1")
	// So does the answer to an HTTP/1.0 client, written on the hijacked
	// connection and ended by closing it.
	status, hdr, body = sendHTTP10(t, h.base+"/embeddings", "sk-team", `{"model":"gpt-x","input":"hi"}`)
	if status != 200 || !strings.Contains(string(body), `"object":"list"`) {
		t.Fatalf("embeddings over HTTP/1.0: %d %s", status, body)
	}
	tenant("an answer to an HTTP/1.0 client", hdr, "0")
	status, hdr, _ = embed("sk-team", "")
	if status != 429 || hdr.Get("Retry-After") == "" {
		t.Fatalf("the sixth call in a minute: %d, want 429 with retry-after", status)
	}
	tenant("the gateway's 429", hdr, "0")

	// A tenant without limits: none at all.
	status, hdr, body = embed("sk-ops", "")
	if status != 200 {
		t.Fatalf("embeddings without limits: %d %s", status, body)
	}
	noAccount("a tenant without limits", hdr)
	for k := range hdr {
		if strings.HasPrefix(strings.ToLower(k), "x-ratelimit-") {
			t.Errorf("a tenant without limits: %s = %q", k, hdr.Get(k))
		}
	}
}

// teamBudgetConfig is limitsConfig without its limits, with a $0.01 daily
// budget for tenant team, whose policy holds policy's lines; unknown lets
// a pass-through body name a model the config does not
// (server.passthrough_unknown_models).
func teamBudgetConfig(unknown bool, policy string) string {
	cfg := strings.Split(limitsConfig, "[[limits]]")[0]
	if unknown {
		cfg = strings.Replace(cfg, `log_level = "warn"`, "log_level = \"warn\"\npassthrough_unknown_models = true", 1)
	}
	return cfg + "\n[[policies]]\ntenant = \"team\"\n" + policy + "\n[[budgets]]\ntenant = \"team\"\namount = 0.01\nperiod = \"day\"\n"
}
