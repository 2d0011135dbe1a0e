package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
)

// responsesAPI is a provider that serves the Responses API itself, as
// OpenAI does: POST /v1/responses creates a response (a JSON answer, or
// an event stream when the body says stream), kept under the one account
// the gateway calls it with; GET, DELETE and the sub-paths of
// /v1/responses/{id} reach any response it keeps. Every request it gets
// is recorded.
type responsesAPI struct {
	mu    sync.Mutex
	n     int
	calls []string // "METHOD path body"
}

func (u *responsesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b := make([]byte, 0, 512)
	buf := make([]byte, 512)
	for {
		n, err := r.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	u.mu.Lock()
	u.calls = append(u.calls, r.Method+" "+r.URL.Path+" "+string(b))
	u.n++
	id := fmt.Sprintf("resp_%d%s", u.n, strings.Repeat("x", 40))
	rs, msg := fmt.Sprintf("rs_%d%s", u.n, strings.Repeat("r", 40)), fmt.Sprintf("msg_%d%s", u.n, strings.Repeat("m", 40))
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		id = strings.TrimPrefix(r.URL.Path, "/v1/responses/")
		// A response read back (made in the background, say) has the
		// output items it has by now.
		fmt.Fprintf(w, `{"id":%q,"object":"response","status":"completed","output":[{"id":"msg_of_%s","type":"message"}]}`, id, strings.ReplaceAll(id, "/", "_"))
		return
	}
	// The object as the provider writes it: the id first, though a
	// nested "id" (an output item's) comes before the top level's end.
	// Its output items' ids are the response's own.
	reasoning := fmt.Sprintf(`{"id":%q,"type":"reasoning","summary":[]}`, rs)
	message := fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi \"there\"","annotations":[]}]}`, msg)
	obj := fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"status":"completed","model":"up-model",`+
		`"previous_response_id":%s,"output":[%s,%s],`+
		`"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}`, id, orNull(gjson.GetBytes(b, "previous_response_id").Raw), reasoning, message)
	if !gjson.GetBytes(b, "stream").Bool() {
		fmt.Fprint(w, obj)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	created := strings.Replace(obj, `"status":"completed"`, `"status":"in_progress"`, 1)
	created = created[:strings.Index(created, `"output":[`)] + `"output":[]}`
	fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":%s}\n\n", created)
	w.(http.Flusher).Flush()
	fmt.Fprintf(w, "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":%s}\n\n", reasoning)
	fmt.Fprintf(w, "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":1,\"item\":%s}\n\n", message)
	fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"item_id\":%q,\"output_index\":1,\"content_index\":0,\"delta\":\"hi\"}\n\n", msg)
	fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":4,\"response\":%s}\n\n", obj)
}

func orNull(raw string) string {
	if raw == "" {
		return "null"
	}
	return raw
}

// seen returns the number of requests the provider got.
func (u *responsesAPI) seen() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.calls)
}

// ownerConfig is a gateway with two tenants, a and b, whose model gpt-x's
// provider serves the Responses API natively and who may use every
// pass-through path ({{UP}} is that provider's base URL).
const ownerConfig = `
[server]
log_level = "warn"
[[providers]]
name = "up"
kind = "openai"
base_url = "{{UP}}"
api_key = "sk-upstream-secret"
retries = 0
responses = "native"
[[models]]
name = "gpt-x"
provider = "up"
upstream = "up-model"
[[keys]]
name = "a-key"
tenant = "a"
key = "sk-a"
[[keys]]
name = "b-key"
tenant = "b"
key = "sk-b"
[[policies]]
tenant = "*"
passthrough = ["/v1/*"]
`

// newOwnerHarness runs a gateway of ownerConfig (with extra appended) in
// front of up.
func newOwnerHarness(t *testing.T, up *responsesAPI, extra string) *harness {
	t.Helper()
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	return newHarness(t, strings.ReplaceAll(ownerConfig, "{{UP}}", srv.URL+"/v1")+extra, mockllm.Options{})
}

// createResponse has tenant key create a response through the native
// pass-through, JSON or streamed, and returns its id.
func createResponse(t *testing.T, base, key string, stream bool) string {
	t.Helper()
	status, _, body := send(t, "POST", base+"/responses", key, fmt.Sprintf(`{"model":"gpt-x","input":"hi","stream":%v}`, stream))
	if status != 200 {
		t.Fatalf("create (stream %v): %d %s", stream, status, body)
	}
	id := gjson.GetBytes(body, "id").Str
	if stream {
		_, data, _ := strings.Cut(string(body), "data: ")
		id = gjson.Get(data, "response.id").Str
	}
	if !strings.HasPrefix(id, "resp_") {
		t.Fatalf("create (stream %v): no id in %s", stream, body)
	}
	return id
}

// A response a tenant created through a native pass-through is that
// tenant's: another tenant naming it in previous_response_id, or reading,
// listing, cancelling or deleting it by its path, gets the 404 of an
// unknown stored response and the provider never sees the request; the
// tenant that created it continues and reads it. Ids the gateway never
// recorded (made before it kept records, or made up) are unknown too.
// Both used to reach the provider, which serves every response behind the
// gateway's one key to whoever names it.
func TestNativeResponsesAreTheirTenants(t *testing.T) {
	t.Parallel()
	up := &responsesAPI{}
	h := newOwnerHarness(t, up, "")
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			id := createResponse(t, h.base, "sk-a", stream)
			continueAs := func(key, prev string) (int, []byte) {
				status, _, body := send(t, "POST", h.base+"/responses", key, `{"model":"gpt-x","input":"and then?","previous_response_id":"`+prev+`"}`)
				return status, body
			}
			before := up.seen()
			for _, tc := range []struct {
				name, key, prev string
			}{
				{"another tenant's response", "sk-b", id},
				{"an id never recorded", "sk-a", "resp_madeup"},
			} {
				status, body := continueAs(tc.key, tc.prev)
				if status != 404 || gjson.GetBytes(body, "error.code").Str != "response_not_found" ||
					gjson.GetBytes(body, "error.param").Str != "previous_response_id" {
					t.Fatalf("%s: %d %s, want 404 response_not_found", tc.name, status, body)
				}
			}
			for _, tc := range []struct{ method, path string }{
				{"GET", "/responses/" + id},
				{"GET", "/responses/" + id + "/input_items"},
				{"POST", "/responses/" + id + "/cancel"},
				{"DELETE", "/responses/" + id},
			} {
				status, _, body := send(t, tc.method, h.base+tc.path, "sk-b", "")
				if status != 404 || gjson.GetBytes(body, "error.code").Str != "response_not_found" {
					t.Fatalf("tenant b: %s %s: %d %s, want 404 response_not_found", tc.method, tc.path, status, body)
				}
			}
			if n := up.seen(); n != before {
				t.Fatalf("the provider got %d of the refused requests", n-before)
			}
			status, body := continueAs("sk-a", id)
			if status != 200 || gjson.GetBytes(body, "previous_response_id").Str != id {
				t.Fatalf("tenant a continues its own response: %d %s", status, body)
			}
			if status, _, body := send(t, "GET", h.base+"/responses/"+id, "sk-a", ""); status != 200 || gjson.GetBytes(body, "id").Str != id {
				t.Fatalf("tenant a reads its own response: %d %s", status, body)
			}
			// The continuation is a's as well.
			next := gjson.GetBytes(body, "id").Str
			if status, body := continueAs("sk-b", next); status != 404 {
				t.Fatalf("tenant b continues a's continuation: %d %s", status, body)
			}
		})
	}
}

// What a native pass-through cannot scope by tenant is refused before it
// goes upstream: a conversation (400), a previous_response_id spelled
// twice or otherwise, which the gateway and a lenient provider might read
// differently (400), and a form under /v1/responses (415), whose fields a
// lenient provider may read as the request's.
func TestNativeResponsesRefuseWhatTheyCannotScope(t *testing.T) {
	t.Parallel()
	up := &responsesAPI{}
	h := newOwnerHarness(t, up, "")
	id := createResponse(t, h.base, "sk-a", false)
	before := up.seen()
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"conversation", `{"model":"gpt-x","input":"hi","conversation":"conv_1"}`, 400},
		{"conversation object", `{"model":"gpt-x","input":"hi","conversation":{"id":"conv_1"}}`, 400},
		{"a second previous_response_id", `{"model":"gpt-x","input":"hi","previous_response_id":"` + id + `","previous_response_id":"resp_theirs"}`, 400},
		{"another case", `{"model":"gpt-x","input":"hi","previous_response_id":"` + id + `","Previous_Response_Id":"resp_theirs"}`, 400},
		{"an escaped key", `{"model":"gpt-x","input":"hi","previous_response_id":"` + id + `","previous\u005fresponse_id":"resp_theirs"}`, 400},
		{"not a string", `{"model":"gpt-x","input":"hi","previous_response_id":["` + id + `"]}`, 400},
		// A background response's usage comes with a later GET no one
		// charges: limits and budgets would never see it.
		{"background", `{"model":"gpt-x","input":"hi","background":true}`, 400},
		{"background twice", `{"model":"gpt-x","input":"hi","background":false,"background":true}`, 400},
	} {
		status, _, body := send(t, "POST", h.base+"/responses", "sk-a", tc.body)
		if status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
		}
	}
	form := "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-x\r\n" +
		"--b\r\nContent-Disposition: form-data; name=\"previous_response_id\"\r\n\r\nresp_theirs\r\n--b--\r\n"
	req, _ := http.NewRequest("POST", h.base+"/responses", strings.NewReader(form))
	req.Header.Set("Authorization", "Bearer sk-a")
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("a form under /v1/responses: %d, want 415", resp.StatusCode)
	}
	if n := up.seen(); n != before {
		t.Fatalf("the provider got %d of the refused requests", n-before)
	}
}

// Replicas sharing Redis agree on who owns a provider's response: created
// through one gateway, it is continued through the other by its tenant
// and refused there to another. They do whatever the store of the
// gateway's own responses: with store = "none" or "memory" the owners
// were kept per replica, and the tenant's follow-up on the other was a 404.
func TestNativeResponseOwnersAcrossReplicas(t *testing.T) {
	t.Parallel()
	addr := testredis.Start(t).Addr()
	for _, store := range []string{"redis", "memory", "none"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			// A timeout that a loaded CI machine does not reach: the test
			// is about who owns a response, not about outages (a 503 under
			// a full parallel test run).
			extra := "\n[responses]\nstore = \"" + store + "\"\n[redis]\naddr = \"" + addr + "\"\ntimeout = \"5s\"\nprefix = \"owner-test-" + store + ":\"\n"
			up := &responsesAPI{}
			one, two := newOwnerHarness(t, up, extra), newOwnerHarness(t, up, extra)
			for _, stream := range []bool{false, true} {
				id := createResponse(t, one.base, "sk-a", stream)
				cont := `{"model":"gpt-x","input":"and then?","previous_response_id":"` + id + `"}`
				if status, _, body := send(t, "POST", two.base+"/responses", "sk-b", cont); status != 404 {
					t.Fatalf("stream %v: tenant b on the other replica: %d %s, want 404", stream, status, body)
				}
				if status, _, body := send(t, "POST", two.base+"/responses", "sk-a", cont); status != 200 {
					t.Fatalf("stream %v: tenant a on the other replica: %d %s", stream, status, body)
				}
			}
		})
	}
}
